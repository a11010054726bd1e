// Test-only synchronous HTTP/1.1 client for talking to simulated instances.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/prometheus_sample.h"

namespace sim::testing {

struct HttpResult {
  boost::system::error_code ec;  // transport error (connect refused, truncated message...)
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked

  boost::json::value Json() const { return boost::json::parse(body); }
};

inline HttpResult HttpRequest(
    uint16_t port, boost::beast::http::verb method, const std::string& target,
    const std::string& body = "",
    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  HttpResult result;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), port}, result.ec);
  if (result.ec) return result;
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  req.keep_alive(false);
  http::write(socket, req, result.ec);
  if (result.ec) return result;
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);
  http::read(socket, buffer, parser, result.ec);
  if (!parser.is_header_done()) return result;
  const auto& res = parser.get();
  result.status = res.result_int();
  for (const auto& field : res) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    result.headers[name] = std::string(field.value());
  }
  result.body = res.body();
  return result;
}

inline HttpResult Post(uint16_t port, const std::string& target, const std::string& body,
                       const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return HttpRequest(port, boost::beast::http::verb::post, target, body, headers);
}

inline HttpResult Get(uint16_t port, const std::string& target) {
  return HttpRequest(port, boost::beast::http::verb::get, target);
}

// Sends raw bytes and reads until the server closes the connection.
inline std::pair<boost::system::error_code, std::string> RawExchange(uint16_t port,
                                                                     const std::string& bytes) {
  namespace net = boost::asio;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  boost::system::error_code ec;
  socket.connect({net::ip::make_address("127.0.0.1"), port}, ec);
  if (ec) return {ec, ""};
  net::write(socket, net::buffer(bytes), ec);
  std::string out;
  char buf[4096];
  for (;;) {
    const size_t n = socket.read_some(net::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return {ec, out};
}

// Value of the first sample of `name` (exact metric name, any labels) in
// Prometheus text; -1 when there is none.
inline double MetricValue(const std::string& text, const std::string& name) {
  return kvroute::testing::SampleValue(text, name).value_or(-1);
}

}  // namespace sim::testing
