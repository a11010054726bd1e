// The legs of one attempt at a completion request (proxy/completion.h): on
// one instance (co-located), or as a prefill/decode handoff between two
// (transfer/handoff.h), served co-located instead whenever the handoff
// cannot run. Private to proxy/: ServeCompletion is the caller.
//
//   LegResult leg;
//   LegOptions opts = BeginColocated(s, hook, tmpl, body, backend, decor, on_first_byte,
//                                    first_token_wait, /*kv_transferred=*/false, leg);
//   leg.r = co_await Relay(s, backend, tmpl, decor, stream, std::move(opts));
//   EndColocated(tmpl, body, leg);
//
//   LegResult leg = co_await ServeOffload(s, hook, tmpl, body, a, b, decor, stream,
//                                         on_first_byte, first_token_wait, rec);
//
// Thread-safety: on the session's worker thread, as the request.
#pragma once

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "proxy/client_request.h"
#include "proxy/relay.h"
#include "proxy/request_log.h"

namespace kvroute::proxy {

class Session;

// Tells the router a response completed: served_by, kv_transferred, status, usage.
using CompleteHook = std::function<void(int, bool, int, const Usage&)>;

// The result of serving one request, co-located or offloaded.
struct LegResult {
  RelayResult r;       // the client-facing leg
  int served_by = -1;  // backend whose usage the client got
  std::string label;   // X-Kvroute-Backend
  int attempts = 0;
  // Whether served_by got the prompt's KV through the connector (so its
  // cached_tokens are not truth about its own prefix cache).
  bool kv_transferred = false;
};

// A co-located leg on one instance, in two halves around its relay so
// that the request's own coroutine can await Relay itself (a wrapping
// coroutine is a frame and a resumption per request). `body` is lent to the
// upstream request and handed back, so a retry elsewhere needs no copy. A
// 5xx answer counts as a failure before the first byte (the caller may
// retry it elsewhere). `hook` (the caller's; it outlives the leg) is called
// once the response is complete, before its last bytes go to the client.
LegOptions BeginColocated(Session& s, CompleteHook* hook, ClientRequest& tmpl, std::string& body,
                          int backend, Decor& decor, OnFirstByte on_first_byte,
                          absl::Duration first_token_wait, bool kv_transferred, LegResult& out);
void EndColocated(ClientRequest& tmpl, std::string& body, LegResult& out);

// A HEAVY request in v2 (or any request in pd_sep): prefill on A, the
// engines move the KV, decode on B (transfer/handoff.h), served co-located
// instead whenever the handoff cannot run, so nothing is lost. Records the
// backends, the prefill's end and the transfer's seconds in `rec`.
net::awaitable<LegResult> ServeOffload(Session& s, CompleteHook* hook, ClientRequest& tmpl,
                                       std::string& body, int a, int b, Decor decor, bool stream,
                                       OnFirstByte on_first_byte, absl::Duration first_token_wait,
                                       RequestRecord& rec);

}  // namespace kvroute::proxy
