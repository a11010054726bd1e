#include "proxy/request_framing.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {

absl::Status CheckRequestFraming(const ClientRequest& request) {
  const int transfer_encodings = request.framing().transfer_encodings;
  const int content_lengths = request.framing().content_lengths;
  const std::string& transfer_encoding = request.framing().transfer_encoding;
  if (transfer_encodings == 0) return absl::OkStatus();  // Beast checked Content-Length
  if (content_lengths > 0) {
    return absl::InvalidArgumentError(
        "request has both Content-Length and Transfer-Encoding; refusing an ambiguous body");
  }
  if (transfer_encodings > 1) {
    return absl::InvalidArgumentError("request repeats the Transfer-Encoding header");
  }
  if (request.version() < 11) {
    return absl::InvalidArgumentError("Transfer-Encoding is not allowed in an HTTP/1.0 request");
  }
  // The value is not quoted back: it may hold bytes that are not UTF-8.
  if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(ToAbsl(transfer_encoding)), "chunked")) {
    return absl::InvalidArgumentError(
        "unsupported Transfer-Encoding; only a single 'chunked' coding is accepted");
  }
  return absl::OkStatus();
}

}  // namespace kvroute::proxy
