// ClientRequest: a request read from a client, as the proxy uses it: its
// request line, the few fields kvroute reads, the fields it forwards to an
// engine (kept as their wire lines, in order), and its body.
// ClientRequestParser: Beast's HTTP/1 request parser (http::basic_parser)
// filling one, without a field map.
//
//   ClientRequest req;                      // reused across a connection's requests
//   ClientRequestParser parser(req);        // one per request; clears `req`
//   parser.header_limit(...); parser.body_limit(...);
//   http::read_header(sock, buf, parser, ec);  ... http::read(sock, buf, parser, ec);
//   std::string head;
//   AppendUpstreamHeader(req, request_id, host, port, req.body().size(), &head);
//
// Why: Beast's field map allocates an element per field and keeps a tree of
// them; kvroute looks up four fields and forwards the rest unchanged, so it
// keeps the wire lines and copies them into the engine's header as they are.
//
// Values are as Beast's parser hands them over (and as its field map kept
// them): names in the client's case, values with surrounding whitespace
// removed. Where a field repeats, the lookups give its first value, as
// basic_fields' did.
//
// Thread-compatible: one connection's, one request at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/http_common.h"

namespace kvroute::proxy {

// The fields that frame a request's body, as counted by the parser
// (request_framing.h decides whether they are acceptable).
struct RequestFraming {
  int transfer_encodings = 0;    // Transfer-Encoding fields
  int content_lengths = 0;       // Content-Length fields
  std::string transfer_encoding; // the last Transfer-Encoding value
};

class ClientRequest {
 public:
  http::verb method() const { return method_; }
  std::string_view method_string() const { return Slice(head_, method_at_); }
  std::string_view target() const { return Slice(head_, target_at_); }
  unsigned version() const { return version_; }  // 11 for HTTP/1.1
  // As Beast's parser decides it from the version and every Connection field.
  bool keep_alive() const { return keep_alive_; }

  // First values of the fields kvroute reads ("" when absent).
  std::string_view request_id() const { return Slice(side_, request_id_at_); }  // X-Request-Id
  std::string_view session_id() const { return Slice(head_, session_id_at_); }  // X-Session-Id
  std::string_view authorization() const { return Slice(head_, authorization_at_); }
  std::string_view expect() const { return Slice(side_, expect_at_); }

  const RequestFraming& framing() const { return framing_; }

  // The fields an engine gets as the client sent them, "Name: value\r\n"
  // each, in order: all but the hop-by-hop and framing ones (IsHopByHopOrFraming)
  // and X-Request-Id, which kvroute sets itself.
  std::string_view forwarded_fields() const {
    return std::string_view(head_).substr(forwarded_at_);
  }

  std::string& body() { return body_; }
  const std::string& body() const { return body_; }

  // After a request is served: empties the header (not the body), and
  // releases its strings if a large header grew them past kKeptHeaderBytes,
  // so an idle connection holds little.
  void Trim();
  static constexpr size_t kKeptHeaderBytes = 4096;

 private:
  friend class ClientRequestParser;
  struct Span {
    uint32_t at = 0;
    uint32_t size = 0;
  };
  static std::string_view Slice(const std::string& s, Span span) {
    return std::string_view(s.data() + span.at, span.size);
  }
  // Empties the request for the next one, keeping the strings' capacity
  // (the body's too; the caller swaps a stashed body in and out).
  void Clear();
  void ClearHeader();

  http::verb method_ = http::verb::unknown;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  // The method, the target, then the forwarded fields; lookups are offsets
  // into it (it grows while the header is parsed).
  std::string head_;
  uint32_t forwarded_at_ = 0;
  Span method_at_, target_at_, session_id_at_, authorization_at_;
  // Values kvroute reads but does not forward.
  std::string side_;
  Span request_id_at_, expect_at_;
  // Which of the looked-up fields were seen (the first value counts).
  bool has_request_id_ = false, has_session_id_ = false, has_authorization_ = false,
       has_expect_ = false;
  RequestFraming framing_;
  std::string body_;
};

class ClientRequestParser : public http::basic_parser<true> {
 public:
  // Clears `req` and fills it as the request is parsed; `req` must outlive
  // the parser.
  explicit ClientRequestParser(ClientRequest& req);

 private:
  void on_request_impl(http::verb method, beast::string_view method_str,
                       beast::string_view target, int version, beast::error_code& ec) override;
  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override;
  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     beast::error_code& ec) override;
  void on_header_impl(beast::error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         beast::error_code& ec) override;
  size_t on_body_impl(beast::string_view body, beast::error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code& ec) override;
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                            beast::error_code& ec) override;
  void on_finish_impl(beast::error_code& ec) override;

  ClientRequest& req_;
};

// The header kvroute sends an engine for `req`, appended to `out`: the
// request line as HTTP/1.1; the forwarded fields; then X-Request-Id:
// `request_id`, Host: `host`:`port`, and Content-Length: `content_length`
// (for a body, and for the methods that take one). Byte for byte what
// Beast's serializer wrote for the client's field map edited that way
// (fields erased, set, prepare_payload).
void AppendUpstreamHeader(const ClientRequest& req, std::string_view request_id,
                          std::string_view host, uint16_t port, uint64_t content_length,
                          std::string* out);

}  // namespace kvroute::proxy
