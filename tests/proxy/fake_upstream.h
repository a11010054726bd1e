// FakeUpstream: a tiny blocking HTTP/1.1 server on 127.0.0.1:0 for proxy
// tests. Each connection gets its own thread; a test-supplied handler reads
// the parsed request and writes whatever raw bytes it likes, so tests can
// hold a stream open on a gate, never answer, or close mid-way.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvroute::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

class FakeUpstream {
 public:
  // Returns false to close the connection after this request.
  using Handler = std::function<bool(const http::request<http::string_body>&, tcp::socket&)>;

  explicit FakeUpstream(Handler handler)
      : handler_(std::move(handler)), acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeUpstream() {
    stopping_ = true;
    beast::error_code ec;
    {
      // Unblock accept() with a throwaway connection.
      tcp::socket s(ioc_);
      s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
    }
    accept_thread_.join();
    // Connection threads close their own sockets under mu_ (Serve), so the
    // shutdowns here never touch a socket that is being closed; the threads
    // are joined without mu_, which they may still need.
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : sockets_) {
        s->shutdown(tcp::socket::shutdown_both, ec);
      }
      threads.swap(conn_threads_);
    }
    for (auto& t : threads) t.join();
  }

  uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  std::vector<http::request<http::string_body>> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

  // A canned JSON response with Content-Length.
  static void WriteJson(tcp::socket& s, const std::string& body, int status = 200) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(s, res, ec);
  }
  // Starts a chunked SSE response; then WriteChunk() per event.
  static bool WriteSseHeader(tcp::socket& s) {
    const std::string h =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        "transfer-encoding: chunked\r\n\r\n";
    beast::error_code ec;
    net::write(s, net::buffer(h), ec);
    return !ec;
  }
  static bool WriteChunk(tcp::socket& s, const std::string& data) {
    char head[32];
    std::snprintf(head, sizeof(head), "%zx\r\n", data.size());
    const std::string c = std::string(head) + data + "\r\n";
    beast::error_code ec;
    net::write(s, net::buffer(c), ec);
    return !ec;
  }
  static bool WriteLastChunk(tcp::socket& s) {
    beast::error_code ec;
    net::write(s, net::buffer(std::string("0\r\n\r\n")), ec);
    return !ec;
  }

 private:
  void AcceptLoop() {
    for (;;) {
      auto sock = std::make_shared<tcp::socket>(ioc_);
      beast::error_code ec;
      acceptor_.accept(*sock, ec);
      if (stopping_) return;
      if (ec) continue;
      connections_++;
      std::lock_guard<std::mutex> lock(mu_);
      sockets_.push_back(sock);
      conn_threads_.emplace_back([this, sock] { Serve(*sock); });
    }
  }
  void Serve(tcp::socket& s) {
    beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(s, buf, req, ec);
      if (ec) return;
      requests_++;
      {
        std::lock_guard<std::mutex> lock(mu_);
        received_.push_back(req);
      }
      if (!handler_(req, s)) {
        std::lock_guard<std::mutex> lock(mu_);  // ~FakeUpstream shuts sockets down
        s.shutdown(tcp::socket::shutdown_both, ec);
        s.close(ec);
        return;
      }
    }
  }

  Handler handler_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0}, requests_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> conn_threads_;
  std::vector<http::request<http::string_body>> received_;
};

// A port on 127.0.0.1 that nothing listens on (bound, then released).
inline uint16_t ClosedPort() {
  net::io_context ioc;
  tcp::acceptor a(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  const uint16_t p = a.local_endpoint().port();
  a.close();
  return p;
}

// Blocking client helpers.
inline tcp::socket Connect(net::io_context& ioc, uint16_t port) {
  tcp::socket s(ioc);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  return s;
}

inline http::response<http::string_body> Request(tcp::socket& s, http::verb verb,
                                                 const std::string& target,
                                                 const std::string& body = "",
                                                 std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  for (auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(s, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  return res;
}

inline http::response<http::string_body> RequestOnce(uint16_t port, http::verb verb,
                                                     const std::string& target,
                                                     const std::string& body = "",
                                                     std::vector<std::pair<std::string, std::string>> headers = {}) {
  net::io_context ioc;
  tcp::socket s = Connect(ioc, port);
  return Request(s, verb, target, body, std::move(headers));
}

}  // namespace kvroute::testing
