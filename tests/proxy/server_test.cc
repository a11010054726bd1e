// Integration tests: kvroute's server in-process on port 0 in front of fake
// upstreams (tests/proxy/fake_upstream.h). No sleeps: tests synchronise on
// promises and on bytes arriving; every blocking read has a generous socket
// timeout so a regression fails instead of hanging.
#include "proxy/server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <set>

#include "tests/proxy/fake_upstream.h"
#include "tests/prometheus_sample.h"
#include "tests/proxy/proxy_harness.h"

namespace kvroute::proxy {
namespace {

using kvroute::testing::ClosedPort;
using kvroute::testing::FakeUpstream;
using kvroute::testing::RequestOnce;

const char kChatBody[] =
    R"({"model":"m","messages":[{"role":"user","content":"hello there"}]})";
const char kStreamBody[] =
    R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]})";
const char kJsonResponse[] =
    R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}})";

std::string Event(int i) {
  return "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t" +
         std::to_string(i) + "\"}}]}\n\n";
}

using harness::StartServer;
using harness::TestConfig;

void SetReadTimeout(net::ip::tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// Reads raw bytes until `needle` has arrived; returns everything read.
std::string ReadUntil(net::ip::tcp::socket& s, std::string& acc, const std::string& needle) {
  char buf[4096];
  while (acc.find(needle) == std::string::npos) {
    beast::error_code ec;
    size_t n = s.read_some(net::buffer(buf), ec);
    if (ec) break;
    acc.append(buf, n);
  }
  return acc;
}

void SendRaw(net::ip::tcp::socket& s, const std::string& target, const std::string& body) {
  const std::string req = "POST " + target +
                          " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  net::write(s, net::buffer(req));
}

TEST(ServerTest, NonStreamingRoundTripByteForByte) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), kJsonResponse);
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu0");
  // kvroute's own id: "kvr-" and 32 hex digits.
  const std::string id(res["X-Request-Id"]);
  ASSERT_EQ(id.size(), 36u) << id;
  EXPECT_EQ(id.substr(0, 4), "kvr-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos) << id;
  EXPECT_EQ(res["X-Kvroute-Class"], "WARM");
  ASSERT_EQ(up.received().size(), 1u);
  EXPECT_EQ(up.received()[0].body(), kChatBody);
  EXPECT_EQ(up.received()[0].target(), "/v1/chat/completions");
  // The same id goes upstream and back.
  EXPECT_EQ(up.received()[0]["X-Request-Id"], res["X-Request-Id"]);
}

TEST(ServerTest, ClientRequestIdPassesThrough) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                         R"({"prompt":"x"})", {{"X-Request-Id", "client-id-42"}});
  EXPECT_EQ(res["X-Request-Id"], "client-id-42");
  EXPECT_EQ(up.received().at(0)["X-Request-Id"], "client-id-42");
}

TEST(ServerTest, StreamingRoundTripByteForByte) {
  std::string expected;
  for (int i = 0; i < 5; ++i) expected += Event(i);
  expected += "data: [DONE]\n\n";
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    for (int i = 0; i < 5; ++i) FakeUpstream::WriteChunk(s, Event(i));
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res[http::field::content_type], "text/event-stream; charset=utf-8");
  EXPECT_EQ(res.body(), expected);
}

