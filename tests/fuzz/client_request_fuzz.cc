// Fuzz target: the client request parser (proxy/client_request.h), the first
// reader of every byte a client sends.
//
// Input: one byte, then the request bytes. The first byte's low 4 bits are the
// piece size the request's header is fed to ClientRequestParser in (0: all at
// once; 1..15 bytes otherwise; the body goes at once); its bit 4 sets a 64-byte body limit instead of 1 MiB
// so the limit branch is reached by small inputs.
//
// Checks, beyond "no crash, no sanitizer report": ClientRequestParser reads a
// request exactly when Beast's own request parser does, and then to the same
// request line, keep-alive decision, body, looked-up values and forwarded
// fields as Beast's field map, up to its grouping of repeated names
// (client_request_compare.h); the upstream header built
// from it starts with the request line and ends with a blank line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tests/proxy/client_request_compare.h"

namespace {

using kvroute::proxy::AppendUpstreamHeader;
using kvroute::proxy::ClientRequest;
namespace compare = kvroute::proxy::request_compare;

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("client_request_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] & 0x0F;
  const uint64_t body_limit = (data[0] & 0x10) != 0 ? 64 : 1 << 20;
  const std::string wire(reinterpret_cast<const char*>(data + 1), size - 1);

  const compare::Parsed want = compare::ByBeast(wire, body_limit);
  ClientRequest req;
  // The header in pieces, the body at once: Beast 1.81's own chunk parser
  // asserts (basic_parser.ipp, parse_chunk_header: n >= 5) when some
  // malformed chunked bodies come a byte at a time, whichever parser drives it.
  const size_t header_end = wire.find("\r\n\r\n");
  const compare::Parsed got = compare::ByClientRequest(
      req, wire, piece, body_limit,
      header_end == std::string::npos ? std::string::npos : header_end + 4);
  Check(got.ok == want.ok, "read by one parser and not the other");
  if (!got.ok) return 0;
  Check(compare::SameRequest(want, got), "differs from Beast's parser and field map");

  std::string head;
  AppendUpstreamHeader(req, "kvr-fuzz", "127.0.0.1", 8000, req.body().size(), &head);
  const std::string line = got.method + " " + got.target + " HTTP/1.1\r\n";
  Check(head.compare(0, line.size(), line) == 0, "upstream header's request line");
  Check(head.size() >= 4 && head.compare(head.size() - 4, 4, "\r\n\r\n") == 0,
        "upstream header's end");
  return 0;
}
