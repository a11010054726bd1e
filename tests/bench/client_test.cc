// The streaming client and the runner against a tiny in-test OpenAI-like server (port 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/runner.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {
namespace {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
constexpr auto kAsTuple = net::as_tuple(net::use_awaitable);

// Fake kvroute: streams `max_tokens` one-word chunks with usage, the kvroute headers, and
// reports cached tokens as "everything but the last 100 prompt bytes / 4". Overloaded, it
// sheds every chat request (429, Retry-After: 3), as kvroute does with retry-after-ms too
// (Retry-After: 3, retry-after-ms: 2500); shedding first attempts, it sheds each
// prompt the first time it sees it (Retry-After: 0); hanging, it never answers one.
class FakeServer {
 public:
  enum class Behaviour { kServe, kShed, kShedInMs, kShedFirstAttempts, kHang };
  explicit FakeServer(Behaviour behaviour = Behaviour::kServe)
      : behaviour_(behaviour),
        acceptor_(io_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    net::co_spawn(io_, Accept(), net::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeServer() {
    net::post(io_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::string last_session() {
    std::lock_guard<std::mutex> l(mu_);
    return last_session_;
  }
  // The session ids and prompts (message contents joined) of every chat request.
  std::vector<std::string> sessions() {
    std::lock_guard<std::mutex> l(mu_);
    return sessions_;
  }
  std::vector<std::string> prompts() {
    std::lock_guard<std::mutex> l(mu_);
    return prompts_;
  }

 private:
  net::awaitable<void> Accept() {
    while (true) {
      auto [ec, socket] = co_await acceptor_.async_accept(kAsTuple);
      if (ec) co_return;
      net::co_spawn(io_, Serve(std::move(socket)), net::detached);
    }
  }

  net::awaitable<void> Serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(socket, buffer, req, kAsTuple);
    if (ec) co_return;
    ++requests_;
    if (req.method() == http::verb::get && req.target() == "/v1/models") {
      http::response<http::string_body> res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})";
      res.prepare_payload();
      co_await http::async_write(socket, res, kAsTuple);
      co_return;
    }
    if (req.method() == http::verb::get && req.target() == "/metrics") {
      http::response<http::string_body> res{http::status::ok, 11};
      res.body() =
          "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"
          "kvroute_sim_gpu_busy_fraction{engine=\"0\",model_name=\"m\"} 0.25\n"
          "kvroute_pool_reload_time_factor{backend=\"gpu0\"} 2.5\n";
      res.prepare_payload();
      co_await http::async_write(socket, res, kAsTuple);
      co_return;
    }
    json::value body = json::parse(req.body());
    std::string prompt;
    for (const auto& m : body.at("messages").as_array()) {
      prompt += json::value_to<std::string>(m.at("content"));
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      last_session_ = std::string(req["X-Session-Id"]);
      sessions_.push_back(last_session_);
      prompts_.push_back(prompt);
    }
    bool first_attempt = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      first_attempt = seen_prompts_.insert(prompt).second;
    }
    if (behaviour_ == Behaviour::kShed || behaviour_ == Behaviour::kShedInMs ||
        (behaviour_ == Behaviour::kShedFirstAttempts && first_attempt)) {
      http::response<http::string_body> res{http::status::too_many_requests, 11};
      res.set(http::field::content_type, "application/json");
      res.set(http::field::retry_after, behaviour_ == Behaviour::kShedFirstAttempts ? "0" : "3");
      if (behaviour_ == Behaviour::kShedInMs) res.set("retry-after-ms", "2500");
      res.body() = R"({"error":{"message":"fleet KV full","type":"rate_limit_error","code":429}})";
      res.prepare_payload();
      co_await http::async_write(socket, res, kAsTuple);
      co_return;
    }
    if (behaviour_ == Behaviour::kHang) {
      // Reads until the client closes the connection: no answer, ever.
      char byte;
      co_await socket.async_read_some(net::buffer(&byte, 1), kAsTuple);
      co_return;
    }
    if (prompt.find("please fail") != std::string::npos) {
      http::response<http::string_body> res{http::status::service_unavailable, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"error":{"message":"overloaded","type":"server_error","code":503}})";
      res.prepare_payload();
      co_await http::async_write(socket, res, kAsTuple);
      co_return;
    }
    const int64_t max_tokens = body.at("max_tokens").as_int64();
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size()) / 4;
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "text/event-stream");
    res.set("X-Request-Id", std::string(req["X-Request-Id"]));
    res.set("X-Kvroute-Class", prompt_tokens > 3000 ? "MEDIUM" : "WARM");
    res.set("X-Kvroute-Backend", prompt_tokens > 3000 ? "gpu1->gpu0" : "gpu0");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    co_await http::async_write_header(socket, sr, kAsTuple);
    co_await SendChunk(
        socket, R"(data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"
                "\n\n");
    for (int64_t i = 0; i < max_tokens; ++i) {
      co_await SendChunk(socket, R"(data: {"choices":[{"index":0,"delta":{"content":" tok"}}]})"
                                 "\n\n");
    }
    co_await SendChunk(socket, UsageEvent(prompt_tokens, max_tokens));
    co_await SendChunk(socket, "data: [DONE]\n\n");
    co_await net::async_write(socket, http::make_chunk_last(), kAsTuple);
  }

  // Built outside the coroutine: GCC 12 mishandles initializer lists inside coroutines.
  static std::string UsageEvent(int64_t prompt_tokens, int64_t max_tokens) {
    json::object usage{{"prompt_tokens", prompt_tokens},
                       {"completion_tokens", max_tokens},
                       {"total_tokens", prompt_tokens + max_tokens},
                       {"prompt_tokens_details",
                        json::object{{"cached_tokens", std::max<int64_t>(prompt_tokens - 25, 0)}}}};
    return "data: " + json::serialize(json::object{{"choices", json::array{}}, {"usage", usage}}) +
           "\n\n";
  }

  static net::awaitable<void> SendChunk(tcp::socket& socket, std::string event) {
    co_await net::async_write(socket, http::make_chunk(net::buffer(event)), kAsTuple);
  }

  Behaviour behaviour_;
  net::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::string last_session_;
  std::vector<std::string> sessions_;
  std::vector<std::string> prompts_;
  std::set<std::string> seen_prompts_;
};

