// RelayResponseParser: Beast's HTTP/1 response parser (http::basic_parser)
// for a response that is relayed, not kept. Instead of a field map (one
// allocation per field, then edited and serialized again), the fields a proxy
// forwards are kept as their wire lines, in order; the body goes, as with
// http::buffer_body, into a caller's buffer that a read fills and returns
// http::error::need_buffer when full.
//
//   RelayResponseParser p({"X-Request-Id"});        // fields kvroute sets itself
//   http::read_header(sock, buf, p, ec);
//   std::string h = p.ClientHeader({{"X-Request-Id", id}}, content_length);
//   p.set_body_buffer(chunk, sizeof chunk);  http::read_some(sock, buf, p, ec);
//
// Why: a field map, its edits and Beast's serializer cost more than the
// relay itself on a small response (bench/perf/README.md). The client's header is the
// bytes Beast's serializer wrote for the edited map: the status line with
// Beast's reason phrase, the forwarded fields as received, kvroute's fields,
// then the framing field.
//
// Not thread-safe; one per response.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "proxy/absl_compat.h"
#include "proxy/http_common.h"

namespace kvroute::proxy {

class RelayResponseParser : public http::basic_parser<false> {
 public:
  // `own_fields`: names (any case) not forwarded because kvroute sets them,
  // at most kMaxOwnFields; the names must outlive the parser. Hop-by-hop and
  // framing fields are never forwarded.
  static constexpr size_t kMaxOwnFields = 4;
  explicit RelayResponseParser(absl::Span<const std::string_view> own_fields = {})
      : own_count_(std::min(own_fields.size(), kMaxOwnFields)) {
    std::copy_n(own_fields.begin(), own_count_, own_fields_.begin());
    forwarded_.reserve(512);
  }

  int status() const { return status_; }
  std::string_view content_type() const { return content_type_; }
  // The forwarded fields, "Name: value\r\n" each, in the engine's order.
  const std::string& forwarded_fields() const { return forwarded_; }

  // The header for the client: status line, forwarded fields, `extra`, then
  // Content-Length (when `content_length` is set) or chunked framing.
  std::string ClientHeader(absl::Span<const std::pair<std::string_view, std::string_view>> extra,
                           const boost::optional<uint64_t>& content_length) const {
    using std::string_view_literals::operator""sv;
    std::string h;
    h.reserve(forwarded_.size() + 160);
    const std::string_view reason = http::obsolete_reason(static_cast<http::status>(status_));
    const char code[] = {static_cast<char>('0' + status_ / 100 % 10),
                         static_cast<char>('0' + status_ / 10 % 10),
                         static_cast<char>('0' + status_ % 10)};
    h.append("HTTP/1.1 "sv).append(code, 3).append(" "sv).append(reason).append("\r\n"sv);
    h.append(forwarded_);
    for (const auto& [name, value] : extra) {
      h.append(name).append(": "sv).append(value).append("\r\n"sv);
    }
    if (content_length) {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof(digits), *content_length).ptr;
      h.append("Content-Length: "sv).append(digits, static_cast<size_t>(end - digits));
      h.append("\r\n"sv);
    } else {
      h.append("Transfer-Encoding: chunked\r\n"sv);
    }
    h.append("\r\n"sv);
    return h;
  }

  // Where the next body bytes go; a read returns need_buffer once it is full.
  void set_body_buffer(char* data, size_t size) {
    body_data_ = data;
    body_left_ = size;
  }
  size_t body_left() const { return body_left_; }

 private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                       beast::error_code& ec) override {
    ec = http::error::bad_method;  // never called for a response parser
  }
  void on_response_impl(int code, beast::string_view, int, beast::error_code& ec) override {
    status_ = code;
    ec = {};
  }
  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     beast::error_code& ec) override {
    ec = {};
    if (name == http::field::content_type) content_type_.assign(value.data(), value.size());
    if (IsHopByHopOrFraming(name)) return;
    for (size_t i = 0; i < own_count_; ++i) {
      const std::string_view own = own_fields_[i];
      if (absl::EqualsIgnoreCase(absl::string_view(name_string.data(), name_string.size()),
                                 ToAbsl(own))) {
        return;
      }
    }
    AppendFieldLine(std::string_view(name_string.data(), name_string.size()),
                    std::string_view(value.data(), value.size()), &forwarded_);
  }
  void on_header_impl(beast::error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, beast::error_code& ec) override {
    ec = {};
  }
  size_t on_body_impl(beast::string_view body, beast::error_code& ec) override {
    return Take(std::string_view(body.data(), body.size()), ec);
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code& ec) override {
    ec = {};
  }
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                            beast::error_code& ec) override {
    return Take(std::string_view(body.data(), body.size()), ec);
  }
  void on_finish_impl(beast::error_code& ec) override { ec = {}; }

  // As http::buffer_body's reader: copy what fits, need_buffer if not all.
  size_t Take(std::string_view body, beast::error_code& ec) {
    const size_t n = std::min(body.size(), body_left_);
    if (n > 0) {
      std::memcpy(body_data_, body.data(), n);
      body_data_ += n;
      body_left_ -= n;
    }
    if (n == body.size()) {
      ec = {};
    } else {
      ec = http::error::need_buffer;
    }
    return n;
  }

  std::array<std::string_view, kMaxOwnFields> own_fields_;
  size_t own_count_;
  int status_ = 0;
  std::string content_type_;
  std::string forwarded_;
  char* body_data_ = nullptr;
  size_t body_left_ = 0;
};

}  // namespace kvroute::proxy
