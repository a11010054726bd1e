// sim::Instance's HTTP dispatch: one table row per endpoint (its path, the methods it answers,
// whether the `hang` fault parks it, and its handler) and the small endpoints that answer in
// one piece. The completion endpoints live in completion_endpoint.cc, the agent APIs in
// agent_endpoints.cc, faults, /v1/models and /metrics in instance_ops.cc.
//
// Answers as vLLM's FastAPI server gives them: 404 {"detail":"Not Found"} for an unknown path,
// 405 {"detail":"Method Not Allowed"} for a known path and another method.
#include <absl/strings/str_cat.h>

#include <boost/json.hpp>
#include <cstdint>

#include "sim/instance.h"
#include "sim/instance_internal.h"
#include "sim/oracle.h"
#include "sim/tokenizer.h"

namespace sim {

using internal::kNoThrow;
using internal::Log;

namespace net = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using net::awaitable;

namespace {

// A set of HTTP methods as a bit mask.
constexpr uint64_t VerbBit(http::verb v) { return uint64_t{1} << static_cast<int>(v); }

}  // namespace

struct Instance::Routes {
  // What a plain endpoint answers, in one piece.
  struct Answer {
    http::status status = http::status::ok;
    std::string body;
    std::string content_type = "application/json";
  };

  struct Route {
    std::string_view path;
    bool prefix;  // also every path under `path` (GET /v1/responses/{id})
    uint64_t verbs;  // VerbBit of each method answered
    // Answered while the `hang` fault parks every other request: the fault must stay clearable
    // and the oracle must still see the engine.
    bool while_hung;
    // Exactly one of the two: a plain endpoint, or one that writes its own response.
    Answer (*answer)(Instance& self, const Request& req, std::string_view path);
    awaitable<bool> (*serve)(Instance& self, Stream& stream, Request& req);
  };

  static constexpr uint64_t kGet = VerbBit(http::verb::get);
  static constexpr uint64_t kPost = VerbBit(http::verb::post);

  static const Route* Find(std::string_view path);

  static Answer FaultSet(Instance& self, const Request& req, std::string_view) {
    Answer a;
    int code = 200;
    self.HandleFaultsRequest(req, &a.body, &code);
    a.status = static_cast<http::status>(code);
    return a;
  }

  static awaitable<bool> Oracle(Instance& self, Stream& stream, Request& req) {
    awaitable<OracleAnswer> ask = AnswerCachedTokens(req.body(), &self);
    OracleAnswer answer = co_await std::move(ask);
    const std::string content_type = "application/json";
    co_return co_await self.Reply(stream, req, static_cast<http::status>(answer.status),
                                  answer.body, content_type);
  }

  static Answer StoredResponseById(Instance& self, const Request&, std::string_view path) {
    Answer a;
    const std::string_view id = path.substr(std::string_view("/v1/responses/").size());
    if (const sim::StoredResponse* stored = self.responses_.Find(id)) {
      a.body = json::serialize(stored->response);
    } else {
      const ApiError error = ResponseNotFound(id);
      a.status = static_cast<http::status>(error.status);
      a.body = ErrorJson(error);
    }
    return a;
  }

  static Answer Health(Instance& self, const Request&, std::string_view) {
    Answer a;
    if (self.faults().unhealthy) a.status = http::status::service_unavailable;
    return a;
  }

  // vLLM answers 200 whether or not the engine could reset (it refuses while requests hold
  // blocks, and logs it).
  static Answer ResetPrefixCache(Instance& self, const Request&, std::string_view) {
    if (!self.engine_.ResetPrefixCache()) {
      Log()->warn("instance {}: prefix cache not reset: requests hold blocks",
                  self.options_.index);
    }
    self.PublishKvEvents();
    return Answer{};
  }

  static Answer Version(Instance&, const Request&, std::string_view) {
    return Answer{.body = R"({"version":"kvroute-sim"})"};
  }

  static Answer Models(Instance& self, const Request&, std::string_view) {
    return Answer{.body = self.ModelsJson()};
  }

  static Answer Metrics(Instance& self, const Request&, std::string_view) {
    return Answer{.body = self.RenderMetrics(),
                  .content_type = "text/plain; version=0.0.4; charset=utf-8"};
  }

  // Mooncake bootstrap: {"<dp_rank>": {"engine_id", "worker_addr"}}.
  static Answer Query(Instance& self, const Request&, std::string_view) {
    json::object rank;
    rank["engine_id"] = self.engine_id_;
    rank["worker_addr"] = absl::StrCat(self.options_.host, ":", self.port_);
    json::object o;
    o["0"] = std::move(rank);
    return Answer{.body = json::serialize(o)};
  }

