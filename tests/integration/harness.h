// Test harness: an in-process kvroute-sim fleet (ports from port 0) and an
// in-process kvroute server in front of it, plus deterministic prompt text.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "proxy/server.h"
#include "sim/fleet.h"
#include "tests/proxy/fake_upstream.h"

namespace kvroute::testing {

namespace json = boost::json;

// English-looking text of about `bytes` bytes, different for every seed.
inline std::string Text(size_t bytes, uint64_t seed) {
  static const char* kWords[] = {
      "the",     "model",   "routes",  "every",    "request", "where",   "its",    "cache",
      "already", "lives",   "prefill", "decode",   "token",   "session", "agent",  "tool",
      "output",  "returns", "a",       "long",     "answer",  "with",    "many",   "lines",
      "of",      "code",    "and",     "comments", "about",   "memory",  "blocks", "paged",
      "kernel",  "batch",   "latency", "through",  "fleet",   "eight",   "gpus",   "first"};
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(bytes + 16);
  while (out.size() < bytes) {
    out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    out += (rng() % 13 == 0) ? ".\n" : " ";
  }
  out.resize(bytes);
  return out;
}

inline std::string ChatBody(const std::string& model, const json::array& messages, bool stream,
                            int max_tokens = 8) {
  json::object o;
  o["model"] = model;
  o["messages"] = messages;
  o["max_tokens"] = max_tokens;
  o["stream"] = stream;
  if (stream) o["stream_options"] = json::object{{"include_usage", true}};
  return json::serialize(o);
}

inline json::object Msg(const std::string& role, const std::string& content) {
  return json::object{{"role", role}, {"content", content}};
}

struct Usage {
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;
};

// Usage from a JSON body or from the usage chunk of an SSE body.
inline Usage UsageOf(const std::string& body) {
  Usage u;
  auto read = [&](const std::string& text) {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return;
    const json::value* usage = v.as_object().if_contains("usage");
    if (usage == nullptr || !usage->is_object()) return;
    u.prompt_tokens = usage->as_object().at("prompt_tokens").to_number<int64_t>();
    if (const json::value* d = usage->as_object().if_contains("prompt_tokens_details");
        d != nullptr && d->is_object()) {
      u.cached_tokens = d->as_object().at("cached_tokens").to_number<int64_t>();
    }
  };
  if (body.rfind("data:", 0) != 0) {
    read(body);
    return u;
  }
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    read(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return u;
}

inline std::string AssistantText(const std::string& body) {
  json::value v = json::parse(body);
  return std::string(v.at("choices").at(0).at("message").at("content").as_string());
}

class FleetHarness {
 public:
  FleetHarness(int instances, const std::string& mode,
               std::function<void(proxy::Config&)> tweak_config = {},
               std::function<void(sim::Profile&)> tweak_profile = {},
               std::function<void(sim::FleetOptions&)> tweak_fleet = {}) {
    sim::FleetOptions fo;
    fo.instances = instances;
    fo.time_scale = 0;
    fo.seed = 7;
    if (tweak_profile) tweak_profile(fo.profile);
    if (tweak_fleet) tweak_fleet(fo);
    model_ = fo.profile.model_name;
    fleet_ = std::make_unique<sim::Fleet>(fo);
    auto ports = fleet_->Start();
    EXPECT_TRUE(ports.ok()) << ports.status();
    ports_ = *ports;

    log_path_ = (std::filesystem::temp_directory_path() /
                 ("kvroute_it_" + std::to_string(getpid()) + "_" + std::to_string(counter_++) +
                  ".jsonl"))
                    .string();
    std::filesystem::remove(log_path_);
    config_.listen_host = "127.0.0.1";
    config_.listen_port = 0;
    config_.router.mode = mode;
    config_.threads = 2;
    config_.monitor.enabled = false;
    config_.request_log = log_path_;
    for (int i = 0; i < instances; ++i) {
      proxy::BackendConfig b;
      b.name = "gpu" + std::to_string(i);
      b.url = "http://127.0.0.1:" + std::to_string(ports_[i]);
      b.bootstrap_port = ports_[i];  // the simulator serves /query on the instance port
      b.spec.name = b.name;
      b.spec.host = "127.0.0.1";
      b.spec.port = ports_[i];
      config_.backends.push_back(b);
    }
    if (tweak_config) tweak_config(config_);
    std::vector<router::BackendSpec> specs;
    for (const auto& b : config_.backends) specs.push_back(b.spec);
    auto r = router::Router::Create(config_.router, specs);
    EXPECT_TRUE(r.ok()) << r.status();
    server_ = std::make_unique<proxy::Server>(config_, *std::move(r));
    absl::Status st = server_->Start();
    EXPECT_TRUE(st.ok()) << st;
    server_->CheckBackendsNow();  // health and capacity from vllm:cache_config_info
  }
  ~FleetHarness() {
    server_.reset();
    fleet_->Stop();
    std::filesystem::remove(log_path_);
  }

  http::response<http::string_body> Chat(const json::array& messages, bool stream,
                                         const std::string& session = "", int max_tokens = 8) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!session.empty()) headers.emplace_back("X-Session-Id", session);
    return RequestOnce(server_->port(), http::verb::post, "/v1/chat/completions",
                       ChatBody(model_, messages, stream, max_tokens), headers);
  }

  // Stops the server so the request log and metrics are complete, and returns its lines in
  // arrival order. The server writes a line when its exchange ends, after the last byte reaches
  // the client, so a client that sends its next request on that byte can see the next line
  // written first.
  std::vector<json::object> StopAndReadLog() {
    server_->Shutdown();
    server_->Wait();
    std::vector<json::object> out;
    std::ifstream in(log_path_);
    std::string line;
    while (std::getline(in, line)) out.push_back(json::parse(line).as_object());
    std::stable_sort(out.begin(), out.end(), [](const json::object& a, const json::object& b) {
      return a.at("t_arrival").to_number<double>() < b.at("t_arrival").to_number<double>();
    });
    return out;
  }

  proxy::Server& server() { return *server_; }
  sim::Fleet& fleet() { return *fleet_; }
  const std::string& model() const { return model_; }
  std::string BackendName(int i) const { return "gpu" + std::to_string(i); }

 private:
  static inline int counter_ = 0;
  std::unique_ptr<sim::Fleet> fleet_;
  std::vector<uint16_t> ports_;
  proxy::Config config_;
  std::unique_ptr<proxy::Server> server_;
  std::string model_;
  std::string log_path_;
};

}  // namespace kvroute::testing