TEST(ServerTest, FirstEventArrivesBeforeUpstreamFinishes) {
  std::promise<void> gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  FakeUpstream up([gate_f](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    gate_f.wait();  // the rest only after the client saw event 0
    FakeUpstream::WriteChunk(s, Event(1));
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  net::io_context ioc;
  auto s = kvroute::testing::Connect(ioc, server->port());
  SetReadTimeout(s, 30);
  SendRaw(s, "/v1/chat/completions", kStreamBody);
  std::string acc;
  ReadUntil(s, acc, "\"t0\"");
  ASSERT_NE(acc.find("\"t0\""), std::string::npos) << "first event was not relayed early";
  EXPECT_EQ(acc.find("\"t1\""), std::string::npos);
  gate.set_value();
  ReadUntil(s, acc, "0\r\n\r\n");
  EXPECT_NE(acc.find("\"t1\""), std::string::npos);
  EXPECT_NE(acc.find("data: [DONE]"), std::string::npos);
}

TEST(ServerTest, ClientDisconnectCancelsUpstream) {
  std::promise<void> upstream_saw_close;
  std::promise<void> release;
  std::shared_future<void> release_f = release.get_future().share();
  FakeUpstream up([&](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    // The engine keeps "generating" until the proxy hangs up on it.
    char b[16];
    beast::error_code ec;
    s.read_some(net::buffer(b), ec);
    if (ec) upstream_saw_close.set_value();
    return false;
  });
  auto server = StartServer(TestConfig({up.port()}));
  {
    net::io_context ioc;
    auto s = kvroute::testing::Connect(ioc, server->port());
    SetReadTimeout(s, 30);
    SendRaw(s, "/v1/chat/completions", kStreamBody);
    std::string acc;
    ReadUntil(s, acc, "\"t0\"");
    ASSERT_NE(acc.find("\"t0\""), std::string::npos);
    s.close();
  }
  auto f = upstream_saw_close.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "upstream connection was not closed after the client left";
  server->Shutdown();
  server->Wait();
  EXPECT_GE(
      kvroute::testing::SampleValue(server->registry().Render(), "kvroute_client_disconnects_total"),
      1);
}

TEST(ServerTest, ClientDisconnectDuringPrefillCancelsUpstream) {
  std::promise<void> upstream_saw_close;
  std::promise<void> got_request;
  FakeUpstream up([&](const auto& req, auto& s) {
    got_request.set_value();
    char b[16];
    beast::error_code ec;
    s.read_some(net::buffer(b), ec);  // no response yet: a long prefill
    if (ec) upstream_saw_close.set_value();
    return false;
  });
  auto server = StartServer(TestConfig({up.port()}));
  {
    net::io_context ioc;
    auto s = kvroute::testing::Connect(ioc, server->port());
    SendRaw(s, "/v1/chat/completions", kStreamBody);
    got_request.get_future().wait();
    s.close();
  }
  auto f = upstream_saw_close.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

TEST(ServerTest, UpstreamRefusesConnectionIs502) {
  auto server = StartServer(TestConfig({ClosedPort()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(res.result_int(), 502);
  EXPECT_NE(res.body().find("\"error\""), std::string::npos);
  EXPECT_NE(res.body().find("\"code\":502"), std::string::npos);
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu0");
}

TEST(ServerTest, UpstreamTooSlowIs504) {
  std::promise<void> release;
  std::shared_future<void> release_f = release.get_future().share();
  FakeUpstream up([release_f](const auto& req, auto& s) {
    release_f.wait();  // never answers while the test runs
    return false;
  });
  Config c = TestConfig({up.port()});
  c.upstream.first_token_timeout = absl::Milliseconds(200);  // a plain body's header
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(res.result_int(), 504);
  EXPECT_NE(res.body().find("\"code\":504"), std::string::npos);
  release.set_value();
}

TEST(ServerTest, KeepAliveReusesBothSides) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  Config c = TestConfig({up.port()});
  c.threads = 1;  // one worker: one upstream pool
  auto server = StartServer(c);
  net::io_context ioc;
  auto s = kvroute::testing::Connect(ioc, server->port());
  for (int i = 0; i < 3; ++i) {
    auto res = kvroute::testing::Request(s, http::verb::post, "/v1/completions",
                                         R"({"prompt":"x"})");
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_TRUE(res.keep_alive());
  }
  EXPECT_EQ(up.requests(), 3);
  EXPECT_EQ(up.connections(), 1);
}

TEST(ServerTest, StaleKeepAliveConnectionIsRetriedOnce) {
  // The upstream closes after every response (without saying so), as an
  // engine restarting between requests would.
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return false;
  });
  Config c = TestConfig({up.port()});
  c.threads = 1;
  auto server = StartServer(c);
  for (int i = 0; i < 3; ++i) {
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                           R"({"prompt":"x"})");
    EXPECT_EQ(res.result_int(), 200) << i;
  }
  EXPECT_EQ(up.requests(), 3);
  server->Shutdown();
  server->Wait();
  EXPECT_NE(server->registry().Render().find(
                "kvroute_retries_total{backend=\"gpu0\",reason=\"stale_connection\"} 2\n"),
            std::string::npos)
      << server->registry().Render();
}

TEST(ServerTest, RoundRobinSpreadsAcrossBackends) {
  auto handler = [](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  };
  FakeUpstream a(handler), b(handler);
  auto server = StartServer(TestConfig({a.port(), b.port()}));
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                           R"({"prompt":"x"})");
    seen.insert(std::string(res["X-Kvroute-Backend"]));
  }
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(a.requests(), 2);
  EXPECT_EQ(b.requests(), 2);
}

