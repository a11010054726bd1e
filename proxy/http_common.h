// Pieces of HTTP shared by the proxy's server, upstream client and monitor:
// Beast/Asio aliases, OpenAI-shaped error bodies, hop-by-hop header rules.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include "absl/time/time.h"
#include <boost/beast.hpp>
#include <string>
#include <string_view>

namespace kvroute::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

// Every async operation completes with an error code, never an exception.
inline constexpr auto kUseTuple = net::as_tuple(net::use_awaitable);

// {"error": {"message", "type", "param", "code"}} with the HTTP status as
// code, as vLLM's OpenAI server answers.
std::string OpenAiErrorBody(int status, std::string_view message, std::string_view type = {},
                            std::string_view param = {});
// The OpenAI error type for a status: invalid_request_error, ...
std::string_view ErrorTypeForStatus(int status);

// {"type": "error", "error": {"type", "message"}}: the Anthropic Messages
// API's error shape, for errors kvroute itself answers on /v1/messages.
std::string AnthropicErrorBody(int status, std::string_view message);
// The Anthropic error type for a status: invalid_request_error,
// not_found_error, rate_limit_error, overloaded_error, api_error, ...
std::string_view AnthropicErrorTypeForStatus(int status);

// True for headers a proxy must not forward (RFC 9110 §7.6.1) plus the ones
// kvroute sets itself (Host, Content-Length).
bool IsHopByHopOrFraming(std::string_view name);
// The same for a parsed field: every such name is one Beast knows, so the
// enum decides (http::field::unknown is never hop-by-hop).
bool IsHopByHopOrFraming(http::field name);

std::chrono::steady_clock::duration ToChrono(absl::Duration d);

// An advised wait as Retry-After carries it: whole seconds (RFC 9110 has no
// fractions), rounded up, at least 1. retry-after-ms, which the OpenAI and
// Anthropic SDKs read first, carries it to the millisecond.
int64_t RetryAfterSeconds(absl::Duration wait);

// Appends the field line "Name: value\r\n" for a field a Beast parser
// handed over (`name` and `value` point into the parsed bytes). When the
// received line is already exactly that (one space after the colon, no
// whitespace after the value: what HTTP clients and engines send), its bytes
// are copied in one piece; otherwise it is put together from its parts.
inline void AppendFieldLine(std::string_view name, std::string_view value, std::string* out) {
  const char* line = name.data();
  const size_t size = name.size() + 2 + value.size() + 2;
  if (value.data() == line + name.size() + 2 && line[name.size()] == ':' &&
      line[name.size() + 1] == ' ' && value.data()[value.size()] == '\r' &&
      value.data()[value.size() + 1] == '\n') {
    out->append(line, size);
    return;
  }
  out->append(name).append(": ").append(value).append("\r\n");
}

}  // namespace kvroute::proxy
