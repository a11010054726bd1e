// Chaos: kvroute in front of 8 simulated instances under steady client load, while one
// instance is killed, one hangs, one answers 5% errors and one runs 5x slower; then all are
// restored. Judged against the clients' own tally:
//
//   - every request that had not started streaming completes: 200 with a whole body;
//   - a stream cut by the kill ends with an SSE error event then `data: [DONE]`, and only
//     streams served by the killed instance end that way;
//   - the counters add up exactly: requests by status, retries, upstream errors, stream
//     errors, client disconnects, and ejections land on the faulty instances only.
//
// Deterministic by construction: fixed seeds, faults injected when the clients have completed
// a given number of requests (a budget gates how many they may start), health checks driven
// by Server::CheckBackendsNow() (the monitor loop is off), no sleeps. About 4 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/integration/harness.h"

namespace kvroute::testing {
namespace {

constexpr int kInstances = 8;
constexpr int kClients = 6;
constexpr int kRequestsPerClient = 50;
constexpr int kTurnsPerSession = 3;

// What one client saw of one request.
struct Seen {
  std::string id;  // X-Request-Id the client sent
  bool stream = false;
  int status = 0;  // 0: transport error
  std::string transport_error;
  std::string backend;  // X-Kvroute-Backend
  std::string body;
};

// How a response body ended.
enum class Ending { kComplete, kErrorEvent, kBroken };

// SSE payloads ("data: X\n\n" -> X), in order; nullopt on bad framing.
std::optional<std::vector<std::string>> SsePayloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.compare(pos, 6, "data: ") != 0) return std::nullopt;
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return std::nullopt;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

bool IsObjectWith(const std::string& text, std::string_view key) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  return !ec && v.is_object() && v.as_object().contains(key);
}

Ending StreamEnding(const std::string& body) {
  const auto events = SsePayloads(body);
  if (!events || events->size() < 2 || events->back() != "[DONE]") return Ending::kBroken;
  const std::string& last = (*events)[events->size() - 2];
  if (IsObjectWith(last, "error")) return Ending::kErrorEvent;
  // Complete: a finish_reason was sent, then the usage chunk (include_usage), then [DONE].
  bool finished = false;
  for (size_t i = 0; i + 2 < events->size(); ++i) {
    boost::system::error_code ec;
    json::value v = json::parse((*events)[i], ec);
    if (ec || !v.is_object() || v.as_object().contains("error")) return Ending::kBroken;
    const json::value* choices = v.as_object().if_contains("choices");
    if (choices == nullptr || !choices->is_array() || choices->as_array().empty()) continue;
    const json::value& choice = choices->as_array()[0];
    const json::value* reason =
        choice.is_object() ? choice.as_object().if_contains("finish_reason") : nullptr;
    finished = finished || (reason != nullptr && reason->is_string());
  }
  return finished && IsObjectWith(last, "usage") ? Ending::kComplete : Ending::kBroken;
}

bool CompleteJson(const std::string& body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return false;
  const json::object& o = v.as_object();
  return o.contains("usage") && o.contains("choices") &&
         o.at("choices").at(0).at("message").at("content").is_string();
}

// One request on a fresh connection; every error is recorded, never thrown. When
// `on_first_event` is set, it is called once the first SSE event of the body arrived.
Seen Send(uint16_t port, const std::string& id, const std::string& body, bool stream,
          const std::string& session, const std::function<void(const Seen&)>& on_first_event = {}) {
  namespace net = boost::asio;
  Seen seen;
  seen.id = id;
  seen.stream = stream;
  net::io_context ioc;
  tcp::socket s(ioc);
  boost::system::error_code ec;
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.set("X-Request-Id", id);
  if (!session.empty()) req.set("X-Session-Id", session);
  req.body() = body;
  req.prepare_payload();
  if (!ec) http::write(s, req, ec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  if (!ec) http::read_header(s, buf, parser, ec);
  if (!ec && on_first_event) {
    while (!ec && !parser.is_done() && parser.get().body().find("data: ") == std::string::npos) {
      http::read_some(s, buf, parser, ec);
    }
    seen.backend = std::string(parser.get()["X-Kvroute-Backend"]);
    if (!ec) on_first_event(seen);
  }
  if (!ec && !parser.is_done()) http::read(s, buf, parser, ec);
  if (ec) {
    seen.transport_error = ec.message();
    return seen;
  }
  seen.status = parser.get().result_int();
  seen.backend = std::string(parser.get()["X-Kvroute-Backend"]);
  seen.body = parser.get().body();
  return seen;
}

// Whether 127.0.0.1:port accepts connections within 10 s (bounded polling, no sleeping).
bool WaitUntilListening(uint16_t port) {
  namespace net = boost::asio;
  net::io_context ioc;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    tcp::socket s(ioc);
    boost::system::error_code ec;
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) return true;
    std::this_thread::yield();
  }
  return false;
}

