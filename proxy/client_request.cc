#include "proxy/client_request.h"

#include <charconv>

#include "absl/strings/match.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {
namespace {

// A request header is bounded by the parser's header limit, far below 4 GiB.
uint32_t Offset(const std::string& s) { return static_cast<uint32_t>(s.size()); }

bool NameIs(beast::string_view name, std::string_view want) {
  return absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()), ToAbsl(want));
}

}  // namespace

void ClientRequest::Clear() {
  ClearHeader();
  body_.clear();
}

void ClientRequest::ClearHeader() {
  method_ = http::verb::unknown;
  version_ = 11;
  keep_alive_ = true;
  head_.clear();
  forwarded_at_ = 0;
  method_at_ = target_at_ = session_id_at_ = authorization_at_ = Span{};
  side_.clear();
  request_id_at_ = expect_at_ = Span{};
  has_request_id_ = has_session_id_ = has_authorization_ = has_expect_ = false;
  framing_ = RequestFraming{};
}

void ClientRequest::Trim() {
  ClearHeader();
  if (head_.capacity() > kKeptHeaderBytes) std::string().swap(head_);
  if (side_.capacity() > kKeptHeaderBytes) std::string().swap(side_);
}

ClientRequestParser::ClientRequestParser(ClientRequest& req) : req_(req) { req_.Clear(); }

void ClientRequestParser::on_request_impl(http::verb method, beast::string_view method_str,
                                          beast::string_view target, int version,
                                          beast::error_code& ec) {
  ClientRequest& r = req_;
  r.method_ = method;
  r.version_ = static_cast<unsigned>(version);
  r.method_at_ = {Offset(r.head_), static_cast<uint32_t>(method_str.size())};
  r.head_.append(method_str.data(), method_str.size());
  r.target_at_ = {Offset(r.head_), static_cast<uint32_t>(target.size())};
  r.head_.append(target.data(), target.size());
  r.forwarded_at_ = Offset(r.head_);
  ec = {};
}

void ClientRequestParser::on_response_impl(int, beast::string_view, int,
                                           beast::error_code& ec) {
  ec = http::error::bad_version;  // never called for a request parser
}

void ClientRequestParser::on_field_impl(http::field name, beast::string_view name_string,
                                        beast::string_view value, beast::error_code& ec) {
  ec = {};
  ClientRequest& r = req_;
  auto keep_side = [&](ClientRequest::Span* at) {
    *at = {Offset(r.side_), static_cast<uint32_t>(value.size())};
    r.side_.append(value.data(), value.size());
  };
  switch (name) {
    case http::field::transfer_encoding:
      ++r.framing_.transfer_encodings;
      r.framing_.transfer_encoding.assign(value.data(), value.size());
      return;
    case http::field::content_length:
      ++r.framing_.content_lengths;
      return;
    case http::field::expect:
      if (!r.has_expect_) keep_side(&r.expect_at_);
      r.has_expect_ = true;
      return;
    case http::field::unknown:
      if (NameIs(name_string, "X-Request-Id")) {
        if (!r.has_request_id_) keep_side(&r.request_id_at_);
        r.has_request_id_ = true;
        return;
      }
      break;
    default:
      if (IsHopByHopOrFraming(name)) return;
      break;
  }
  // The line is "name: value\r\n" whichever way AppendFieldLine builds it.
  const ClientRequest::Span at{static_cast<uint32_t>(r.head_.size() + name_string.size() + 2),
                               static_cast<uint32_t>(value.size())};
  AppendFieldLine(std::string_view(name_string.data(), name_string.size()),
                  std::string_view(value.data(), value.size()), &r.head_);
  if (name == http::field::authorization) {
    if (!r.has_authorization_) r.authorization_at_ = at;
    r.has_authorization_ = true;
  } else if (name == http::field::unknown && NameIs(name_string, "X-Session-Id")) {
    if (!r.has_session_id_) r.session_id_at_ = at;
    r.has_session_id_ = true;
  }
}

void ClientRequestParser::on_header_impl(beast::error_code& ec) {
  req_.keep_alive_ = keep_alive();
  ec = {};
}

void ClientRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                            beast::error_code& ec) {
  ec = {};
  if (!content_length) return;
  if (*content_length > req_.body_.max_size()) {
    ec = http::error::buffer_overflow;
    return;
  }
  // Appended as it arrives (no zero-filling resize, as string_body does).
  req_.body_.reserve(static_cast<size_t>(*content_length));
}

size_t ClientRequestParser::on_body_impl(beast::string_view body, beast::error_code& ec) {
  req_.body_.append(body.data(), body.size());
  ec = {};
  return body.size();
}

void ClientRequestParser::on_chunk_header_impl(std::uint64_t, beast::string_view,
                                               beast::error_code& ec) {
  ec = {};
}

size_t ClientRequestParser::on_chunk_body_impl(std::uint64_t, beast::string_view body,
                                               beast::error_code& ec) {
  return on_body_impl(body, ec);
}

void ClientRequestParser::on_finish_impl(beast::error_code& ec) { ec = {}; }

void AppendUpstreamHeader(const ClientRequest& req, std::string_view request_id,
                          std::string_view host, uint16_t port, uint64_t content_length,
                          std::string* out) {
  using std::string_view_literals::operator""sv;
  out->append(req.method_string()).append(" "sv).append(req.target()).append(" HTTP/1.1\r\n"sv);
  out->append(req.forwarded_fields());
  out->append("X-Request-Id: "sv).append(request_id);
  out->append("\r\nHost: "sv).append(host).append(":"sv);
  char digits[24];
  out->append(digits, static_cast<size_t>(
                          std::to_chars(digits, digits + sizeof(digits), port).ptr - digits));
  out->append("\r\n"sv);
  // As prepare_payload: a length for a body, and for the methods that take one.
  const http::verb m = req.method();
  if (content_length > 0 || m == http::verb::post || m == http::verb::put ||
      m == http::verb::options) {
    out->append("Content-Length: "sv);
    out->append(digits, static_cast<size_t>(
                            std::to_chars(digits, digits + sizeof(digits), content_length).ptr -
                            digits));
    out->append("\r\n"sv);
  }
  out->append("\r\n"sv);
}

}  // namespace kvroute::proxy