template <typename T>
T RunCoroutine(net::awaitable<T> a) {
  net::io_context io;
  std::optional<T> out;
  net::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out = std::move(v);
  });
  io.run();
  return *std::move(out);
}

TEST(HttpClientTest, ParsesUrls) {
  auto a = ParseHttpUrl("http://127.0.0.1:8000/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8000);
  EXPECT_EQ(a->base_path, "");
  auto b = ParseHttpUrl("localhost:9/x/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->base_path, "/x");
  EXPECT_EQ(b->Url(), "http://localhost:9/x");
  EXPECT_FALSE(ParseHttpUrl("https://a:1").ok());
  EXPECT_FALSE(ParseHttpUrl("http://a:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:80").ok());
}

TEST(HttpClientTest, StreamsChatAndReadsUsageAndHeaders) {
  FakeServer server;
  ChatCall call;
  call.endpoint = {"127.0.0.1", server.port(), ""};
  call.body = BuildChatBody("m", {{"system", "be brief"}, {"user", std::string(400, 'a')}}, 7);
  call.session_id = "job-1";
  call.request_id = "req-42";
  const ChatOutcome out = RunCoroutine(StreamChat(call));
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.http_status, 200);
  EXPECT_EQ(out.request_id, "req-42");
  EXPECT_EQ(out.klass, "WARM");
  EXPECT_EQ(out.backend, "gpu0");
  EXPECT_EQ(out.content, " tok tok tok tok tok tok tok");
  EXPECT_EQ(out.completion_tokens, 7);
  EXPECT_EQ(out.prompt_tokens, 102);  // (8 + 400) / 4
  EXPECT_EQ(out.cached_tokens, 77);
  EXPECT_EQ(out.content_events, 7);
  ASSERT_EQ(out.content_gaps.size(), 6u);  // one between each two text chunks
  for (double g : out.content_gaps) EXPECT_GE(g, 0);
  EXPECT_GE(out.ttft, 0);
  EXPECT_GE(out.e2e, out.ttft);
  EXPECT_GE(out.tpot, 0);
  EXPECT_EQ(server.last_session(), "job-1");
}

// Three 3-turn jobs, fast enough that the test needs no waiting.
WorkloadSpec SmallAgenticWorkload() {
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic = {.jobs_per_second = 50,
               .duration_s = 0.1,
               .turns = 3,
               .tool_tokens = {700, 300},
               .system_tokens = 200,
               .task_tokens = 50,
               .tool_time_s = 0.001,
               .completion_tokens = 4,
               .max_jobs = 3,
               .seed = 5};
  return w;
}

// A port that nothing listens on: bind one, learn it, close it.
uint16_t DeadPort() {
  net::io_context io;
  tcp::acceptor a(io, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

TEST(HttpClientTest, ReportsHttpErrorsAndConnectFailures) {
  FakeServer server;
  ChatCall call;
  call.endpoint = {"127.0.0.1", server.port(), ""};
  call.body = BuildChatBody("m", {{"user", "please fail"}}, 3);
  const ChatOutcome out = RunCoroutine(StreamChat(call));
  EXPECT_EQ(out.http_status, 503);
  EXPECT_EQ(out.error, "http 503: overloaded");

  call.endpoint.port = DeadPort();
  const ChatOutcome refused = RunCoroutine(StreamChat(call));
  EXPECT_EQ(refused.http_status, 0);
  EXPECT_NE(refused.error.find("connect"), std::string::npos);
}

TEST(HttpClientTest, GetReadsWholeBody) {
  FakeServer server;
  const HttpResponse r = RunCoroutine(
      HttpGet({"127.0.0.1", server.port(), ""}, "/v1/models", std::chrono::seconds(5)));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("fake-model"), std::string::npos);
}

TEST(RunnerTest, AgenticJobsAgainstFakeServer) {
  FakeServer server;
  WorkloadSpec w = SmallAgenticWorkload();
  const size_t planned = PlanAgenticJobs(w.agentic).size();
  ASSERT_GT(planned, 0u);
  ASSERT_TRUE(PrepareWorkload(w).ok());
  RunOptions o;
  o.name = "fake";
  o.target = {"127.0.0.1", server.port(), ""};
  o.instances = {{"gpu0", {"127.0.0.1", server.port(), ""}}};
  o.sample_interval_s = 0.01;
  o.request_timeout_s = 30;
  o.drain_timeout_s = 60;
  o.slo.ttft_heavy_s = 42;
  o.prefill_floor = [](int64_t prompt, int64_t cached) { return (prompt - cached) * 1e-3; };
  std::vector<std::string> progress;
  o.progress = [&](std::string_view line) { progress.emplace_back(line); };
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slo.ttft_heavy_s, 42);
  EXPECT_EQ(r->jobs.size(), planned);
  EXPECT_EQ(r->requests.size(), planned * 3);
  for (const JobRecord& j : r->jobs) {
    EXPECT_TRUE(j.ok);
    EXPECT_EQ(j.turn_e2e.size(), 3u);
    EXPECT_EQ(j.planned_turns, 3);
    EXPECT_GE(j.t_done, j.t_arrival);
  }
  for (const RequestRecord& q : r->requests) {
    EXPECT_TRUE(q.ok()) << q.error;
    EXPECT_EQ(q.completion_tokens, 4);
    EXPECT_FALSE(q.klass.empty());
    EXPECT_EQ(q.gaps, 3);  // 4 streamed chunks
    EXPECT_GE(q.max_gap, 0);
    EXPECT_DOUBLE_EQ(q.compute_floor_s, (q.prompt_tokens - q.cached_tokens) * 1e-3);
    if (q.turn > 1) {
      // The bound is the previous turn's prompt + completion: what a perfect cache holds.
      EXPECT_GT(q.bound_cached_tokens, 0);
      EXPECT_LE(q.bound_cached_tokens, q.prompt_tokens);
    }
  }
  // Every gap is in the run's histograms, none kept per request.
  int64_t gaps = 0;
  for (const auto& [klass, h] : r->itl_by_class) gaps += h.count();
  EXPECT_EQ(gaps, static_cast<int64_t>(planned * 3 * 3));
  EXPECT_FALSE(r->samples.empty());
  EXPECT_DOUBLE_EQ(r->samples.front().kv_usage, 0.5);
  EXPECT_DOUBLE_EQ(r->samples.front().gpu_busy, 0.25);
  ASSERT_FALSE(progress.empty());
  EXPECT_NE(progress.back().find("finished"), std::string::npos);
  // Requests: 1 model probe + the chats + metric scrapes.
  EXPECT_GE(server.requests(), static_cast<int>(1 + planned * 3));
}

TEST(RunnerTest, TraceReplayAgainstFakeServer) {
  FakeServer server;
  WorkloadSpec w;
  w.kind = WorkloadKind::kTrace;
  std::vector<TraceRecord> recs;
  for (int i = 0; i < 4; ++i) {
    TraceRecord r;
    r.index = i;
    r.timestamp_ms = i * 10;
    r.input_length = 600;
    r.output_length = 3;
    r.hash_ids = {0, i + 1};
    recs.push_back(r);
  }
  // Record 3 continues record 1's chat.
  recs[1].chat_id = 1;
  recs[3].chat_id = 3;
  recs[3].parent_chat_id = 1;
  w.trace_records = std::make_shared<const std::vector<TraceRecord>>(recs);
  w.trace.speedup = 10;
  w.trace.think_time_s = 0.001;
  RunOptions o;
  o.target = {"127.0.0.1", server.port(), ""};
  o.progress = [](std::string_view) {};
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), 4u);
  double bound = 0;
  for (const RequestRecord& q : r->requests) {
    EXPECT_TRUE(q.ok()) << q.error;
    bound += static_cast<double>(q.bound_cached_tokens);
  }
  EXPECT_EQ(bound, 3 * 512);  // block 0 is shared by the last three
  EXPECT_DOUBLE_EQ(r->bound_hit_ratio, 3.0 * 512 / (4 * 600));
  // The child was sent after its parent completed.
  const RequestRecord* parent = nullptr;
  const RequestRecord* child = nullptr;
  for (const RequestRecord& q : r->requests) {
    if (q.trace_index == 1) parent = &q;
    if (q.trace_index == 3) child = &q;
  }
  ASSERT_TRUE(parent && child);
  EXPECT_GE(child->t_start, parent->t_start + parent->e2e);
}


