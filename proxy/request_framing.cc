#include "proxy/request_framing.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {

absl::Status CheckRequestFraming(const http::request_header<>& header) {
  int transfer_encodings = 0;
  int content_lengths = 0;
  std::string transfer_encoding;
  for (const auto& field : header) {
    if (field.name() == http::field::transfer_encoding) {
      ++transfer_encodings;
      transfer_encoding = std::string(field.value());
    } else if (field.name() == http::field::content_length) {
      ++content_lengths;
    }
  }
  if (transfer_encodings == 0) return absl::OkStatus();  // Beast checked Content-Length
  if (content_lengths > 0) {
    return absl::InvalidArgumentError(
        "request has both Content-Length and Transfer-Encoding; refusing an ambiguous body");
  }
  if (transfer_encodings > 1) {
    return absl::InvalidArgumentError("request repeats the Transfer-Encoding header");
  }
  if (header.version() < 11) {
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