TEST(ServerTest, ErrorsAreOpenAiShaped) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto not_found = RequestOnce(server->port(), http::verb::get, "/v2/nothing");
  EXPECT_EQ(not_found.result_int(), 404);
  EXPECT_NE(not_found.body().find("\"type\":\"invalid_request_error\""), std::string::npos);
  auto wrong_method = RequestOnce(server->port(), http::verb::get, "/v1/chat/completions");
  EXPECT_EQ(wrong_method.result_int(), 405);
  EXPECT_EQ(wrong_method[http::field::allow], "POST");
  auto bad_json = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", "{oops");
  EXPECT_EQ(bad_json.result_int(), 400);
  EXPECT_NE(bad_json.body().find("not valid JSON"), std::string::npos);
  auto missing = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions",
                             R"({"model":"m"})");
  EXPECT_EQ(missing.result_int(), 400);
  EXPECT_EQ(up.requests(), 0);
}

TEST(ServerTest, OversizedBodyIs413) {
  Config c = TestConfig({ClosedPort()});
  c.limits.max_body_bytes = 1024;
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                         R"({"prompt":")" + std::string(4096, 'a') + "\"}");
  EXPECT_EQ(res.result_int(), 413);
  EXPECT_NE(res.body().find("\"code\":413"), std::string::npos);
}

TEST(ServerTest, HealthFollowsBackends) {
  FakeUpstream up([](const auto& req, auto& s) {
    if (req.target() == "/health") {
      http::response<http::string_body> res{http::status::ok, 11};
      res.prepare_payload();
      http::write(s, res);
    } else {
      FakeUpstream::WriteJson(s, R"({"object":"list","data":[{"id":"m","object":"model"}]})");
    }
    return true;
  });
  {
    auto server = StartServer(TestConfig({up.port()}));
    server->CheckBackendsNow();
    EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200);
    auto models = RequestOnce(server->port(), http::verb::get, "/v1/models");
    EXPECT_EQ(models.result_int(), 200);
    EXPECT_NE(models.body().find("\"id\":\"m\""), std::string::npos);
  }
  {
    Config c = TestConfig({ClosedPort(), ClosedPort()});
    c.monitor.unhealthy_after = 2;
    auto server = StartServer(c);
    server->CheckBackendsNow();
    EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200)
        << "one failed check must not eject";
    server->CheckBackendsNow();
    auto health = RequestOnce(server->port(), http::verb::get, "/health");
    EXPECT_EQ(health.result_int(), 503);
    auto req = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                           R"({"prompt":"x"})");
    EXPECT_EQ(req.result_int(), 503);
    EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/v1/models").result_int(), 503);
    EXPECT_EQ(kvroute::testing::SampleValue(server->registry().Render(),
                                            "kvroute_backend_ejections_total",
                                            {{"backend", "gpu1"}, {"reason", "health_check"}}),
              1);
  }
}