// Router replicas behind the generator's round robin: one that refuses connections (a
// killed replica) costs no request, each is sent again to the next replica.
TEST(RunnerTest, ARefusingReplicaIsFailedOverToTheNext) {
  FakeServer a, b;
  const uint16_t dead_port = DeadPort();
  WorkloadSpec w = SmallAgenticWorkload();
  const size_t planned = PlanAgenticJobs(w.agentic).size();
  ASSERT_TRUE(PrepareWorkload(w).ok());
  RunOptions o;
  o.name = "replicas";
  o.target = {"127.0.0.1", a.port(), ""};
  o.replicas = {
      {"127.0.0.1", a.port(), ""}, {"127.0.0.1", dead_port, ""}, {"127.0.0.1", b.port(), ""}};
  o.request_timeout_s = 30;
  o.drain_timeout_s = 60;
  o.progress = [](std::string_view) {};
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), planned * 3);
  int failed_over = 0;
  std::vector<int> answered(3, 0);
  for (const RequestRecord& q : r->requests) {
    EXPECT_TRUE(q.ok()) << q.error;
    ASSERT_GE(q.replica, 0);
    ++answered[q.replica];
    // The dead replica's turn goes to the next one in the rotation.
    EXPECT_EQ(q.failovers, q.replica == 2 && q.failovers > 0 ? 1 : 0);
    failed_over += q.failovers;
  }
  EXPECT_EQ(answered[1], 0);
  EXPECT_GT(answered[0], 0);
  EXPECT_GT(answered[2], 0);
  EXPECT_GT(failed_over, 0);
  // The model lookup, every turn once, and the drained run's scrape of the first replica
  // that answers for what kvroute learned.
  EXPECT_EQ(a.requests() + b.requests(), static_cast<int>(1 + planned * 3 + 1));
  EXPECT_DOUBLE_EQ(r->learned_factors.at("kvroute_pool_reload_time_factor").at("gpu0"), 2.5);
}

