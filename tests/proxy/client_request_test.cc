// ClientRequestParser against Beast's own request parser and field map: the
// same request line, keep-alive decision, body, first values of the fields
// kvroute looks up, and forwarded fields (the map's fields in order, less
// the hop-by-hop and framing ones and X-Request-Id), whole or fed in pieces.
#include "proxy/client_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/proxy/client_request_compare.h"

namespace kvroute::proxy {
namespace {

using request_compare::ByBeast;
using request_compare::ByClientRequest;
using request_compare::Parsed;

void ExpectSame(const Parsed& want, const Parsed& got) {
  ASSERT_EQ(got.ok, want.ok);
  EXPECT_EQ(got.method, want.method);
  EXPECT_EQ(got.target, want.target);
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.keep_alive, want.keep_alive);
  EXPECT_EQ(got.body, want.body);
  EXPECT_EQ(got.forwarded, want.forwarded);
  EXPECT_EQ(got.request_id, want.request_id);
  EXPECT_EQ(got.session_id, want.session_id);
  EXPECT_EQ(got.authorization, want.authorization);
  EXPECT_EQ(got.expect, want.expect);
}

const std::vector<std::string>& Requests() {
  static const std::vector<std::string> requests = {
      "POST /v1/completions HTTP/1.1\r\nHost: localhost:8000\r\nUser-Agent: curl/7.88.1\r\n"
      "Accept: */*\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"
      "{\"prompt\":\"x\"}\n",
      // The OpenAI SDK's fields, lower case; repeated lookups keep the first.
      "POST /v1/chat/completions HTTP/1.1\r\nhost: kvroute\r\nconnection: keep-alive\r\n"
      "x-request-id: client-7\r\nX-Request-ID: client-8\r\nX-Session-Id: job-1\r\n"
      "x-session-id: job-2\r\nX-Stainless-Lang: js\r\nX-Custom: a\r\nx-custom: b\r\n"
      "authorization: Bearer k\r\nAuthorization: Bearer other\r\n"
      "content-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
      // Field lines not in the usual "Name: value" shape: no space, a tab,
      // trailing whitespace, a folded value; a session id among them.
      "POST /v1/completions HTTP/1.1\r\nX-A:a\r\nX-B:\tb\r\nX-Session-Id:\t s1 \r\n"
      "X-F: one\r\n two\r\nAuthorization:Bearer x\r\nContent-Length: 0\r\n\r\n",
      // Whitespace around values, an empty value first.
      "POST /v1/completions HTTP/1.1\r\nX-Session-Id:\r\nX-Session-Id: later\r\n"
      "X-Note:   spaced out   \r\nContent-Length: 0\r\n\r\n",
      // Chunked with Expect and other hop-by-hop fields.
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
      "TE: trailers\r\nTrailer: x\r\nUpgrade: h2c\r\nProxy-Connection: close\r\n"
      "Keep-Alive: timeout=5\r\nProxy-Authorization: Basic x\r\n\r\n"
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
      // HTTP/1.0: keep-alive only when asked for.
      "POST /v1/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\nab",
      "POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
      "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
      // Other methods, an unknown one, a query.
      "GET /v1/models HTTP/1.1\r\nAccept: application/json\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\n\r\n",
      "PURGE /x HTTP/1.1\r\n\r\n",
      "BREW /pot?milk=1 HTTP/1.1\r\nX-Request-Id: a\r\n\r\n",
      "DELETE /x?y=1 HTTP/1.1\r\nX-Request-Id: a\r\nX-REQUEST-ID: b\r\n\r\n",
  };
  return requests;
}

TEST(ClientRequestTest, MatchesBeastsParserAndFieldMap) {
  for (const std::string& wire : Requests()) {
    SCOPED_TRACE(wire);
    ClientRequest req;
    const Parsed want = ByBeast(wire);
    EXPECT_TRUE(want.ok);  // every request here is well formed
    ExpectSame(want, ByClientRequest(req, wire));
  }
}

TEST(ClientRequestTest, SameInPieces) {
  for (const std::string& wire : Requests()) {
    for (size_t piece : {1, 3, 7}) {
      SCOPED_TRACE(wire + " in pieces of " + std::to_string(piece));
      ClientRequest req;
      ExpectSame(ByBeast(wire), ByClientRequest(req, wire, piece));
    }
  }
}

TEST(ClientRequestTest, ReusedRequestKeepsNothingOfThePreviousOne) {
  ClientRequest req;
  for (const std::string& wire : Requests()) {
    SCOPED_TRACE(wire);
    ExpectSame(ByBeast(wire), ByClientRequest(req, wire));
  }
  // In reverse: every lookup and the framing start empty again.
  for (auto it = Requests().rbegin(); it != Requests().rend(); ++it) {
    SCOPED_TRACE(*it);
    ExpectSame(ByBeast(*it), ByClientRequest(req, *it));
  }
}

TEST(ClientRequestTest, ForwardsFieldsInTheOrderTheyCame) {
  // Beast's field map put a repeated field after the last one of its name;
  // the parser keeps the client's order (the same lines, and the same order
  // among lines of one name).
  const std::string wire =
      "POST /v1/completions HTTP/1.1\r\nX-A: 1\r\nX-B: 2\r\nx-a: 3\r\n"
      "Content-Length: 0\r\n\r\n";
  ClientRequest req;
  const Parsed got = ByClientRequest(req, wire);
  ASSERT_TRUE(got.ok);
  EXPECT_EQ(got.forwarded, "X-A: 1\r\nX-B: 2\r\nx-a: 3\r\n");
  const Parsed want = ByBeast(wire);
  EXPECT_EQ(want.forwarded, "X-A: 1\r\nx-a: 3\r\nX-B: 2\r\n");
  EXPECT_EQ(request_compare::GroupedByName(got.forwarded), want.forwarded);
  EXPECT_TRUE(request_compare::SameRequest(want, got));
}

TEST(ClientRequestTest, CountsFramingFields) {
  ClientRequest req;
  const Parsed p = ByClientRequest(
      req, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(req.framing().transfer_encodings, 2);
  EXPECT_EQ(req.framing().content_lengths, 0);
  EXPECT_EQ(req.framing().transfer_encoding, "chunked");
  ASSERT_TRUE(ByClientRequest(req, "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx").ok);
  EXPECT_EQ(req.framing().transfer_encodings, 0);
  EXPECT_EQ(req.framing().content_lengths, 1);
  EXPECT_EQ(req.framing().transfer_encoding, "");
}

TEST(ClientRequestTest, LimitsAndMalformedInputAreBeastsErrors) {
  ClientRequest req;
  {
    ClientRequestParser p(req);
    p.body_limit(4);
    beast::error_code ec;
    p.put(net::buffer(std::string("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")), ec);
    EXPECT_EQ(ec, http::error::body_limit);
  }
  {
    ClientRequestParser p(req);
    p.header_limit(32);
    beast::error_code ec;
    p.put(net::buffer(std::string("POST / HTTP/1.1\r\nX-Long: " + std::string(64, 'a') +
                                  "\r\n\r\n")),
          ec);
    EXPECT_EQ(ec, http::error::header_limit);
  }
  {
    ClientRequestParser p(req);
    beast::error_code ec;
    p.put(net::buffer(std::string("POST / HTTP/1.1\r\nBad Name: x\r\n\r\n")), ec);
    EXPECT_TRUE(ec);
  }
}

TEST(ClientRequestTest, TrimEmptiesTheHeaderAndKeepsTheBody) {
  ClientRequest req;
  for (size_t extra : {size_t{0}, ClientRequest::kKeptHeaderBytes}) {
    const std::string wire = "POST /v1/completions HTTP/1.1\r\nX-Big: " + std::string(extra, 'b') +
                             "\r\nX-Session-Id: s\r\nContent-Length: 2\r\n\r\n{}";
    ASSERT_TRUE(ByClientRequest(req, wire).ok);
    req.Trim();
    EXPECT_EQ(req.forwarded_fields(), "");
    EXPECT_EQ(req.session_id(), "");
    EXPECT_EQ(req.target(), "");
    EXPECT_EQ(req.body(), "{}");
    ExpectSame(ByBeast(Requests()[1]), ByClientRequest(req, Requests()[1]));
  }
}

}  // namespace
}  // namespace kvroute::proxy