TEST(ServerTest, MetricsAndRequestLog) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    FakeUpstream::WriteChunk(
        s, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
           "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n");
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  });
  const std::string log_path =
      (std::filesystem::temp_directory_path() / ("kvroute_log_" + std::to_string(getpid()) + ".jsonl"))
          .string();
  std::filesystem::remove(log_path);
  Config c = TestConfig({up.port()});
  c.request_log = log_path;
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody,
                         {{"X-Session-Id", "job-7"}, {"X-Request-Id", "rid-1"}});
  EXPECT_EQ(res.result_int(), 200);
  auto metrics = RequestOnce(server->port(), http::verb::get, "/metrics");
  EXPECT_EQ(metrics.result_int(), 200);
  EXPECT_NE(metrics.body().find("# TYPE kvroute_requests_total counter"), std::string::npos);
  EXPECT_NE(metrics.body().find("kvroute_backend_inflight_requests{backend=\"gpu0\"}"),
            std::string::npos);
  // Nothing learned yet (round_robin, no cost model of the fleet): 1.
  EXPECT_NE(metrics.body().find("kvroute_prefill_time_factor{backend=\"gpu0\"} 1\n"),
            std::string::npos)
      << metrics.body();
  EXPECT_NE(metrics.body().find("# TYPE kvroute_transfer_time_factor gauge"), std::string::npos);
  // Live sizing: every family, and no host tier on the fake engine.
  for (const char* family :
       {"kvroute_kv_working_set_tokens", "kvroute_kv_capacity_tokens",
        "kvroute_kv_instance_capacity_tokens", "kvroute_kv_instances",
        "kvroute_kv_write_rate_tokens_per_second", "kvroute_kv_retention_seconds",
        "kvroute_kv_reuse_gap_seconds", "kvroute_kv_bytes_per_token",
        "kvroute_residency_room_tier", "kvroute_long_pause_ratio"}) {
    EXPECT_NE(metrics.body().find(std::string("# TYPE ") + family + " gauge"), std::string::npos)
        << family;
  }
  EXPECT_NE(metrics.body().find("kvroute_kv_capacity_tokens{tier=\"host\"} 0\n"),
            std::string::npos);
  EXPECT_NE(metrics.body().find("kvroute_kv_retention_seconds{tier=\"host\"} 0\n"),
            std::string::npos);
  server->Shutdown();
  server->Wait();
  const std::string text = server->registry().Render();
  EXPECT_EQ(kvroute::testing::SampleValue(text, "kvroute_requests_total",
                                          {{"route", "/v1/chat/completions"},
                                           {"mode", "round_robin"},
                                           {"class", "WARM"},
                                           {"status", "200"}}),
            1)
      << text;
  EXPECT_EQ(kvroute::testing::SampleValue(
                text, "kvroute_time_to_first_byte_seconds_count",
                {{"route", "/v1/chat/completions"}, {"class", "WARM"}}),
            1);
  std::ifstream in(log_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  for (const char* field :
       {"\"id\":\"rid-1\"", "\"session\":\"job-7\"", "\"mode\":\"round_robin\"", "\"class\":\"WARM\"",
        "\"decode_backend\":\"gpu0\"", "\"status\":200", "\"prompt_tokens\":12",
        "\"cached_tokens\":0", "\"t_arrival\":", "\"t_first_token\":", "\"t_done\":",
        "\"error\":null"}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
  }
  EXPECT_EQ(line.find("hello there"), std::string::npos) << "prompts must never be logged";
  std::filesystem::remove(log_path);
}