RunOptions FakeRunOptions(const FakeServer& server) {
  RunOptions o;
  o.name = "fake";
  o.target = {"127.0.0.1", server.port(), ""};
  o.request_timeout_s = 30;
  o.drain_timeout_s = 60;
  o.progress = [](std::string_view) {};
  return o;
}

// One chat call to a fake server behaving as `behaviour`.
ChatOutcome ChatOnce(FakeServer::Behaviour behaviour) {
  FakeServer server(behaviour);
  ChatCall call;
  call.endpoint = {"127.0.0.1", server.port(), ""};
  call.body = BuildChatBody("m", {{"user", "hello"}}, 3);
  return RunCoroutine(StreamChat(call));
}

TEST(HttpClientTest, A429IsShedWithItsRetryAfter) {
  const ChatOutcome out = ChatOnce(FakeServer::Behaviour::kShed);
  EXPECT_EQ(out.http_status, 429);
  EXPECT_EQ(out.error, "http 429: fleet KV full");
  EXPECT_FALSE(out.timed_out);
  EXPECT_DOUBLE_EQ(out.retry_after_s, 3);
  EXPECT_EQ(FailureOutcome(out.http_status, out.timed_out), RequestOutcome::kShed);
  EXPECT_EQ(FailureOutcome(503, false), RequestOutcome::kFailed);
  EXPECT_EQ(FailureOutcome(0, true), RequestOutcome::kGaveUp);
  EXPECT_EQ(FailureOutcome(200, true), RequestOutcome::kGaveUp);
  // retry-after-ms is read before Retry-After, as the OpenAI and Anthropic SDKs read it.
  const ChatOutcome in_ms = ChatOnce(FakeServer::Behaviour::kShedInMs);
  EXPECT_EQ(in_ms.http_status, 429);
  EXPECT_DOUBLE_EQ(in_ms.retry_after_s, 2.5);
}

