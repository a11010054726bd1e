// Test helpers: a request read by Beast's own request parser and field map
// and by ClientRequestParser, as the same plain record, so a unit test and the
// fuzz target can compare the two (tests/proxy/client_request_test.cc,
// tests/fuzz/client_request_fuzz.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "proxy/absl_compat.h"
#include "proxy/client_request.h"

namespace kvroute::proxy::request_compare {

struct Parsed {
  bool ok = false;
  std::string method, target, body, forwarded, request_id, session_id, authorization, expect;
  unsigned version = 0;
  bool keep_alive = false;
};

// Beast's parser and field map, read the way the proxy once read them.
inline Parsed ByBeast(const std::string& wire, uint64_t body_limit = 1 << 20) {
  http::request_parser<http::string_body> p;
  p.body_limit(body_limit);
  beast::error_code ec;
  size_t used = 0;
  while (!ec && used < wire.size() && !p.is_done()) {
    used += p.put(net::buffer(wire.data() + used, wire.size() - used), ec);
  }
  Parsed r;
  r.ok = !ec && p.is_done();
  if (!r.ok) return r;
  const http::request<http::string_body>& m = p.get();
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.version = m.version();
  r.keep_alive = p.keep_alive();
  r.body = m.body();
  for (const auto& f : m) {
    if (IsHopByHopOrFraming(f.name()) ||
        absl::EqualsIgnoreCase(ToAbsl(f.name_string()), "X-Request-Id")) {
      continue;
    }
    r.forwarded += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
  }
  r.request_id = std::string(m["X-Request-Id"]);
  r.session_id = std::string(m["X-Session-Id"]);
  r.authorization = std::string(m[http::field::authorization]);
  r.expect = std::string(m[http::field::expect]);
  return r;
}

// ClientRequestParser, fed `piece` bytes at a time (all at once when 0).
inline Parsed ByClientRequest(ClientRequest& req, const std::string& wire, size_t piece = 0,
                              uint64_t body_limit = 1 << 20) {
  ClientRequestParser p(req);
  p.body_limit(body_limit);
  beast::error_code ec;
  std::string pending;
  size_t pos = 0;
  while (!ec && !p.is_done()) {
    const size_t take = piece == 0 ? wire.size() - pos : std::min(piece, wire.size() - pos);
    if (take == 0 && pending.empty()) break;
    pending.append(wire, pos, take);
    pos += take;
    const size_t used = p.put(net::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == http::error::need_more) {
      if (take == 0) break;
      ec = {};
    }
  }
  Parsed r;
  r.ok = !ec && p.is_done();
  if (!r.ok) return r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  r.version = req.version();
  r.keep_alive = req.keep_alive();
  r.body = req.body();
  r.forwarded = std::string(req.forwarded_fields());
  r.request_id = std::string(req.request_id());
  r.session_id = std::string(req.session_id());
  r.authorization = std::string(req.authorization());
  r.expect = std::string(req.expect());
  return r;
}

// Whether two reads agree on everything but `ok` (both must have succeeded).
inline bool SameRequest(const Parsed& a, const Parsed& b) {
  return a.method == b.method && a.target == b.target && a.version == b.version &&
         a.keep_alive == b.keep_alive && a.body == b.body && a.forwarded == b.forwarded &&
         a.request_id == b.request_id && a.session_id == b.session_id &&
         a.authorization == b.authorization && a.expect == b.expect;
}

}  // namespace kvroute::proxy::request_compare
