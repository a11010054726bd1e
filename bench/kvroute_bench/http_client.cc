#include "bench/kvroute_bench/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "wire/sse.h"

namespace kvroute::bench {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAsTuple = net::as_tuple(net::use_awaitable);

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string ErrorMessage(const json::value& v) {
  if (!v.is_object()) return {};
  const json::object& o = v.as_object();
  if (const json::value* e = o.if_contains("error")) {
    if (e->is_object()) {
      if (const json::value* m = e->as_object().if_contains("message"); m && m->is_string()) {
        return std::string(m->as_string());
      }
    }
    if (e->is_string()) return std::string(e->as_string());
    return "error";
  }
  if (const json::value* obj = o.if_contains("object");
      obj && obj->is_string() && obj->as_string() == "error") {
    if (const json::value* m = o.if_contains("message"); m && m->is_string()) {
      return std::string(m->as_string());
    }
    return "error";
  }
  return {};
}

int64_t IntField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return -1;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->as_uint64());
  if (v->is_double()) return static_cast<int64_t>(v->as_double());
  return -1;
}

// Folds one OpenAI JSON object (a stream chunk or a whole non-streamed response) into `out`.
// Returns true when it carried generated text.
bool AbsorbChunk(const json::value& v, ChatOutcome& out) {
  if (std::string msg = ErrorMessage(v); !msg.empty()) {
    if (out.error.empty()) out.error = absl::StrCat("stream error: ", msg);
    return false;
  }
  if (!v.is_object()) return false;
  const json::object& o = v.as_object();
  if (const json::value* u = o.if_contains("usage"); u && u->is_object()) {
    const json::object& usage = u->as_object();
    out.prompt_tokens = IntField(usage, "prompt_tokens");
    out.completion_tokens = IntField(usage, "completion_tokens");
    if (const json::value* d = usage.if_contains("prompt_tokens_details"); d && d->is_object()) {
      out.cached_tokens = IntField(d->as_object(), "cached_tokens");
    } else if (out.prompt_tokens >= 0) {
      // vLLM (with --enable-prompt-tokens-details, as the simulator) omits the details when
      // nothing was cached.
      out.cached_tokens = 0;
    }
  }
  bool text = false;
  if (const json::value* c = o.if_contains("choices"); c && c->is_array()) {
    for (const json::value& choice : c->as_array()) {
      if (!choice.is_object()) continue;
      const json::object& ch = choice.as_object();
      const json::value* piece = nullptr;
      if (const json::value* d = ch.if_contains("delta"); d && d->is_object()) {
        piece = d->as_object().if_contains("content");
      } else if (const json::value* m = ch.if_contains("message"); m && m->is_object()) {
        piece = m->as_object().if_contains("content");
      } else {
        piece = ch.if_contains("text");
      }
      if (piece && piece->is_string() && !piece->as_string().empty()) {
        out.content.append(piece->as_string().data(), piece->as_string().size());
        text = true;
      }
    }
  }
  return text;
}

// Folds one Anthropic Messages object (an SSE event or a whole message) into `out`. Returns
// true when it carried generated text; sets `*stopped` on message_stop.
bool AbsorbAnthropic(const json::object& o, ChatOutcome& out, bool* stopped) {
  const json::value* type_v = o.if_contains("type");
  const std::string_view type =
      type_v != nullptr && type_v->is_string() ? std::string_view(type_v->as_string()) : "";
  auto usage_from = [&](const json::value* u) {
    if (u == nullptr || !u->is_object()) return;
    const json::object& usage = u->as_object();
    out.prompt_tokens = IntField(usage, "input_tokens");
    out.completion_tokens = IntField(usage, "output_tokens");
    out.cached_tokens = IntField(usage, "cache_read_input_tokens");
  };
  if (type == "error") {
    const json::value* e = o.if_contains("error");
    const json::value* m =
        e != nullptr && e->is_object() ? e->as_object().if_contains("message") : nullptr;
    if (out.error.empty()) {
      out.error = absl::StrCat("stream error: ", m != nullptr && m->is_string()
                                                     ? std::string(m->as_string())
                                                     : std::string("error"));
    }
    return false;
  }
  if (type == "message_stop") {
    *stopped = true;
    return false;
  }
  if (type == "message_start") {
    if (const json::value* m = o.if_contains("message"); m && m->is_object()) {
      usage_from(m->as_object().if_contains("usage"));
    }
    return false;
  }
  if (type == "message_delta") {
    usage_from(o.if_contains("usage"));
    return false;
  }
  bool text = false;
  auto take = [&](const json::value* t) {
    if (t != nullptr && t->is_string() && !t->as_string().empty()) {
      out.content.append(t->as_string().data(), t->as_string().size());
      text = true;
    }
  };
  if (type == "content_block_delta") {
    if (const json::value* d = o.if_contains("delta"); d && d->is_object()) {
      take(d->as_object().if_contains("text"));
    }
  } else if (type == "message") {
    usage_from(o.if_contains("usage"));
    if (const json::value* c = o.if_contains("content"); c && c->is_array()) {
      for (const json::value& block : c->as_array()) {
        if (block.is_object()) take(block.as_object().if_contains("text"));
      }
    }
  }
  return text;
}

}  // namespace