// An engine sends a stream's header as soon as it accepts the request, long before the
// first token: the header must not count as the first token (the router keeps the request's
// prefill queued until then). An engine that dies after the header sent no token at all.
TEST(ServerTest, AStreamsHeaderIsNotItsFirstToken) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    return false;  // dies before its first event
  });
  const std::string log_path = (std::filesystem::temp_directory_path() /
                                ("kvroute_hdr_" + std::to_string(getpid()) + ".jsonl"))
                                   .string();
  std::filesystem::remove(log_path);
  Config c = TestConfig({up.port()});
  c.request_log = log_path;
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  EXPECT_EQ(res.result_int(), 200);
  server->Shutdown();
  server->Wait();
  std::ifstream in(log_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("\"t_first_token\":null"), std::string::npos) << line;
  std::filesystem::remove(log_path);
}

TEST(ServerTest, StreamBrokenMidwayEndsWithErrorEvent) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    return false;  // dies without the terminating chunk
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body().find(Event(0)), 0u);
  EXPECT_NE(res.body().find("data: {\"error\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("data: [DONE]\n\n"), std::string::npos);
}

TEST(ServerTest, ShutdownDrainsInFlightStream) {
  std::promise<void> started, gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  FakeUpstream up([&, gate_f](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    started.set_value();
    gate_f.wait();
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  });
  auto server = StartServer(TestConfig({up.port()}));
  auto client = std::async(std::launch::async, [&] {
    return RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  });
  started.get_future().wait();
  server->Shutdown();
  gate.set_value();
  auto res = client.get();
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("data: [DONE]"), std::string::npos);
  server->Wait();
}


// --- Faults: retries on another instance, passive ejection, admission. ---

bool AnswerHealth(const http::request<http::string_body>& req, tcp::socket& s, int status) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.prepare_payload();
  beast::error_code ec;
  http::write(s, res, ec);
  return true;
}

std::string Rendered(Server& server) { return server.registry().Render(); }

TEST(ServerTest, FailedBeforeFirstByteIsRetriedOnAnotherInstance) {
  FakeUpstream bad([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, R"({"error":"engine dead"})", 503);
    return true;
  });
  FakeUpstream good([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  // The first instance answers 503, or refuses the connection.
  const std::vector<std::pair<uint16_t, std::string>> cases = {{bad.port(), "5xx"},
                                                               {ClosedPort(), "connect"}};
  for (const auto& [first, reason] : cases) {
    Config c = TestConfig({first, good.port()});
    c.upstream.retry_backoff = absl::ZeroDuration();
    auto server = StartServer(c);
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
    EXPECT_EQ(res.result_int(), 200) << reason;
    EXPECT_EQ(res.body(), kJsonResponse);
    EXPECT_EQ(res["X-Kvroute-Backend"], "gpu1");
    server->Shutdown();
    server->Wait();
    const std::string m = Rendered(*server);
    EXPECT_NE(m.find("kvroute_retries_total{backend=\"gpu1\",reason=\"" + reason + "\"} 1\n"),
              std::string::npos) << m;
    EXPECT_NE(m.find("status=\"200\"} 1\n"), std::string::npos) << m;
    // The router's load was released for every attempt.
    for (const auto& b : server->router().Report()) EXPECT_EQ(b.inflight_requests, 0) << b.name;
  }
  EXPECT_EQ(bad.requests(), 1);
  EXPECT_EQ(good.requests(), 2);
}

TEST(ServerTest, RetriesAreBoundedAndTheLastFailureIsAnswered) {
  auto handler = [](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, R"({"error":"overloaded"})", 503);
    return true;
  };
  FakeUpstream a(handler), b(handler), c3(handler);
  Config c = TestConfig({a.port(), b.port(), c3.port()});
  c.upstream.max_attempts = 2;
  c.upstream.retry_backoff = absl::ZeroDuration();
  c.monitor.passive_failures = 100;
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(res.result_int(), 503);
  EXPECT_NE(res.body().find("(2 attempts)"), std::string::npos) << res.body();
  EXPECT_EQ(a.requests() + b.requests() + c3.requests(), 2);
}

