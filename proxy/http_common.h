// Pieces of HTTP shared by the proxy's server, upstream client and monitor:
// Beast/Asio aliases, OpenAI-shaped error bodies, hop-by-hop header rules.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include "absl/time/time.h"
#include <boost/beast.hpp>
#include <string>
#include <string_view>

namespace kvroute::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

// Every async operation completes with an error code, never an exception.
inline constexpr auto kUseTuple = net::as_tuple(net::use_awaitable);

// {"error": {"message", "type", "param", "code"}} with the HTTP status as
// code, as vLLM's OpenAI server answers.
std::string OpenAiErrorBody(int status, std::string_view message, std::string_view type = {},
                            std::string_view param = {});
// The OpenAI error type for a status: invalid_request_error, ...
std::string_view ErrorTypeForStatus(int status);

// True for headers a proxy must not forward (RFC 9110 §7.6.1) plus the ones
// kvroute sets itself (Host, Content-Length).
bool IsHopByHopOrFraming(std::string_view name);
// The same for a parsed field: every such name is one Beast knows, so the
// enum decides (http::field::unknown is never hop-by-hop).
bool IsHopByHopOrFraming(http::field name);

// The header kvroute sends an engine for a client's request `h`, appended to
// `out`: the request line as HTTP/1.1; the client's fields in order, without
// the hop-by-hop and framing ones and without X-Request-Id; then
// X-Request-Id: `request_id`, Host: `host`:`port`, Content-Length: `content_length`.
// Byte for byte what Beast's serializer wrote for `h` edited that way (fields
// erased, set, prepare_payload), without editing the map (the edits and the
// serializer cost ~3 k instructions of a small request).
void AppendUpstreamHeader(const http::request_header<>& h, std::string_view request_id,
                          std::string_view host, uint16_t port, uint64_t content_length,
                          std::string* out);

std::chrono::steady_clock::duration ToChrono(absl::Duration d);

// A request body read into a std::string, like http::string_body, but
// appended as it arrives instead of resized and then copied over: string_body
// zero-fills every byte before copying it (a 4 KiB body's memset was 5% of a
// small request's instructions). Serialized as string_body.
struct RequestBody {
  using value_type = std::string;
  static std::uint64_t size(const value_type& body) { return body.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& length, beast::error_code& ec) {
      if (length) {
        if (*length > body_.max_size()) {
          ec = http::error::buffer_overflow;
          return;
        }
        body_.reserve(static_cast<size_t>(*length));
      }
      ec = {};
    }
    template <class ConstBufferSequence>
    size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      size_t n = 0;
      for (const net::const_buffer b : beast::buffers_range_ref(buffers)) {
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      ec = {};
      return n;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };

  using writer = http::string_body::writer;
};

// A request read from a client (and, edited, sent upstream).
using ClientRequest = http::request<RequestBody>;

}  // namespace kvroute::proxy