std::string Endpoint::Url() const { return absl::StrCat("http://", host, ":", port, base_path); }

absl::StatusOr<Endpoint> ParseHttpUrl(std::string_view url_in) {
  const absl::string_view url(url_in.data(), url_in.size());
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("https is not supported: ", url));
  }
  absl::ConsumePrefix(&rest, "http://");
  Endpoint ep;
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    ep.base_path = std::string(rest.substr(slash));
    while (!ep.base_path.empty() && ep.base_path.back() == '/') ep.base_path.pop_back();
  }
  const size_t colon = authority.rfind(':');
  if (colon == absl::string_view::npos) {
    ep.host = std::string(authority);
  } else {
    ep.host = std::string(authority.substr(0, colon));
    uint32_t port = 0;
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in URL: ", url));
    }
    ep.port = static_cast<uint16_t>(port);
  }
  if (ep.host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in URL: ", url));
  return ep;
}

std::string BuildChatBody(std::string_view model, const std::vector<ChatMessage>& messages,
                          int64_t completion_tokens) {
  json::object body;
  body["model"] = model;
  json::array msgs;
  for (const ChatMessage& m : messages) {
    msgs.push_back(json::object{{"role", m.role}, {"content", m.content}});
  }
  body["messages"] = std::move(msgs);
  body["stream"] = true;
  body["stream_options"] = json::object{{"include_usage", true}};
  body["max_tokens"] = completion_tokens;
  body["min_tokens"] = completion_tokens;
  body["ignore_eos"] = true;
  body["temperature"] = 0;
  return json::serialize(body);
}

absl::StatusOr<ChatApi> ParseChatApi(std::string_view name) {
  if (name == "chat") return ChatApi::kChatCompletions;
  if (name == "messages") return ChatApi::kMessages;
  return absl::InvalidArgumentError(absl::StrCat(
      "--api: unknown API '", absl::string_view(name.data(), name.size()), "' (chat | messages)"));
}

std::string_view ChatApiPath(ChatApi api) {
  return api == ChatApi::kMessages ? "/v1/messages" : "/v1/chat/completions";
}

std::string BuildMessagesBody(std::string_view model, const std::vector<ChatMessage>& messages,
                              int64_t completion_tokens, std::string_view session_id) {
  auto tool = [](std::string_view name, std::string_view description,
                 std::initializer_list<std::string_view> params) {
    json::object props;
    json::array required;
    for (std::string_view p : params) {
      props[p] = json::object{{"type", "string"}};
      required.push_back(json::string(p));
    }
    return json::object{{"name", name},
                        {"description", description},
                        {"input_schema", json::object{{"type", "object"},
                                                      {"properties", std::move(props)},
                                                      {"required", std::move(required)}}}};
  };
  json::object body;
  body["model"] = model;
  body["max_tokens"] = completion_tokens;
  body["stream"] = true;
  json::array system;
  json::array msgs;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system.push_back(json::object{{"type", "text"}, {"text", m.content}});
    } else {
      msgs.push_back(json::object{{"role", m.role}, {"content", m.content}});
    }
  }
  if (!system.empty()) body["system"] = std::move(system);
  body["tools"] = json::array{
      tool("bash", "Run a shell command in the repository and return its output.", {"command"}),
      tool("read_file", "Read a file of the repository.", {"path"}),
      tool("edit_file", "Replace a string in a file with another.",
           {"path", "old_string", "new_string"})};
  body["messages"] = std::move(msgs);
  if (!session_id.empty()) body["metadata"] = json::object{{"user_id", session_id}};
  body["temperature"] = 0;
  return json::serialize(body);
}

