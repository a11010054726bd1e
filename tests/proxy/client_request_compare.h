// Test helpers: a request read by Beast's own request parser and field map
// and by ClientRequestParser, as the same plain record, so a unit test and the
// fuzz target can compare the two (tests/proxy/client_request_test.cc,
// tests/fuzz/client_request_fuzz.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
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

// ClientRequestParser, fed `piece` bytes at a time (all at once when 0) up to
// byte `pieces_until`, the rest at once.
inline Parsed ByClientRequest(ClientRequest& req, const std::string& wire, size_t piece = 0,
                              uint64_t body_limit = 1 << 20,
                              size_t pieces_until = std::string::npos) {
  ClientRequestParser p(req);
  p.body_limit(body_limit);
  beast::error_code ec;
  std::string pending;
  size_t pos = 0;
  while (!ec && !p.is_done()) {
    const size_t take = piece == 0 || pos >= pieces_until ? wire.size() - pos
                                                           : std::min(piece, wire.size() - pos);
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

// `forwarded` field lines ("Name: value\r\n" each) in the order Beast's field
// map keeps them: a field whose name came before goes after the last line of
// that name, so the lines are grouped by name in order of each name's first
// line. ClientRequestParser forwards lines in the order they came (as nginx
// does); the two differ only where a name repeats with other fields between.
inline std::string GroupedByName(const std::string& forwarded) {
  std::vector<std::pair<std::string, std::string>> groups;  // lower-case name, lines
  for (size_t pos = 0; pos < forwarded.size();) {
    const size_t end = forwarded.find("\r\n", pos) + 2;
    const std::string line = forwarded.substr(pos, end - pos);
    const std::string name = absl::AsciiStrToLower(line.substr(0, line.find(':')));
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == name; });
    if (it == groups.end()) {
      groups.emplace_back(name, line);
    } else {
      it->second += line;
    }
    pos = end;
  }
  std::string out;
  for (const auto& g : groups) out += g.second;
  return out;
}

// Whether a read by Beast (`a`) and one by ClientRequestParser (`b`) agree on
// everything but `ok` (both must have succeeded), the forwarded fields in
// Beast's grouping.
inline bool SameRequest(const Parsed& a, const Parsed& b) {
  return a.method == b.method && a.target == b.target && a.version == b.version &&
         a.keep_alive == b.keep_alive && a.body == b.body &&
         a.forwarded == GroupedByName(b.forwarded) &&
         a.request_id == b.request_id && a.session_id == b.session_id &&
         a.authorization == b.authorization && a.expect == b.expect;
}

}  // namespace kvroute::proxy::request_compare