// Sum of a counter family's samples whose labels contain every `want` pair.
double Sum(const std::string& text, const std::string& family,
           const std::vector<std::pair<std::string, std::string>>& want = {},
           const std::vector<std::pair<std::string, std::string>>& exclude = {}) {
  double total = 0;
  for (size_t pos = 0, end = 0; pos < text.size(); pos = end + 1) {
    end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line = std::string_view(text).substr(pos, end - pos);
    if (line.empty() || line[0] == '#') continue;
    if (line.substr(0, family.size()) != family) continue;
    const std::string_view rest = line.substr(family.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // another family
    auto has = [&](const std::pair<std::string, std::string>& kv) {
      return rest.find(absl::StrCat(kv.first, "=\"", kv.second, "\"")) != std::string_view::npos;
    };
    if (!std::all_of(want.begin(), want.end(), has)) continue;
    if (std::any_of(exclude.begin(), exclude.end(), has)) continue;
    total += std::stod(std::string(rest.substr(rest.rfind(' ') + 1)));
  }
  return total;
}

// Counts completed requests and lets the controller gate how many may start.
class LoadGate {
 public:
  explicit LoadGate(int budget) : budget_(budget) {}
  // A client asks to start one more request.
  void Acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return started_ < budget_; });
    ++started_;
  }
  void Completed() {
    std::lock_guard lock(mu_);
    ++completed_;
    cv_.notify_all();
  }
  void SetBudget(int budget) {
    std::lock_guard lock(mu_);
    budget_ = budget;
    cv_.notify_all();
  }
  void WaitCompleted(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int budget_;
  int started_ = 0;
  int completed_ = 0;
};

sim::Faults Killed() {
  sim::Faults f;
  f.killed = true;
  return f;
}
sim::Faults Hung() {
  sim::Faults f;
  f.hang = true;
  return f;
}
sim::Faults Erroring() {
  sim::Faults f;
  f.error_rate = 0.05;
  return f;
}
sim::Faults Slow() {
  sim::Faults f;
  f.slowdown = 5;
  return f;
}