TEST(HttpClientTest, AMessagesBodyWithoutASessionHasNoMetadata) {
  const json::value with = json::parse(BuildMessagesBody("m", {{"user", "hi"}}, 5, "job-1"));
  EXPECT_EQ(with.at("metadata").at("user_id").as_string(), "job-1");
  const json::value without = json::parse(BuildMessagesBody("m", {{"user", "hi"}}, 5, ""));
  EXPECT_EQ(without.as_object().if_contains("metadata"), nullptr);
}

TEST(RunnerTest, ClosedLoopJobsEndAtAShedTurn) {
  FakeServer server(FakeServer::Behaviour::kShed);
  WorkloadSpec w = SmallAgenticWorkload();
  const size_t planned = PlanAgenticJobs(w.agentic).size();
  ASSERT_GT(planned, 0u);
  std::vector<std::string> progress;
  RunOptions o = FakeRunOptions(server);
  o.progress = [&](std::string_view line) { progress.emplace_back(line); };
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), planned);  // only each job's first turn
  for (const RequestRecord& q : r->requests) {
    EXPECT_EQ(q.turn, 1);
    EXPECT_EQ(q.outcome(), RequestOutcome::kShed);
    EXPECT_DOUBLE_EQ(q.retry_after_s, 3);
  }
  for (const JobRecord& j : r->jobs) {
    EXPECT_FALSE(j.ok);
    EXPECT_EQ(j.planned_turns, 3);
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_NE(progress.back().find(absl::StrCat(planned, " shed")), std::string::npos)
      << progress.back();
  // The two turns each job never sent count against goodput of the planned turns.
  const RunSummary s = Summarize(*r);
  EXPECT_EQ(s.turns_planned, static_cast<int64_t>(planned * 3));
  EXPECT_EQ(s.turns_unsent, static_cast<int64_t>(planned * 2));
}

TEST(RunnerTest, OpenLoopSendsEveryTurnWithoutSessionIds) {
  FakeServer server(FakeServer::Behaviour::kShed);
  WorkloadSpec w = SmallAgenticWorkload();
  w.agentic.client = {.send_session_ids = false, .open_loop_turn_s = 0.001};
  const std::vector<AgenticJob> jobs = PlanAgenticJobs(w.agentic);
  ASSERT_GT(jobs.size(), 0u);
  absl::StatusOr<RunResult> r = RunWorkload(FakeRunOptions(server), w);
  ASSERT_TRUE(r.ok()) << r.status();
  // A shed turn does not end an open-loop session: every planned turn went out.
  EXPECT_EQ(r->requests.size(), jobs.size() * 3);
  for (const RequestRecord& q : r->requests) EXPECT_EQ(q.outcome(), RequestOutcome::kShed);
  for (const JobRecord& j : r->jobs) {
    EXPECT_FALSE(j.ok);
    EXPECT_EQ(j.turn_e2e, std::vector<double>(3, -1));
    EXPECT_EQ(j.planned_turns, 3);
  }
  EXPECT_FALSE(r->session_ids);
  EXPECT_DOUBLE_EQ(r->open_loop_turn_s, 0.001);
  for (const std::string& s : server.sessions()) EXPECT_EQ(s, "");
  // Later turns carry the planned answers, not the (never generated) real ones.
  const std::vector<std::string> prompts = server.prompts();
  for (const AgenticJob& j : jobs) {
    const std::string answer = AgenticPlannedAnswer(w.agentic, j.id, 1);
    EXPECT_EQ(
        std::count_if(prompts.begin(), prompts.end(),
                      [&](const std::string& p) { return p.find(answer) != std::string::npos; }),
        2);  // turns 2 and 3
  }
  const RunSummary s = Summarize(*r);
  EXPECT_EQ(s.shed, static_cast<int64_t>(jobs.size() * 3));
  EXPECT_DOUBLE_EQ(s.shed_share, 1);
  EXPECT_EQ(s.turns_unsent, 0);
  EXPECT_EQ(s.served + s.failed + s.gave_up, 0);
}