namespace {

net::awaitable<HttpResponse> HttpExchange(Endpoint endpoint, http::verb verb, std::string target,
                                          std::string body, std::chrono::milliseconds timeout,
                                          uint64_t body_limit) {
  HttpResponse out;
  auto executor = co_await net::this_coro::executor;
  tcp::resolver resolver(executor);
  auto [rec, results] =
      co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port), kAsTuple);
  if (rec) {
    out.error = absl::StrCat("resolve ", endpoint.host, ": ", rec.message());
    co_return out;
  }
  beast::tcp_stream stream(executor);
  stream.expires_after(timeout);
  auto [cec, ep] = co_await stream.async_connect(results, kAsTuple);
  if (cec) {
    out.error = absl::StrCat("connect ", endpoint.Url(), ": ", cec.message());
    co_return out;
  }
  http::request<http::string_body> req{verb, endpoint.base_path + target, 11};
  req.set(http::field::host, endpoint.host);
  req.set(http::field::connection, "close");
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  auto [wec, wn] = co_await http::async_write(stream, req, kAsTuple);
  if (wec) {
    out.error = absl::StrCat("write: ", wec.message());
    co_return out;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  auto [rdec, rn] = co_await http::async_read(stream, buffer, parser, kAsTuple);
  if (rdec) {
    out.error = absl::StrCat("read: ", rdec.message());
    co_return out;
  }
  out.status = static_cast<int>(parser.get().result_int());
  out.body = std::move(parser.get().body());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return out;
}

}  // namespace

net::awaitable<HttpResponse> HttpGet(Endpoint endpoint, std::string target,
                                     std::chrono::milliseconds timeout, uint64_t body_limit) {
  co_return co_await HttpExchange(std::move(endpoint), http::verb::get, std::move(target), {},
                                  timeout, body_limit);
}

net::awaitable<HttpResponse> HttpPostJson(Endpoint endpoint, std::string target, std::string body,
                                          std::chrono::milliseconds timeout, uint64_t body_limit) {
  co_return co_await HttpExchange(std::move(endpoint), http::verb::post, std::move(target),
                                  std::move(body), timeout, body_limit);
}