TEST(ChaosTest, KillHangErrorsAndSlownessLoseNothingAndCountersAddUp) {
  FleetHarness h(
      kInstances, "baseline",
      [](proxy::Config& c) {
        c.upstream.max_attempts = 4;  // three faulty instances, then a good one
        // Longer than two rounds of health checks (2 x health_timeout): a request parked on
        // the hung instance is cut by its ejection, never by this timeout.
        c.upstream.first_byte_timeout = absl::Seconds(5);
        c.upstream.idle_timeout = absl::Seconds(10);
        c.upstream.retry_backoff = absl::Milliseconds(5);
        c.upstream.retry_backoff_max = absl::Milliseconds(20);
        c.monitor.enabled = false;
        c.monitor.unhealthy_after = 2;
        c.monitor.healthy_after = 1;
        c.monitor.passive_failures = 3;
        c.monitor.ejection = absl::Seconds(1);
        c.monitor.max_ejection = absl::Seconds(2);
        c.monitor.health_timeout = absl::Seconds(1);
      },
      [](sim::Profile& p) {
        p.model_name = "kvroute/tiny-test";
        p.max_model_len = 8192;
        p.block_size = 16;
        p.num_gpu_blocks_override = 2048;
        p.max_num_batched_tokens = 2048;
        p.max_num_seqs = 64;
        p.mean_output_tokens = 16;
        p.timing = sim::TimingModel{.step_fixed_s = 0.01,
                                    .prefill_s_per_token = 1e-4,
                                    .decode_s_per_seq = 1e-3,
                                    .kv_read_s_per_token = 0};
      },
      [](sim::FleetOptions& f) {
        f.time_scale = 0.1;  // a 24-token answer takes ~30 ms; the probe stream takes seconds
        f.io_threads = 2;
      });
  const uint16_t port = h.server().port();

  constexpr int kTotal = kClients * kRequestsPerClient;
  LoadGate gate(80);
  std::mutex seen_mu;
  std::vector<Seen> seen;
  auto record = [&](Seen s) {
    std::lock_guard lock(seen_mu);
    seen.push_back(std::move(s));
  };
  std::vector<std::thread> clients;
  std::thread probe;
  std::thread pinned;
  std::string pinned_session;
  std::promise<std::string> probe_backend;  // the probe stream's instance, once it streams
  // Whatever way the test leaves (a failed ASSERT included), the load runs out and every
  // thread is joined before the fleet and the server go away.
  struct JoinAll {
    std::function<void()> join;
    ~JoinAll() { join(); }
  } join_all{[&] {
    gate.SetBudget(kTotal);
    for (auto& t : clients) {
      if (t.joinable()) t.join();
    }
    if (probe.joinable()) probe.join();
    if (pinned.joinable()) pinned.join();
  }};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      json::array messages;
      std::string session;
      for (int i = 0; i < kRequestsPerClient; ++i) {
        if (i % kTurnsPerSession == 0) {
          session = absl::StrCat("c", c, "-s", i / kTurnsPerSession);
          messages.clear();
          messages.push_back(Msg("system", Text(600, 1000 + c)));
        }
        messages.push_back(Msg("user", Text(300, 100000 * c + i)));
        const bool stream = (i + c) % 2 == 0;
        gate.Acquire();
        Seen s = Send(port, absl::StrCat("c", c, "-r", i),
                      ChatBody(h.model(), messages, stream, /*max_tokens=*/24), stream, session);
        // The next turn carries this answer (or a stand-in if the stream broke).
        std::string answer = "(no answer)";
        if (s.status == 200 && !stream && CompleteJson(s.body)) answer = AssistantText(s.body);
        messages.push_back(Msg("assistant", answer));
        record(std::move(s));
        gate.Completed();
      }
    });
  }

  // Phase 1, after 40 completions: a long stream (the probe) is running on some instance;
  // that one is killed, so at least one stream is cut mid-way. The one that hangs serves a
  // pinned session whose next turn, sent after the hang, goes there by affinity and waits
  // until the ejection below cuts it short. Errors and slowness go to two others.
  gate.WaitCompleted(40);
  probe = std::thread([&] {
    json::object body;
    body["model"] = h.model();
    json::array messages;
    messages.push_back(Msg("user", Text(400, 424242)));
    body["messages"] = std::move(messages);
    body["max_tokens"] = 4000;
    body["ignore_eos"] = true;
    body["stream"] = true;
    body["stream_options"] = json::object{{"include_usage", true}};
    bool told = false;
    Seen s = Send(port, "probe", json::serialize(body), true, "probe", [&](const Seen& first) {
      told = true;
      probe_backend.set_value(first.backend);
    });
    if (!told) probe_backend.set_value("");
    record(std::move(s));
  });
  auto index_of = [&](const std::string& name) {
    for (int i = 0; i < kInstances; ++i) {
      if (h.BackendName(i) == name) return i;
    }
    return -1;
  };
  const std::string killed_name = probe_backend.get_future().get();
  const int killed = index_of(killed_name);
  ASSERT_GE(killed, 0) << "the probe stream never started: '" << killed_name << "'";
  json::array pinned_messages;
  int hung = -1;
  for (int attempt = 0; attempt < kInstances && (hung < 0 || hung == killed); ++attempt) {
    pinned_session = absl::StrCat("pinned-", attempt);
    pinned_messages.clear();
    pinned_messages.push_back(Msg("user", Text(500, 777 + attempt)));
    Seen first = Send(port, absl::StrCat(pinned_session, "-turn1"),
                      ChatBody(h.model(), pinned_messages, false), false, pinned_session);
    hung = index_of(first.backend);
    if (first.status == 200) pinned_messages.push_back(Msg("assistant", AssistantText(first.body)));
    record(std::move(first));
  }
  ASSERT_TRUE(hung >= 0 && hung != killed) << "no pinned session away from " << killed_name;
  std::vector<int> others;
  for (int i = 0; i < kInstances; ++i) {
    if (i != killed && i != hung) others.push_back(i);
  }
  const int erroring = others[0], slow = others[1];
  h.fleet().SetFaults(killed, Killed());
  h.fleet().SetFaults(hung, Hung());
  h.fleet().SetFaults(erroring, Erroring());
  h.fleet().SetFaults(slow, Slow());
  pinned_messages.push_back(Msg("user", Text(300, 778)));
  pinned = std::thread([&, messages = pinned_messages] {
    record(Send(port, absl::StrCat(pinned_session, "-turn2"),
                ChatBody(h.model(), messages, false), false, pinned_session));
  });
  gate.SetBudget(180);

  // Phase 2: once a request is parked on the hung instance (bounded polling, no sleeping),
  // active checks see the dead and the hung instance (unhealthy_after = 2) and eject them.
  int parked = 0;
  const auto parked_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (parked == 0 && std::chrono::steady_clock::now() < parked_deadline) {
    parked = h.fleet().gauges(hung).num_hung;
    std::this_thread::yield();
  }
  ASSERT_GT(parked, 0) << "nothing reached the hung instance " << h.BackendName(hung);
  gate.WaitCompleted(80);
  h.server().CheckBackendsNow();
  h.server().CheckBackendsNow();
  EXPECT_FALSE(h.server().health_of(killed).active_up);
  EXPECT_FALSE(h.server().health_of(hung).active_up);

  // Phase 3: restore everything while requests are in flight, then the rest of the load.
  gate.WaitCompleted(170);
  for (int i : {killed, hung, erroring, slow}) h.fleet().SetFaults(i, sim::Faults{});
  // The killed instance re-opens its port on its own strand: wait until it does.
  ASSERT_TRUE(WaitUntilListening(h.fleet().ports()[killed])) << killed_name;
  h.server().CheckBackendsNow();
  for (int i = 0; i < kInstances; ++i) {
    EXPECT_TRUE(h.server().health_of(i).active_up) << h.BackendName(i);
  }
  join_all.join();

  // The proxy is alive and answers.
  auto alive = RequestOnce(port, http::verb::get, "/health");
  EXPECT_EQ(alive.result_int(), 200);

  // --- What the clients saw -----------------------------------------------------------
  ASSERT_GE(seen.size(), static_cast<size_t>(kTotal + 3));  // + probe + pinned turns
  std::map<int, int> by_status;
  int cut_streams = 0;
  std::set<std::string> ids;
  for (const Seen& s : seen) {
    ids.insert(s.id);
    ++by_status[s.status];
    EXPECT_TRUE(s.transport_error.empty()) << s.id << ": " << s.transport_error;
    EXPECT_EQ(s.status, 200) << s.id << " on " << s.backend << ": " << s.body;
    if (s.status != 200) continue;
    if (!s.stream) {
      EXPECT_TRUE(CompleteJson(s.body)) << s.id << ": " << s.body;
      continue;
    }
    switch (StreamEnding(s.body)) {
      case Ending::kComplete:
        EXPECT_NE(s.id, "probe") << "the probe stream survived the kill of " << killed_name;
        break;
      case Ending::kErrorEvent:
        ++cut_streams;
        EXPECT_EQ(s.backend, killed_name) << s.id << " was cut on an instance never killed";
        break;
      case Ending::kBroken:
        ADD_FAILURE() << s.id << " on " << s.backend << " ended silently:\n" << s.body;
        break;
    }
  }
  EXPECT_EQ(ids.size(), seen.size());
  EXPECT_GE(cut_streams, 1);

  // --- The proxy's own account --------------------------------------------------------
  const std::vector<json::object> log = h.StopAndReadLog();
  const std::string m = h.server().registry().Render();
  SCOPED_TRACE(m);

  // Requests: by status, exactly what the clients saw; the log has each one once.
  for (const auto& [status, n] : by_status) {
    EXPECT_EQ(Sum(m, "kvroute_requests_total", {{"status", std::to_string(status)}}), n)
        << "status " << status;
  }
  EXPECT_EQ(Sum(m, "kvroute_requests_total"), static_cast<double>(seen.size()));
  ASSERT_EQ(log.size(), seen.size());
  std::map<std::string, std::string> backend_seen;  // request id -> X-Kvroute-Backend
  for (const Seen& s : seen) backend_seen[s.id] = s.backend;
  int64_t extra_attempts = 0;
  std::set<std::string> log_ids;
  for (const json::object& l : log) {
    const std::string id(l.at("id").as_string());
    log_ids.insert(id);
    EXPECT_EQ(l.at("status").to_number<int>(), 200) << json::serialize(l);
    // The instance that served it (the last attempt's) is the one the client was told.
    EXPECT_EQ(std::string(l.at("decode_backend").as_string()), backend_seen[id])
        << json::serialize(l);
    extra_attempts += l.at("attempts").to_number<int64_t>() - 1;
  }
  EXPECT_EQ(log_ids, ids);

  // Retries: every attempt after a request's first went to another instance, after exactly
  // one upstream error (connect, timeout, read, ejected or 5xx) on the previous one; since
  // every request ended 200, no upstream error went unretried. Re-sending on a fresh
  // connection to the same instance (a stale pooled connection) is not an attempt.
  const double retries = Sum(m, "kvroute_retries_total", {}, {{"reason", "stale_connection"}});
  EXPECT_EQ(retries, static_cast<double>(extra_attempts));
  EXPECT_EQ(Sum(m, "kvroute_upstream_errors_total"), static_cast<double>(extra_attempts));
  EXPECT_EQ(Sum(m, "kvroute_retries_total", {{"reason", "5xx"}}),
            Sum(m, "kvroute_upstream_errors_total", {{"kind", "5xx"}}));
  EXPECT_EQ(Sum(m, "kvroute_retries_total", {{"reason", "ejected"}}),
            Sum(m, "kvroute_upstream_errors_total", {{"kind", "ejected"}}));
  EXPECT_GE(extra_attempts, 1) << "the faults never made kvroute retry";
  EXPECT_GE(Sum(m, "kvroute_retries_total", {{"reason", "ejected"}}), 1)
      << "the ejection of the hung instance cut no waiting request";
  // Only the faulty instances failed attempts.
  for (int i = 0; i < kInstances; ++i) {
    if (i == killed || i == hung || i == erroring) continue;
    EXPECT_EQ(Sum(m, "kvroute_upstream_errors_total", {{"backend", h.BackendName(i)}}), 0)
        << h.BackendName(i);
  }

  // Broken streams: exactly the ones clients saw end with an error event, all on the
  // killed instance; no client went away.
  EXPECT_EQ(Sum(m, "kvroute_stream_errors_total"), cut_streams);
  EXPECT_EQ(Sum(m, "kvroute_stream_errors_total", {{"backend", killed_name}}), cut_streams);
  EXPECT_EQ(Sum(m, "kvroute_client_disconnects_total"), 0);

  // Ejections: the dead and the hung instance were ejected, the healthy and the slow ones
  // never; every ejection is one transition to unhealthy.
  EXPECT_GE(Sum(m, "kvroute_backend_ejections_total", {{"backend", killed_name}}), 1);
  EXPECT_GE(Sum(m, "kvroute_backend_ejections_total", {{"backend", h.BackendName(hung)}}), 1);
  for (int i = 0; i < kInstances; ++i) {
    if (i == killed || i == hung || i == erroring) continue;
    EXPECT_EQ(Sum(m, "kvroute_backend_ejections_total", {{"backend", h.BackendName(i)}}), 0)
        << h.BackendName(i);
  }
  EXPECT_EQ(Sum(m, "kvroute_backend_ejections_total"),
            Sum(m, "kvroute_backend_health_transitions_total", {{"to", "unhealthy"}}));

  // What happened, for the reader of the test log.
  std::string summary = absl::StrCat("chaos: ", seen.size(), " requests, killed ", killed_name,
                                     ", hung ", h.BackendName(hung), ", erroring ",
                                     h.BackendName(erroring), ", slow ", h.BackendName(slow),
                                     "; streams cut ", cut_streams, "; retries ", extra_attempts,
                                     " (");
  for (const char* reason : {"connect", "timeout", "upstream_error", "ejected", "5xx"}) {
    absl::StrAppend(&summary, reason, " ", Sum(m, "kvroute_retries_total", {{"reason", reason}}),
                    ", ");
  }
  absl::StrAppend(&summary, "stale_connection ",
                  Sum(m, "kvroute_retries_total", {{"reason", "stale_connection"}}),
                  "); ejections ", Sum(m, "kvroute_backend_ejections_total"));
  std::cout << summary << std::endl;
}

}  // namespace
}  // namespace kvroute::testing
