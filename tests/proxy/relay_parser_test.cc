// RelayResponseParser and AppendUpstreamHeader against Beast's own parser
// and serializer: the headers kvroute sends the client and the engine are
// byte for byte what a field map edited the same way (hop-by-hop and framing
// fields out, kvroute's fields set, Beast's reason phrase) serializes to; and
// a response body arrives whole through small buffers, plain or chunked.
#include "proxy/client_request.h"
#include "proxy/relay_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvroute::proxy {
namespace {

using Extra = std::vector<std::pair<std::string_view, std::string_view>>;

// The fields IsHopByHopOrFraming names, erased from a parsed header as the
// proxy once did before serializing it.
void EraseHopByHopAndFraming(http::fields& fields) {
  for (auto it = fields.begin(); it != fields.end();) {
    if (IsHopByHopOrFraming(it->name())) {
      it = fields.erase(it);
    } else {
      ++it;
    }
  }
}

// What the relay sent before RelayResponseParser: Beast's response parser,
// the header edited in place, written by Beast's fields writer.
std::string BeastHeader(std::string_view wire, const Extra& extra) {
  http::response_parser<http::empty_body> p;
  p.eager(false);
  beast::error_code ec;
  p.put(net::buffer(wire.data(), wire.size()), ec);
  EXPECT_TRUE(p.is_header_done()) << ec.message();
  const boost::optional<uint64_t> length = p.content_length();
  http::response_header<>& h = p.get().base();
  EraseHopByHopAndFraming(h);
  h.version(11);
  h.reason({});
  for (const auto& [name, value] : extra) h.set(name, value);
  if (length) {
    h.set(http::field::content_length, std::to_string(*length));
  } else {
    h.set(http::field::transfer_encoding, "chunked");
  }
  // Beast's fields writer: the bytes its serializer writes for the header.
  const http::fields::writer w(h, h.version(), h.result_int());
  std::string out(net::buffer_size(w.get()), '\0');
  net::buffer_copy(net::buffer(out), w.get());
  return out;
}

std::string RelayHeader(std::string_view wire, const Extra& extra) {
  std::vector<std::string_view> own;
  for (const auto& [name, value] : extra) own.push_back(name);
  RelayResponseParser p(own);
  p.eager(false);
  beast::error_code ec;
  p.put(net::buffer(wire.data(), wire.size()), ec);
  EXPECT_TRUE(p.is_header_done()) << ec.message();
  return p.ClientHeader(extra, p.content_length());
}

TEST(RelayResponseParserTest, HeaderMatchesBeastsEditedFieldMap) {
  const Extra extra = {{"X-Request-Id", "kvr-1"}, {"X-Kvroute-Backend", "gpu0"},
                       {"X-Kvroute-Class", "WARM"}};
  const std::vector<std::string> responses = {
      // vLLM (uvicorn), JSON body.
      "HTTP/1.1 200 OK\r\ndate: Sun, 22 Nov 2026 06:00:00 GMT\r\nserver: uvicorn\r\n"
      "content-length: 512\r\ncontent-type: application/json\r\n\r\n",
      // SSE, chunked, with hop-by-hop fields and an engine's own request id.
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
      "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
      "x-request-id: engine-7\r\nCache-Control: no-cache\r\n\r\n",
      // Other statuses, odd reasons, repeated and custom fields, odd case.
      "HTTP/1.1 404 Nope\r\nX-Custom: a\r\nx-custom: b\r\nCONTENT-LENGTH: 0\r\n\r\n",
      "HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nProxy-Connection: close\r\n"
      "Content-Length: 10\r\nTrailer: x\r\nUpgrade: h2c\r\nTE: trailers\r\n\r\n",
      "HTTP/1.1 299 Whatever\r\nContent-Type: application/json\r\nX-Kvroute-Class: HEAVY\r\n"
      "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 3\r\n\r\n",
      // No framing at all (body to end of stream).
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
      // Field lines not in the usual "Name: value" shape: no space, a tab,
      // several spaces, trailing whitespace, an empty value, a folded value.
      "HTTP/1.1 200 OK\r\nX-A:a\r\nX-B:\tb\r\nX-C:   c\r\nX-D: d  \r\nX-E:\r\n"
      "X-F: one\r\n two\r\nContent-Length: 0\r\n\r\n",
  };
  for (const std::string& r : responses) {
    SCOPED_TRACE(r);
    EXPECT_EQ(RelayHeader(r, extra), BeastHeader(r, extra));
    const Extra fewer(extra.begin(), extra.begin() + 2);  // no class: its field is relayed
    EXPECT_EQ(RelayHeader(r, fewer), BeastHeader(r, fewer));
  }
}

// What Relay sent an engine before AppendUpstreamHeader: the client's
// request parsed by Beast, its field map edited, its header serialized.
std::string BeastUpstreamHeader(std::string_view wire, std::string_view id,
                                std::string_view host, std::string_view body) {
  http::request_parser<http::string_body> p;
  beast::error_code ec;
  p.put(net::buffer(wire.data(), wire.size()), ec);
  EXPECT_TRUE(p.is_header_done()) << ec.message();
  http::request<http::string_body> req = p.release();
  EraseHopByHopAndFraming(req.base());
  req.version(11);
  req.set("X-Request-Id", id);
  req.body() = std::string(body);
  req.set(http::field::host, host);
  req.keep_alive(true);
  req.prepare_payload();
  const http::fields::writer w(req.base(), req.version(), req.method());
  std::string out(net::buffer_size(w.get()), '\0');
  net::buffer_copy(net::buffer(out), w.get());
  return out;
}

std::string UpstreamHeader(std::string_view wire, std::string_view id, std::string_view host,
                           uint16_t port, std::string_view body) {
  ClientRequest req;
  ClientRequestParser p(req);
  p.eager(false);
  beast::error_code ec;
  p.put(net::buffer(wire.data(), wire.size()), ec);
  EXPECT_TRUE(p.is_header_done()) << ec.message();
  std::string out;
  AppendUpstreamHeader(req, id, host, port, body.size(), &out);
  return out;
}

TEST(UpstreamHeaderTest, MatchesBeastsEditedFieldMap) {
  const std::vector<std::string> requests = {
      // curl, JSON body.
      "POST /v1/completions HTTP/1.1\r\nHost: localhost:8000\r\nUser-Agent: curl/7.88.1\r\n"
      "Accept: */*\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n",
      // The OpenAI SDK: keep-alive, a client request id in another case,
      // a session header, custom fields repeated.
      "POST /v1/chat/completions HTTP/1.1\r\nhost: kvroute\r\nconnection: keep-alive\r\n"
      "x-request-id: client-7\r\nX-Session-Id: job-1\r\nX-Stainless-Lang: js\r\n"
      "X-Custom: a\r\nx-custom: b\r\nauthorization: Bearer k\r\n"
      "content-type: application/json\r\ncontent-length: 2\r\n\r\n",
      // Chunked upload with Expect and other hop-by-hop fields; HTTP/1.0.
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
      "TE: trailers\r\nTrailer: x\r\nUpgrade: h2c\r\nProxy-Connection: close\r\n"
      "Keep-Alive: timeout=5\r\nProxy-Authorization: Basic x\r\n\r\n",
      "POST /v1/completions HTTP/1.0\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
      // No fields at all; other methods (a length only with a body, or for PUT
      // and OPTIONS).
      "POST /v1/completions HTTP/1.1\r\n\r\n",
      "GET /v1/models HTTP/1.1\r\nAccept: application/json\r\n\r\n",
      "PUT /x HTTP/1.1\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\n\r\n",
      "DELETE /x?y=1 HTTP/1.1\r\nX-Request-Id: a\r\nX-REQUEST-ID: b\r\n\r\n",
  };
  for (const std::string& r : requests) {
    SCOPED_TRACE(r);
    for (std::string_view body : {std::string_view(), std::string_view("{\"prompt\":\"x\"}")}) {
      EXPECT_EQ(UpstreamHeader(r, "kvr-1", "127.0.0.1", 8001, body),
                BeastUpstreamHeader(r, "kvr-1", "127.0.0.1:8001", body));
    }
  }
}

TEST(HopByHopTest, NamesInAnyCaseAndTheirEnumsAgree) {
  for (std::string_view name :
       {"Connection", "keep-alive", "PROXY-AUTHENTICATE", "Proxy-Authorization", "te", "Trailer",
        "transfer-encoding", "Upgrade", "host", "Content-Length", "expect", "Proxy-Connection"}) {
    EXPECT_TRUE(IsHopByHopOrFraming(name)) << name;
    EXPECT_TRUE(IsHopByHopOrFraming(http::string_to_field(name))) << name;
  }
  for (std::string_view name : {"Content-Type", "X-Request-Id", "Server", "Date", "Trailers",
                                "Connections", "", "x-custom"}) {
    EXPECT_FALSE(IsHopByHopOrFraming(name)) << name;
  }
}

TEST(RelayResponseParserTest, StatusAndContentType) {
  RelayResponseParser p;
  beast::error_code ec;
  const std::string wire =
      "HTTP/1.1 201 Created\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n";
  p.put(net::buffer(wire), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.status(), 201);
  EXPECT_EQ(p.content_type(), "text/event-stream");
  EXPECT_TRUE(p.is_done());
}

// Feeds `wire` a byte at a time into buffers of `chunk` bytes; returns the body.
std::string BodyThroughSmallBuffers(const std::string& wire, size_t chunk) {
  RelayResponseParser p;
  p.eager(true);
  std::string body;
  std::vector<char> buf(chunk);
  p.set_body_buffer(buf.data(), buf.size());
  size_t pos = 0;
  std::string pending;
  while (!p.is_done()) {
    if (pos < wire.size()) pending.push_back(wire[pos++]);
    beast::error_code ec;
    const size_t used = p.put(net::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == http::error::need_buffer || p.body_left() == 0 || p.is_done()) {
      body.append(buf.data(), buf.size() - p.body_left());
      p.set_body_buffer(buf.data(), buf.size());
      continue;
    }
    if (ec && ec != http::error::need_more) {
      ADD_FAILURE() << ec.message();
      break;
    }
    if (pos >= wire.size() && pending.empty() && !p.is_done()) {
      ADD_FAILURE() << "ran out of input";
      break;
    }
  }
  return body;
}

TEST(RelayResponseParserTest, BodyArrivesWholeThroughSmallBuffers) {
  const std::string payload = "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
  const std::string plain = "HTTP/1.1 200 OK\r\nContent-Length: " +
                            std::to_string(payload.size()) + "\r\n\r\n" + payload;
  std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t i = 0; i < payload.size(); i += 7) {
    const std::string piece = payload.substr(i, 7);
    char size[16];
    std::snprintf(size, sizeof(size), "%zx", piece.size());
    chunked += std::string(size) + "\r\n" + piece + "\r\n";
  }
  chunked += "0\r\n\r\n";
  for (size_t chunk : {1, 3, 16, 4096}) {
    EXPECT_EQ(BodyThroughSmallBuffers(plain, chunk), payload) << chunk;
    EXPECT_EQ(BodyThroughSmallBuffers(chunked, chunk), payload) << chunk;
  }
}

}  // namespace
}  // namespace kvroute::proxy