net::awaitable<ChatOutcome> StreamChat(ChatCall call) {
  ChatOutcome out;
  auto executor = co_await net::this_coro::executor;
  const Clock::time_point t0 = Clock::now();
  tcp::resolver resolver(executor);
  auto [rec, results] = co_await resolver.async_resolve(
      call.endpoint.host, std::to_string(call.endpoint.port), kAsTuple);
  if (rec) {
    out.error = absl::StrCat("resolve: ", rec.message());
    co_return out;
  }
  beast::tcp_stream stream(executor);
  stream.expires_after(call.timeout);
  auto [cec, ep] = co_await stream.async_connect(results, kAsTuple);
  if (cec) {
    out.error = absl::StrCat("connect ", call.endpoint.Url(), ": ", cec.message());
    out.timed_out = cec == beast::error::timeout;
    out.connection_failed = !out.timed_out;
    co_return out;
  }
  http::request<http::string_body> req{http::verb::post, call.endpoint.base_path + call.path, 11};
  req.set(http::field::host, call.endpoint.host);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.set(http::field::connection, "close");
  if (!call.session_id.empty()) req.set("X-Session-Id", call.session_id);
  if (!call.request_id.empty()) req.set("X-Request-Id", call.request_id);
  req.body() = std::move(call.body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(stream, req, kAsTuple);
  if (wec) {
    out.error = absl::StrCat("write: ", wec.message());
    out.timed_out = wec == beast::error::timeout;
    out.connection_failed = !out.timed_out;
    co_return out;
  }

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(call.body_limit);
  auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, kAsTuple);
  if (hec) {
    out.error = absl::StrCat("read header: ", hec.message());
    out.timed_out = hec == beast::error::timeout;
    out.connection_failed = hec == net::error::connection_reset ||
                            hec == http::error::end_of_stream || hec == net::error::eof;
    co_return out;
  }
  const auto& head = parser.get();
  out.http_status = static_cast<int>(head.result_int());
  // retry-after-ms first, as the OpenAI and Anthropic SDKs read it; else Retry-After in delta
  // seconds (an HTTP-date is left unread).
  const auto header_number = [&](std::string_view name, double* v) {
    const std::string_view text = head[name];
    return absl::SimpleAtod(absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())),
                            v) &&
           *v >= 0;
  };
  if (double ms = 0; header_number("retry-after-ms", &ms)) {
    out.retry_after_s = ms / 1000;
  } else if (double s = 0; header_number("Retry-After", &s)) {
    out.retry_after_s = s;
  }
  out.request_id = std::string(head["X-Request-Id"]);
  out.klass = std::string(head["X-Kvroute-Class"]);
  out.backend = std::string(head["X-Kvroute-Backend"]);
  const bool is_sse = std::string_view(head[http::field::content_type]).find("text/event-stream") !=
                      std::string_view::npos;

  wire::SseDataReader sse;
  bool done_marker = false;  // [DONE], or message_stop on /v1/messages
  const bool anthropic = call.path == ChatApiPath(ChatApi::kMessages);
  Clock::time_point t_first{}, t_last{};
  bool have_first = false;
  auto on_data = [&](std::string_view data) {
    if (data == "[DONE]") {
      done_marker = true;
      return;
    }
    boost::system::error_code jec;
    json::value v = json::parse(data, jec);
    if (jec) {
      if (out.error.empty()) out.error = "malformed SSE event";
      return;
    }
    const bool text = anthropic ? v.is_object() && AbsorbAnthropic(v.as_object(), out, &done_marker)
                                : AbsorbChunk(v, out);
    if (text) {
      const Clock::time_point now = Clock::now();
      if (!have_first) {
        t_first = now;
        have_first = true;
        if (call.on_first_token) call.on_first_token();
      } else {
        out.content_gaps.push_back(Seconds(now - t_last));
      }
      t_last = now;
      ++out.content_events;
    }
  };

  while (!parser.is_done()) {
    auto [ec, n] = co_await http::async_read_some(stream, buffer, parser, kAsTuple);
    if (ec == http::error::end_of_stream) break;
    if (ec) {
      out.error = absl::StrCat("read body: ", ec.message());
      out.timed_out = ec == beast::error::timeout;
      break;
    }
    if (out.http_status == 200 && is_sse) {
      std::string& body = parser.get().body();
      sse.Feed(body, on_data);
      body.clear();  // string_body appends at size(), so dropping consumed bytes is safe
    }
  }
  const Clock::time_point t_end = Clock::now();
  out.e2e = Seconds(t_end - t0);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);

  if (out.http_status != 200) {
    boost::system::error_code jec;
    json::value v = json::parse(parser.get().body(), jec);
    std::string msg = jec ? parser.get().body().substr(0, 200) : ErrorMessage(v);
    out.error = absl::StrCat("http ", out.http_status, ": ", msg);
    co_return out;
  }
  if (!is_sse) {
    boost::system::error_code jec;
    json::value v = json::parse(parser.get().body(), jec);
    if (jec) {
      if (out.error.empty()) out.error = "malformed JSON response";
    } else if (anthropic ? v.is_object() && AbsorbAnthropic(v.as_object(), out, &done_marker)
                         : AbsorbChunk(v, out)) {
      t_first = t_last = t_end;
      have_first = true;
      if (call.on_first_token) call.on_first_token();
    }
  } else if (out.error.empty() && !done_marker) {
    out.error = anthropic ? "stream ended without message_stop" : "stream ended without [DONE]";
  }
  if (have_first) out.ttft = Seconds(t_first - t0);
  if (out.completion_tokens < 0) out.completion_tokens = out.content_events;
  if (have_first && out.completion_tokens > 1) {
    out.tpot = Seconds(t_last - t_first) / static_cast<double>(out.completion_tokens - 1);
  }
  if (out.error.empty() && !have_first && out.completion_tokens > 0) {
    out.error = "no generated text";
  }
  co_return out;
}

}  // namespace kvroute::bench
