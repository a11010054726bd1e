// How kvroute serves the agent APIs next to chat completions: Anthropic
// Messages (POST /v1/messages) and OpenAI Responses (POST /v1/responses,
// GET /v1/responses/{id}). They go through the same routing, retries,
// metrics and request log as chat completions; what differs is gathered here:
// the response dialect the observer reads, the error shape of errors kvroute
// answers itself, whether the P/D handoff may serve them, and the pin of a
// Responses request to the backend holding its previous response.
//
//   const ResponsePin pin = PinToHome(features.previous_response_id, homes, backends);
//   if (pin.kind == ResponsePin::kGone) answer 404 ResponseNotFoundBody(id);
//   features.avoid_backends = pin.avoid;  // every backend but the home
//
// Pure functions over their arguments; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proxy/features.h"
#include "proxy/response_homes.h"
#include "proxy/response_observer.h"
#include "router/router.h"

namespace kvroute::proxy {

// The usage and stream-end shapes the engine answers an endpoint with.
ApiDialect DialectFor(Endpoint endpoint);

// The body of an error kvroute answers itself: the Anthropic shape on
// /v1/messages ({"type":"error","error":{"type","message"}}), else the
// OpenAI shape vLLM uses.
std::string ErrorBodyFor(Endpoint endpoint, int status, std::string_view message);

// Whether a request of this endpoint may be split into a prefill and a decode
// leg on two instances by `connector` (transfer::Connector::name()); when not,
// it is served co-located. Responses never is: the engine that answers stores
// the response under an id only it knows, and a follow-up must reach the engine
// holding the conversation. Messages is with vLLM's connectors ("nixl",
// "mooncake": its Messages handler passes kv_transfer_params into the chat
// request and back out in the message), not with SGLang's (SGLang does not
// serve the Messages API). Chat and completions always are.
bool HandoffServes(Endpoint endpoint, std::string_view connector);

// The SSE bytes that tell a client its stream broke off (kvroute's 502 after
// the first byte): chat completions get an error chunk and [DONE]; Messages
// an `event: error` with the Anthropic error; Responses an `event: error`
// ({"type":"error","code","message","param"}), as each API ends a failed
// stream.
std::string MidStreamErrorEvent(Endpoint endpoint, std::string_view message);

// vLLM's 404 for a stored response it does not hold:
// {"error":{"message":"Response with id '<id>' not found.",
//  "type":"invalid_request_error","param":null,"code":404}}
std::string ResponseNotFoundBody(std::string_view response_id);

// The id of a GET /v1/responses/{id} target (query string ignored); empty
// when the target is not one.
std::string_view ResponseIdFromTarget(std::string_view target);

// Where a Responses request naming `previous_response_id` must go.
struct ResponsePin {
  enum Kind {
    kNone,  // no previous response named, or none kvroute knows of: route freely
    kHome,  // the backend at `home` holds it: route there only
    kGone,  // the backend that held it has left the fleet: vLLM's 404
  };
  Kind kind = kNone;
  int home = -1;
  std::vector<int> avoid;  // kHome: every other backend (RequestFeatures::avoid_backends)
};
ResponsePin PinToHome(std::string_view previous_response_id, const ResponseHomes& homes,
                      const std::vector<router::BackendSpec>& backends);

}  // namespace kvroute::proxy