TEST(RunnerTest, OpenLoopPromptsAreTheSameWhateverTheAnswers) {
  WorkloadSpec w = SmallAgenticWorkload();
  w.agentic.client.open_loop_turn_s = 0.001;
  std::vector<std::string> served_prompts, shed_prompts;
  {
    FakeServer server;
    absl::StatusOr<RunResult> r = RunWorkload(FakeRunOptions(server), w);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const RequestRecord& q : r->requests) EXPECT_TRUE(q.ok()) << q.error;
    for (const JobRecord& j : r->jobs) {
      EXPECT_TRUE(j.ok);
      ASSERT_EQ(j.turn_e2e.size(), 3u);
      for (double e : j.turn_e2e) EXPECT_GE(e, 0);
    }
    served_prompts = server.prompts();
  }
  {
    FakeServer server(FakeServer::Behaviour::kShed);
    ASSERT_TRUE(RunWorkload(FakeRunOptions(server), w).ok());
    shed_prompts = server.prompts();
  }
  std::sort(served_prompts.begin(), served_prompts.end());
  std::sort(shed_prompts.begin(), shed_prompts.end());
  EXPECT_EQ(served_prompts, shed_prompts);
}

TEST(RunnerTest, TheClientGivesUpAtItsTimeout) {
  FakeServer server(FakeServer::Behaviour::kHang);
  WorkloadSpec w = SmallAgenticWorkload();
  RunOptions o = FakeRunOptions(server);
  o.time_scale = 0.5;
  o.client_timeout_s = 0.1;  // 50 ms on the wall clock; the server never answers
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), PlanAgenticJobs(w.agentic).size());
  for (const RequestRecord& q : r->requests) {
    EXPECT_EQ(q.outcome(), RequestOutcome::kGaveUp) << q.error;
    EXPECT_EQ(q.http_status, 0);
  }
  EXPECT_DOUBLE_EQ(r->client_timeout_s, 0.1);
  const RunSummary s = Summarize(*r);
  EXPECT_EQ(s.gave_up, s.requests);
  EXPECT_EQ(s.errors, s.requests);
}

}  // namespace

TEST(RunnerTest, AClosedLoopTurnShedIsSentAgainAfterItsRetryAfter) {
  FakeServer server(FakeServer::Behaviour::kShedFirstAttempts);
  WorkloadSpec w = SmallAgenticWorkload();
  const size_t planned = PlanAgenticJobs(w.agentic).size();
  ASSERT_GT(planned, 0u);
  RunOptions o = FakeRunOptions(server);
  o.shed_retries = 1;
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  // Every turn: its first attempt shed, its second served; every job completes.
  int64_t shed = 0, served = 0;
  for (const RequestRecord& q : r->requests) {
    if (q.outcome() == RequestOutcome::kShed) ++shed;
    if (q.ok()) ++served;
  }
  EXPECT_EQ(shed, served);
  EXPECT_EQ(shed + served, static_cast<int64_t>(r->requests.size()));
  for (const JobRecord& j : r->jobs) EXPECT_TRUE(j.ok);
  EXPECT_EQ(r->jobs.size(), planned);
  // A served retry's latency counts from its turn's first attempt.
  for (size_t i = 1; i < r->requests.size(); ++i) {
    const RequestRecord& q = r->requests[i];
    if (!q.ok()) continue;
    for (size_t k = 0; k < i; ++k) {
      const RequestRecord& first = r->requests[k];
      if (first.job == q.job && first.turn == q.turn) {
        EXPECT_GE(q.ttft, q.t_start - first.t_start) << "job " << q.job << " turn " << q.turn;
      }
    }
  }
  EXPECT_EQ(r->shed_retries, 1);
  // Goodput counts both attempts of a turn, goodput of the planned turns the turn once.
  const RunSummary s = Summarize(*r);
  EXPECT_EQ(s.turns_planned, static_cast<int64_t>(r->requests.size() / 2));
  EXPECT_EQ(s.turns_unsent, 0);
  ASSERT_GE(s.classes.front().goodput, 0);
  EXPECT_DOUBLE_EQ(s.planned_goodput, 2 * s.classes.front().goodput);
}

}  // namespace kvroute::bench
