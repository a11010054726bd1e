// Request framing checks: the defence against request smuggling that Beast's
// parser does not make on its own.
//
//   ClientRequestParser parser(req); ... http::read_header(...) ...
//   if (absl::Status st = CheckRequestFraming(req); !st.ok())
//     -> answer 400 with st.message() and close the connection.
//
// Beast 1.81 already rejects Content-Length together with a chunked
// Transfer-Encoding when Content-Length comes first, two differing
// Content-Length values (also `Content-Length: 1, 2`) and a repeated
// `Transfer-Encoding: chunked`. It accepts, and frames by a rule another
// HTTP implementation may not share:
//   - `Transfer-Encoding: xchunked` or `chunked, identity` (chunked not last):
//     no body, so the body's bytes are read as the next request;
//   - `Transfer-Encoding: xchunked` followed by Content-Length: framed by
//     Content-Length;
//   - `Transfer-Encoding: gzip` plus a second `Transfer-Encoding: chunked`,
//     or `identity, chunked`: chunked, the other coding ignored;
//   - Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1: faulty framing).
// kvroute accepts exactly one framing: no Transfer-Encoding and at most one
// Content-Length value, or HTTP/1.1 with exactly `Transfer-Encoding: chunked`
// and no Content-Length. Everything else is refused before any body is read.
//
// Pure function of the header; thread-compatible.
#pragma once

#include "absl/status/status.h"
#include "proxy/client_request.h"

namespace kvroute::proxy {

// OK when the request's header frames its body unambiguously (see above);
// InvalidArgument with a message fit for a 400 response otherwise.
absl::Status CheckRequestFraming(const ClientRequest& request);

}  // namespace kvroute::proxy
