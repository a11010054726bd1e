#include "proxy/http_common.h"

#include <algorithm>
#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {

std::string_view ErrorTypeForStatus(int status) {
  switch (status) {
    case 400:
    case 404:
    case 405:
    case 413:
    case 431:
      return "invalid_request_error";
    case 401:
    case 403:
      return "authentication_error";
    case 429:
      return "rate_limit_error";
    case 502:
    case 503:
    case 504:
      return "upstream_error";
    default:
      return status >= 500 ? "internal_error" : "invalid_request_error";
  }
}

std::string OpenAiErrorBody(int status, std::string_view message, std::string_view type,
                            std::string_view param) {
  boost::json::object err;
  err["message"] = message;
  err["type"] = type.empty() ? ErrorTypeForStatus(status) : type;
  err["param"] = param.empty() ? boost::json::value(nullptr) : boost::json::value(param);
  err["code"] = status;
  boost::json::object root;
  root["error"] = std::move(err);
  return boost::json::serialize(root);
}

std::string_view AnthropicErrorTypeForStatus(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string AnthropicErrorBody(int status, std::string_view message) {
  boost::json::object err;
  err["type"] = AnthropicErrorTypeForStatus(status);
  err["message"] = message;
  boost::json::object root;
  root["type"] = "error";
  root["error"] = std::move(err);
  return boost::json::serialize(root);
}

bool IsHopByHopOrFraming(std::string_view name) {
  // Every such name is one Beast knows (its lookup ignores case).
  return IsHopByHopOrFraming(http::string_to_field(name));
}

bool IsHopByHopOrFraming(http::field name) {
  switch (name) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::host:
    case http::field::content_length:
    case http::field::expect:
    case http::field::proxy_connection:
      return true;
    default:
      return false;
  }
}

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

int64_t RetryAfterSeconds(absl::Duration wait) {
  return std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(wait, absl::Seconds(1))));
}

}  // namespace kvroute::proxy