TEST(ServerTest, ClientErrorsAreNotRetried) {
  auto handler = [](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, R"({"error":{"message":"bad model"}})", 404);
    return true;
  };
  FakeUpstream a(handler), b(handler);
  auto server = StartServer(TestConfig({a.port(), b.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(res.result_int(), 404);
  EXPECT_EQ(a.requests() + b.requests(), 1);
}

TEST(ServerTest, StreamThatStartedIsNeverRetried) {
  FakeUpstream breaks([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, Event(0));
    return false;
  });
  FakeUpstream good([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  auto server = StartServer(TestConfig({breaks.port(), good.port()}));
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("data: {\"error\""), std::string::npos);
  EXPECT_EQ(good.requests(), 0);
}

TEST(ServerTest, ConsecutiveFailuresEjectPassivelyAndHalfOpenReadmits) {
  std::atomic<bool> broken{true};
  FakeUpstream flaky([&](const auto& req, auto& s) {
    if (req.target() == "/health") return AnswerHealth(req, s, 200);
    FakeUpstream::WriteJson(s, broken ? R"({"error":"x"})" : kJsonResponse, broken ? 500 : 200);
    return true;
  });
  FakeUpstream good([](const auto& req, auto& s) {
    if (req.target() == "/health") return AnswerHealth(req, s, 200);
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  Config c = TestConfig({flaky.port(), good.port()});
  c.upstream.retry_backoff = absl::ZeroDuration();
  c.monitor.passive_failures = 2;
  c.monitor.ejection = absl::ZeroDuration();  // half-open at the next monitor round
  auto server = StartServer(c);
  for (int i = 0; i < 6; ++i) {
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                           R"({"prompt":"x"})");
    EXPECT_EQ(res.result_int(), 200) << i;
  }
  EXPECT_EQ(flaky.requests(), 2);  // ejected after two failures, then skipped
  EXPECT_FALSE(server->router().Report()[0].healthy);
  std::string m = Rendered(*server);
  EXPECT_NE(m.find("kvroute_backend_ejections_total{backend=\"gpu0\",reason=\"passive_failures\"} 1"),
            std::string::npos) << m;
  // The active checks pass; once the ejection ran out the breaker is
  // half-open, and one good request closes it.
  broken = false;
  server->CheckBackendsNow();
  EXPECT_TRUE(server->router().Report()[0].healthy);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(RequestOnce(server->port(), http::verb::post, "/v1/completions",
                          R"({"prompt":"x"})").result_int(), 200);
  }
  EXPECT_GT(flaky.requests(), 2);  // back in rotation
  EXPECT_EQ(server->health_of(0).breaker, BreakerState::kClosed);
}

TEST(ServerTest, EjectionSendsWaitingRequestsElsewhere) {
  std::promise<void> arrived, release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<bool> once{false};
  FakeUpstream hung([&, release_f](const auto& req, auto& s) {
    if (req.target() == "/health") return AnswerHealth(req, s, 500);
    if (!once.exchange(true)) arrived.set_value();
    release_f.wait();  // never answers while the test runs
    return false;
  });
  FakeUpstream good([](const auto& req, auto& s) {
    if (req.target() == "/health") return AnswerHealth(req, s, 200);
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  Config c = TestConfig({hung.port(), good.port()});
  c.monitor.unhealthy_after = 1;
  c.upstream.first_byte_timeout = absl::Seconds(20);  // far beyond the test's own time
  c.upstream.retry_backoff = absl::ZeroDuration();
  auto server = StartServer(c);
  auto client = std::async(std::launch::async, [&] {
    return RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  });
  arrived.get_future().wait();  // the request waits on gpu0
  server->CheckBackendsNow();   // gpu0 fails its check: ejected
  auto res = client.get();
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu1");
  server->Shutdown();
  server->Wait();
  const std::string m = Rendered(*server);
  EXPECT_NE(m.find("kvroute_retries_total{backend=\"gpu1\",reason=\"ejected\"} 1"),
            std::string::npos) << m;
  release.set_value();
}

TEST(ServerTest, OverAdmissionLimitIs429WithRetryAfter) {
  std::promise<void> arrived, release;
  std::shared_future<void> release_f = release.get_future().share();
  FakeUpstream up([&, release_f](const auto& req, auto& s) {
    arrived.set_value();
    release_f.wait();
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  Config c = TestConfig({up.port()});
  c.limits.max_inflight_requests = 1;
  c.limits.max_queued_requests = 1;
  c.limits.queue_timeout = absl::Milliseconds(50);
  c.limits.retry_after = absl::Seconds(3);
  auto server = StartServer(c);
  auto first = std::async(std::launch::async, [&] {
    return RequestOnce(server->port(), http::verb::post, "/v1/completions", R"({"prompt":"x"})");
  });
  arrived.get_future().wait();
  // Queued, then refused when its wait runs out.
  auto second = RequestOnce(server->port(), http::verb::post, "/v1/completions", R"({"prompt":"y"})");
  EXPECT_EQ(second.result_int(), 429);
  EXPECT_EQ(second["Retry-After"], "3");
  EXPECT_EQ(second["retry-after-ms"], "3000");
  EXPECT_NE(second.body().find("\"code\":429"), std::string::npos);
  release.set_value();
  EXPECT_EQ(first.get().result_int(), 200);
  EXPECT_EQ(up.requests(), 1);
  EXPECT_EQ(kvroute::testing::SampleValue(Rendered(*server), "kvroute_admission_rejections_total"),
            1);
}

TEST(ServerTest, ConnectionsBeyondTheLimitGet503) {
  Config c = TestConfig({ClosedPort()});
  c.limits.max_connections = 1;
  auto server = StartServer(c);
  net::io_context ioc;
  auto held = kvroute::testing::Connect(ioc, server->port());
  auto refused = kvroute::testing::Connect(ioc, server->port());
  SetReadTimeout(refused, 10);
  std::string acc;
  ReadUntil(refused, acc, "}}");
  EXPECT_EQ(acc.rfind("HTTP/1.1 503", 0), 0u) << acc;
  EXPECT_NE(acc.find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(acc.find("\"code\":503"), std::string::npos);
}

TEST(ServerTest, ReloadBackendsAddsAndRetiresWithoutRestart) {
  auto handler = [](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  };
  FakeUpstream a(handler), b(handler);
  Config c = TestConfig({a.port()});
  auto server = StartServer(c);
  auto serve = [&] {
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/completions",
                           R"({"prompt":"x"})");
    EXPECT_EQ(res.result_int(), 200);
    return std::string(res["X-Kvroute-Backend"]);
  };
  EXPECT_EQ(serve(), "gpu0");

  Config both = TestConfig({a.port(), b.port()});
  ASSERT_TRUE(server->ReloadBackends(both.backends, 8998).ok());
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) seen.insert(serve());
  EXPECT_EQ(seen, (std::set<std::string>{"gpu0", "gpu1"}));
  EXPECT_GT(b.requests(), 0);

  // An invalid list changes nothing.
  EXPECT_FALSE(server->ReloadBackends({}, 8998).ok());
  EXPECT_EQ(server->router().Backends()->size(), 2u);

  Config only_b = TestConfig({b.port()});
  only_b.backends[0].name = only_b.backends[0].spec.name = "gpu1";
  ASSERT_TRUE(server->ReloadBackends(only_b.backends, 8998).ok());
  const int a_before = a.requests();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(serve(), "gpu1");
  EXPECT_EQ(a.requests(), a_before);
  server->CheckBackendsNow();  // the monitor skips the retired slot
  const auto report = server->router().Report();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_TRUE(report[0].retired);
  EXPECT_FALSE(report[1].retired);
  auto admin = RequestOnce(server->port(), http::verb::get, "/admin/backends");
  EXPECT_NE(admin.body().find("\"retired\":true"), std::string::npos) << admin.body();
  auto health = RequestOnce(server->port(), http::verb::get, "/health");
  EXPECT_NE(health.body().find("\"backends\":1"), std::string::npos) << health.body();
}

}  // namespace
// An engine answers a stream's header at once and says nothing until the
// first token, however long its queue: that silence is bounded by the
// first-token wait, not by the stream's idle timer.
TEST(ServerTest, AQuietQueueBeforeTheFirstTokenIsNotAStalledStream) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    // Queued: two hundred times the idle timeout without a byte.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int i = 0; i < 3; ++i) FakeUpstream::WriteChunk(s, Event(i));
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  });
  Config c = TestConfig({up.port()});
  c.upstream.idle_timeout = absl::Milliseconds(1);
  c.upstream.first_token_timeout = absl::Seconds(60);
  auto server = StartServer(c);
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kStreamBody);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("\"t2\""), std::string::npos) << res.body();
  EXPECT_EQ(res.body().find("\"error\""), std::string::npos) << res.body();
  const std::string m = Rendered(*server);
  EXPECT_EQ(m.find("kvroute_stream_errors_total{"), std::string::npos) << m;
  EXPECT_EQ(m.find("kvroute_upstream_errors_total{"), std::string::npos) << m;
}

