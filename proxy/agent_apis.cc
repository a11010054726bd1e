#include "proxy/agent_apis.h"

#include <boost/json.hpp>

#include "proxy/http_common.h"
#include "wire/sse.h"

namespace kvroute::proxy {

ApiDialect DialectFor(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kMessages:
      return ApiDialect::kAnthropic;
    case Endpoint::kResponses:
      return ApiDialect::kResponses;
    default:
      return ApiDialect::kOpenAi;
  }
}

std::string ErrorBodyFor(Endpoint endpoint, int status, std::string_view message) {
  return endpoint == Endpoint::kMessages ? AnthropicErrorBody(status, message)
                                         : OpenAiErrorBody(status, message);
}

bool HandoffServes(Endpoint endpoint, std::string_view connector) {
  switch (endpoint) {
    case Endpoint::kResponses:
      return false;
    case Endpoint::kMessages:
      return connector == "nixl" || connector == "mooncake";
    default:
      return true;
  }
}

std::string MidStreamErrorEvent(Endpoint endpoint, std::string_view message) {
  std::string out;
  if (endpoint == Endpoint::kMessages) {
    out = "event: error\ndata: ";
    out += AnthropicErrorBody(502, message);
    out += "\n\n";
  } else if (endpoint == Endpoint::kResponses) {
    boost::json::object e;
    e["type"] = "error";
    e["code"] = "upstream_error";
    e["message"] = message;
    e["param"] = nullptr;
    out = "event: error\ndata: ";
    out += boost::json::serialize(e);
    out += "\n\n";
  } else {
    out = wire::SseData(OpenAiErrorBody(502, message));
    out += wire::kSseDone;
  }
  return out;
}

std::string ResponseNotFoundBody(std::string_view response_id) {
  std::string message = "Response with id '";
  message.append(response_id);
  message.append("' not found.");
  return OpenAiErrorBody(404, message, "invalid_request_error");
}

std::string_view ResponseIdFromTarget(std::string_view target) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  if (target.substr(0, kPrefix.size()) != kPrefix) return {};
  std::string_view id = target.substr(kPrefix.size());
  if (const size_t q = id.find('?'); q != std::string_view::npos) id = id.substr(0, q);
  if (id.find('/') != std::string_view::npos) return {};
  return id;
}

ResponsePin PinToHome(std::string_view previous_response_id, const ResponseHomes& homes,
                      const std::vector<router::BackendSpec>& backends) {
  ResponsePin pin;
  if (previous_response_id.empty()) return pin;
  const std::optional<std::string> home = homes.Find(previous_response_id);
  if (!home) return pin;
  for (int i = 0; i < static_cast<int>(backends.size()); ++i) {
    if (backends[i].name == *home && !backends[i].retired) pin.home = i;
  }
  if (pin.home < 0) {
    pin.kind = ResponsePin::kGone;
    return pin;
  }
  pin.kind = ResponsePin::kHome;
  for (int i = 0; i < static_cast<int>(backends.size()); ++i) {
    if (i != pin.home) pin.avoid.push_back(i);
  }
  return pin;
}

}  // namespace kvroute::proxy
