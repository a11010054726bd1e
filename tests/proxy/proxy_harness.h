// Helpers for integration tests that run kvroute's server in-process on port
// 0 in front of FakeUpstreams and talk to it over raw sockets. Every blocking
// read has a socket timeout far above any limit under test, so a regression
// fails instead of hanging; nothing here sleeps to wait for anything.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proxy/server.h"
#include "tests/proxy/fake_upstream.h"

namespace kvroute::proxy::harness {

inline Config TestConfig(const std::vector<uint16_t>& ports) {
  Config c;
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.router.mode = "round_robin";
  c.threads = 2;
  c.monitor.enabled = false;
  for (size_t i = 0; i < ports.size(); ++i) {
    BackendConfig b;
    b.name = "gpu" + std::to_string(i);
    b.url = "http://127.0.0.1:" + std::to_string(ports[i]);
    b.spec.name = b.name;
    b.spec.host = "127.0.0.1";
    b.spec.port = ports[i];
    c.backends.push_back(b);
  }
  return c;
}

inline std::unique_ptr<Server> StartServer(const Config& c) {
  std::vector<router::BackendSpec> specs;
  for (const auto& b : c.backends) specs.push_back(b.spec);
  auto r = router::Router::Create(c.router, specs);
  EXPECT_TRUE(r.ok()) << r.status();
  auto s = std::make_unique<Server>(c, *std::move(r));
  absl::Status st = s->Start();
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

inline void SetReadTimeout(tcp::socket& s, std::chrono::seconds t) {
  timeval tv{static_cast<time_t>(t.count()), 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// How a read-until-the-end ended.
struct ReadToEnd {
  std::string bytes;
  bool closed = false;     // EOF or reset: the server hung up
  bool timed_out = false;  // the socket timeout expired first
};

// Reads until the server closes the connection or `guard` passes without a
// byte (the guard is a test failure, not a wait).
inline ReadToEnd ReadUntilClosed(tcp::socket& s,
                                 std::chrono::seconds guard = std::chrono::seconds(30)) {
  SetReadTimeout(s, guard);
  ReadToEnd out;
  char buf[16384];
  for (;;) {
    beast::error_code ec;
    const size_t n = s.read_some(net::buffer(buf), ec);
    out.bytes.append(buf, n);
    if (!ec) continue;
    if (ec == net::error::eof || ec == net::error::connection_reset) {
      out.closed = true;
    } else {
      out.timed_out = ec == net::error::would_block || ec == net::error::try_again ||
                      ec == net::error::timed_out;
    }
    return out;
  }
}

// Reads until `needle` has arrived (or the connection ends); appends to `acc`.
inline bool ReadUntil(tcp::socket& s, std::string& acc, const std::string& needle) {
  SetReadTimeout(s, std::chrono::seconds(30));
  char buf[4096];
  while (acc.find(needle) == std::string::npos) {
    beast::error_code ec;
    const size_t n = s.read_some(net::buffer(buf), ec);
    acc.append(buf, n);
    if (ec) return acc.find(needle) != std::string::npos;
  }
  return true;
}

// The first HTTP response in `raw` and the bytes it took; nullopt when
// `raw` does not start with a whole response.
inline std::optional<http::response<http::string_body>> ParseResponse(const std::string& raw,
                                                                      size_t* used) {
  http::response_parser<http::string_body> p;
  p.eager(true);
  beast::error_code ec;
  *used = p.put(net::buffer(raw), ec);
  if (ec || !p.is_done()) return std::nullopt;
  return p.release();
}

}  // namespace kvroute::proxy::harness