// A request predicted to reach its first token past its deadline is answered
// 429 with Retry-After at once, in its API's error shape, and no engine sees it.
TEST(ServerTest, PastItsDeadlineARequestIsShedBeforeAnyEngineWork) {
  FakeUpstream up([](const auto& req, auto& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  });
  Config c = TestConfig({up.port()});
  c.router.mode = "baseline";
  c.router.offload_cost_known = true;
  c.router.offload_cost.prefill_tokens_per_second = 10;  // 1,000 tokens: 100 s
  c.router.shed.max_retry_after_s = 2.5;
  auto server = StartServer(c);
  const std::string words(4000, 'w');
  const std::string chat =
      R"({"model":"m","messages":[{"role":"user","content":")" + words + R"("}]})";
  auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", chat);
  EXPECT_EQ(res.result_int(), 429);
  // The predicted excess (92 s), at most max_retry_after_s: whole seconds rounded up in
  // Retry-After, milliseconds in retry-after-ms (which the OpenAI and Anthropic SDKs read).
  EXPECT_EQ(res["Retry-After"], "3");
  EXPECT_EQ(res["retry-after-ms"], "2500");
  EXPECT_EQ(res["X-Kvroute-Class"], "WARM");
  EXPECT_NE(res.body().find("\"type\":\"rate_limit_error\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("shedding load"), std::string::npos) << res.body();
  const std::string messages = R"({"model":"m","max_tokens":8,"messages":[{"role":"user","content":")" +
                               words + R"("}]})";
  auto anthropic = RequestOnce(server->port(), http::verb::post, "/v1/messages", messages);
  EXPECT_EQ(anthropic.result_int(), 429);
  EXPECT_EQ(anthropic["Retry-After"], "3");
  EXPECT_EQ(anthropic["retry-after-ms"], "2500");
  EXPECT_NE(anthropic.body().find("\"type\":\"error\""), std::string::npos) << anthropic.body();
  EXPECT_NE(anthropic.body().find("\"rate_limit_error\""), std::string::npos) << anthropic.body();
  EXPECT_EQ(up.requests(), 0);
  const std::string m = Rendered(*server);
  EXPECT_NE(m.find("kvroute_shed_total{route=\"/v1/chat/completions\",class=\"WARM\",session="
                   "\"new\"} 1"),
            std::string::npos)
      << m;
  // A short prompt fits its deadline and is served.
  auto small = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", kChatBody);
  EXPECT_EQ(small.result_int(), 200);
  EXPECT_EQ(up.requests(), 1);
}

}  // namespace kvroute::proxy