  static Answer Tokenize(Instance& self, const Request& req, std::string_view) {
    boost::system::error_code ec;
    json::value v = json::parse(req.body(), ec);
    const bool chat = !ec && v.is_object() && v.as_object().contains("messages");
    CompletionRequest parsed;
    if (auto err = ParseCompletionRequest(
            req.body(), chat ? Endpoint::kChatCompletions : Endpoint::kCompletions, &parsed)) {
      return Answer{.status = static_cast<http::status>(err->status), .body = ErrorJson(*err)};
    }
    const std::vector<int32_t> tokens =
        parsed.prompt_is_ids ? parsed.prompt_ids : StandInTokenizer::Encode(parsed.prompt_text);
    json::object o;
    o["count"] = tokens.size();
    o["max_model_len"] = self.options_.profile.max_model_len;
    json::array arr;
    arr.reserve(tokens.size());
    for (int32_t t : tokens) arr.push_back(t);
    o["tokens"] = std::move(arr);
    o["token_strs"] = nullptr;
    return Answer{.body = json::serialize(o)};
  }

  // The `hang` fault: the request was read and is never answered; the timer is cancelled when
  // the fault is cleared or on Stop, and the connection then closes.
  static awaitable<void> Park(Instance& self) {
    {
      absl::MutexLock lock(&self.mu_);
      ++self.gauges_.num_hung;
    }
    co_await self.hang_timer_.async_wait(kNoThrow);
    {
      absl::MutexLock lock(&self.mu_);
      --self.gauges_.num_hung;
    }
  }
};

const Instance::Routes::Route* Instance::Routes::Find(std::string_view path) {
  static constexpr Route kRoutes[] = {
      {"/sim/faults", false, kGet | kPost, true, &FaultSet, nullptr},
      {kOracleCachedTokensPath, false, kPost, true, nullptr, &Oracle},
      {"/v1/completions", false, kPost, false, nullptr,
       [](Instance& self, Stream& stream, Request& req) {
         return self.HandleCompletion(stream, req, Endpoint::kCompletions);
       }},
      {"/v1/chat/completions", false, kPost, false, nullptr,
       [](Instance& self, Stream& stream, Request& req) {
         return self.HandleCompletion(stream, req, Endpoint::kChatCompletions);
       }},
      {"/v1/messages", false, kPost, false, nullptr,
       [](Instance& self, Stream& stream, Request& req) {
         return self.HandleMessages(stream, req);
       }},
      {"/v1/responses", false, kPost, false, nullptr,
       [](Instance& self, Stream& stream, Request& req) {
         return self.HandleResponses(stream, req);
       }},
      {"/v1/responses/", true, kGet, false, &StoredResponseById, nullptr},
      {"/health", false, kGet, false, &Health, nullptr},
      {"/reset_prefix_cache", false, kPost, false, &ResetPrefixCache, nullptr},
      {"/version", false, kGet, false, &Version, nullptr},
      {"/v1/models", false, kGet, false, &Models, nullptr},
      {"/metrics", false, kGet, false, &Metrics, nullptr},
      {"/query", false, kGet, false, &Query, nullptr},
      {"/tokenize", false, kPost, false, &Tokenize, nullptr},
  };
  for (const Route& r : kRoutes) {
    if (r.prefix ? path.starts_with(r.path) : path == r.path) return &r;
  }
  return nullptr;
}

awaitable<bool> Instance::Handle(Stream& stream, Request& req) {
  // GCC 12 mishandles temporaries inside co_await expressions: co_await only sees named locals.
  const std::string_view path = internal::TargetPath(req.target());
  const Routes::Route* route = Routes::Find(path);
  if ((route == nullptr || !route->while_hung) && faults().hang) {
    co_await Routes::Park(*this);
    co_return false;
  }
  Routes::Answer answer;
  if (route == nullptr) {
    answer = Routes::Answer{.status = http::status::not_found, .body = R"({"detail":"Not Found"})"};
  } else if ((route->verbs & VerbBit(req.method())) == 0) {
    answer = Routes::Answer{.status = http::status::method_not_allowed,
                            .body = R"({"detail":"Method Not Allowed"})"};
  } else if (route->serve != nullptr) {
    awaitable<bool> served = route->serve(*this, stream, req);
    co_return co_await std::move(served);
  } else {
    answer = route->answer(*this, req, path);
  }
  co_return co_await Reply(stream, req, answer.status, answer.body, answer.content_type);
}

}  // namespace sim
