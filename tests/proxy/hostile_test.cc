// Hostile clients against kvroute's server: request smuggling, slow clients
// (slowloris, stalled bodies, readers that stop reading), admin access and
// what reaches the logs. Raw sockets against the server in-process on port 0
// (tests/proxy/proxy_harness.h); no sleeps to wait for anything: tests
// synchronise on bytes, EOF and promises, and every read has a guard timeout
// far above the limit under test.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "proxy/server.h"
#include "tests/proxy/fake_upstream.h"
#include "tests/proxy/proxy_harness.h"

namespace kvroute::proxy {
namespace {

using harness::ParseResponse;
using harness::ReadToEnd;
using harness::ReadUntil;
using harness::ReadUntilClosed;
using harness::StartServer;
using harness::TestConfig;
using kvroute::testing::ClosedPort;
using kvroute::testing::Connect;
using kvroute::testing::FakeUpstream;
using kvroute::testing::RequestOnce;
using Clock = std::chrono::steady_clock;

const char kJsonResponse[] =
    R"({"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})";

FakeUpstream::Handler AnswerJson() {
  return [](const http::request<http::string_body>&, tcp::socket& s) {
    FakeUpstream::WriteJson(s, kJsonResponse);
    return true;
  };
}

// ---------------------------------------------------------------------------
// Request smuggling
// ---------------------------------------------------------------------------

// The request an attacker hopes a second parser sees: if kvroute ever
// forwarded it, the fake upstream would count it.
const std::string kSmuggled =
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Content-Length: 14\r\n\r\n{\"prompt\":\"x\"}";

std::string Hex(size_t n) {
  char b[32];
  std::snprintf(b, sizeof(b), "%zx", n);
  return b;
}

struct SmugglingCase {
  const char* name;
  std::string raw;  // everything the client sends, in one write
};

std::vector<SmugglingCase> SmugglingCases() {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  const std::string body = R"({"prompt":"a"})";
  // A chunked body whose terminating chunk is followed by the smuggled request.
  const std::string chunked_then_smuggled =
      Hex(body.size()) + "\r\n" + body + "\r\n0\r\n\r\n" + kSmuggled;
  // The smuggled request hidden inside one chunk: a Content-Length parser
  // stops before it, a chunked parser swallows it.
  const std::string smuggled_in_chunk = Hex(kSmuggled.size()) + "\r\n" + kSmuggled + "\r\n0\r\n\r\n";
  return {
      {"ContentLengthThenChunked",
       head + "Content-Length: " + std::to_string(chunked_then_smuggled.size()) +
           "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked_then_smuggled},
      {"ChunkedThenContentLength",
       head + "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + smuggled_in_chunk},
      {"TwoDifferentContentLengths",
       head + "Content-Length: " + std::to_string(body.size()) +
           "\r\nContent-Length: " + std::to_string(body.size() + kSmuggled.size()) + "\r\n\r\n" +
           body + kSmuggled},
      {"ContentLengthList",
       head + "Content-Length: 1, 2\r\n\r\n" + body + kSmuggled},
      {"ContentLengthWithSign", head + "Content-Length: +14\r\n\r\n" + body + kSmuggled},
      // Beast ignores a coding it does not know: no body, and the next bytes
      // would be read as a request.
      {"TransferEncodingXchunked", head + "Transfer-Encoding: xchunked\r\n\r\n" + kSmuggled},
      {"TransferEncodingXchunkedThenContentLength",
       head + "Transfer-Encoding: xchunked\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body + kSmuggled},
      {"ChunkedNotLast", head + "Transfer-Encoding: chunked, identity\r\n\r\n" + kSmuggled},
      {"IdentityThenChunked",
       head + "Transfer-Encoding: identity, chunked\r\n\r\n" + chunked_then_smuggled},
      {"TwoTransferEncodingHeaders",
       head + "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" +
           chunked_then_smuggled},
      {"ChunkedTwice",
       head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" +
           chunked_then_smuggled},
      {"SpaceBeforeColon",
       head + "Transfer-Encoding : chunked\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body + kSmuggled},
      {"ChunkedInHttp10",
       "POST /v1/completions HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
       "Transfer-Encoding: chunked\r\n\r\n" +
           chunked_then_smuggled},
      {"BareLineFeedsInChunks",
       head + "Transfer-Encoding: chunked\r\n\r\n" + Hex(body.size()) + "\n" + body +
           "\n0\n\n" + kSmuggled},
      {"HexPrefixedChunkSize",
       head + "Transfer-Encoding: chunked\r\n\r\n0x" + Hex(body.size()) + "\r\n" + body +
           "\r\n0\r\n\r\n" + kSmuggled},
  };
}

void PrintTo(const SmugglingCase& c, std::ostream* os) { *os << c.name; }

class SmugglingTest : public ::testing::TestWithParam<SmugglingCase> {};

// Every ambiguous framing gets one 400 (OpenAI-shaped), the connection
// closes, and nothing reaches the upstream: neither the first request nor
// the one hidden behind it.
TEST_P(SmugglingTest, RefusedWith400AndClosedAndNothingForwarded) {
  FakeUpstream up(AnswerJson());
  auto server = StartServer(TestConfig({up.port()}));
  net::io_context ioc;
  tcp::socket s = Connect(ioc, server->port());
  net::write(s, net::buffer(GetParam().raw));
  const ReadToEnd got = ReadUntilClosed(s);
  EXPECT_TRUE(got.closed) << "the connection stayed open";
  size_t used = 0;
  auto res = ParseResponse(got.bytes, &used);
  ASSERT_TRUE(res.has_value()) << got.bytes;
  EXPECT_EQ(res->result_int(), 400) << got.bytes;
  EXPECT_NE(res->body().find("\"type\":\"invalid_request_error\""), std::string::npos)
      << res->body();
  EXPECT_NE(res->body().find("\"code\":400"), std::string::npos) << res->body();
  EXPECT_FALSE(res->keep_alive());
  EXPECT_EQ(got.bytes.size(), used) << "a second response followed: " << got.bytes;
  server->Shutdown();
  server->Wait();
  EXPECT_EQ(up.requests(), 0);
}

INSTANTIATE_TEST_SUITE_P(Hostile, SmugglingTest, ::testing::ValuesIn(SmugglingCases()),
                         [](const auto& info) { return std::string(info.param.name); });

// The control: a well-framed chunked request followed by a pipelined request
// is two requests, each forwarded with kvroute's own framing (Content-Length,
// no Transfer-Encoding), so the smuggling tests above would see a leak.
TEST(HostileTest, WellFramedChunkedRequestThenPipelinedRequestAreTwoRequests) {
  FakeUpstream up(AnswerJson());
  auto server = StartServer(TestConfig({up.port()}));
  net::io_context ioc;
  tcp::socket s = Connect(ioc, server->port());
  const std::string body = R"({"prompt":"a"})";
  const std::string raw = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n" +
                          Hex(body.size()) + "\r\n" + body + "\r\n0\r\n\r\n" +
                          "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Content-Length: 14\r\n\r\n{\"prompt\":\"x\"}";
  net::write(s, net::buffer(raw));
  const ReadToEnd got = ReadUntilClosed(s);
  EXPECT_TRUE(got.closed);
  size_t used1 = 0, used2 = 0;
  auto first = ParseResponse(got.bytes, &used1);
  ASSERT_TRUE(first.has_value()) << got.bytes;
  auto second = ParseResponse(got.bytes.substr(used1), &used2);
  ASSERT_TRUE(second.has_value()) << got.bytes;
  EXPECT_EQ(first->result_int(), 200);
  EXPECT_EQ(second->result_int(), 200);
  const auto received = up.received();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].body(), body);
  EXPECT_EQ(received[1].body(), "{\"prompt\":\"x\"}");
  for (const auto& r : received) {
    EXPECT_EQ(r.count(http::field::transfer_encoding), 0u);
    EXPECT_EQ(r[http::field::content_length], std::to_string(r.body().size()));
  }
}

// ---------------------------------------------------------------------------
// Slow clients
// ---------------------------------------------------------------------------

const std::string kHeaderStart =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A header sent one byte per write, then nothing: cut off once
// limits.header_timeout has passed since its first byte.
TEST(HostileTest, HeaderSentByteByByteThenStalledIsCutOffAfterHeaderTimeout) {
  FakeUpstream up(AnswerJson());
  Config c = TestConfig({up.port()});
  c.limits.header_timeout = absl::Milliseconds(200);
  auto server = StartServer(c);
  net::io_context ioc;
  tcp::socket s = Connect(ioc, server->port());
  s.set_option(tcp::no_delay(true));
  const auto t0 = Clock::now();
  for (char ch : kHeaderStart) net::write(s, net::buffer(&ch, 1));
  const ReadToEnd got = ReadUntilClosed(s);
  EXPECT_TRUE(got.closed) << "still connected after the guard timeout";
  EXPECT_GE(SecondsSince(t0), 0.2);
  EXPECT_EQ(got.bytes, "") << "a timed-out header gets no answer";
  // The server serves the next client.
  EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200);
  EXPECT_EQ(up.requests(), 0);
}

// Slowloris proper: a byte every 20 ms keeps arriving, but the header
// deadline covers the whole header, not the gap between two bytes.
TEST(HostileTest, HeaderTrickleIsCutOffAfterHeaderTimeout) {
  FakeUpstream up(AnswerJson());
  Config c = TestConfig({up.port()});
  c.limits.header_timeout = absl::Milliseconds(200);
  auto server = StartServer(c);
  net::io_context ioc;
  tcp::socket s = Connect(ioc, server->port());
  s.set_option(tcp::no_delay(true));
  std::atomic<bool> closed{false};
  const int fd = s.native_handle();
  const auto t0 = Clock::now();
  std::thread trickler([&] {
    // An endless header: X-Pad: aaaa... (the header limit is far away).
    std::string bytes = kHeaderStart + "X-Pad: ";
    for (size_t i = 0; !closed.load(); ++i) {
      const char ch = i < bytes.size() ? bytes[i] : 'a';
      // The raw descriptor: the main thread reads the socket meanwhile.
      if (::send(fd, &ch, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // pacing, not waiting
    }
  });
  const ReadToEnd got = ReadUntilClosed(s);
  closed.store(true);
  trickler.join();
  EXPECT_TRUE(got.closed) << "a trickling header kept the connection open";
  EXPECT_GE(SecondsSince(t0), 0.2);
  EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200);
}

// A header promising 1000 bytes of body, 10 of them, then nothing: cut off
// after limits.request_timeout; nothing is forwarded.
TEST(HostileTest, StalledBodyIsCutOffAfterRequestTimeout) {
  FakeUpstream up(AnswerJson());
  Config c = TestConfig({up.port()});
  c.limits.request_timeout = absl::Milliseconds(200);
  auto server = StartServer(c);
  net::io_context ioc;
  tcp::socket s = Connect(ioc, server->port());
  const auto t0 = Clock::now();
  const std::string partial = kHeaderStart + "Content-Length: 1000\r\n\r\n{\"model\":";
  net::write(s, net::buffer(partial));
  const ReadToEnd got = ReadUntilClosed(s);
  EXPECT_TRUE(got.closed) << "still connected after the guard timeout";
  EXPECT_GE(SecondsSince(t0), 0.2);
  EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200);
  EXPECT_EQ(up.requests(), 0);
}

// An engine that streams until kvroute hangs up on it; `saw_close` is set
// when a write fails.
struct EndlessStream {
  std::promise<void> started;
  std::promise<void> saw_close;
  std::atomic<int64_t> bytes{0};

  FakeUpstream::Handler Handler() {
    return [this](const http::request<http::string_body>& req, tcp::socket& s) {
      if (req.body().find("flood") == std::string::npos) {
        FakeUpstream::WriteJson(s, kJsonResponse);
        return true;
      }
      FakeUpstream::WriteSseHeader(s);
      const std::string event = "data: {\"choices\":[{\"delta\":{\"content\":\"" +
                                std::string(16 * 1024, 'z') + "\"}}]}\n\n";
      bool first = true;
      while (FakeUpstream::WriteChunk(s, event)) {
        bytes += static_cast<int64_t>(event.size());
        if (first) started.set_value();
        first = false;
      }
      saw_close.set_value();
      return false;
    };
  }
};

const char kFloodBody[] =
    R"({"model":"m","stream":true,"messages":[{"role":"user","content":"flood"}]})";

void SendJson(tcp::socket& s, const std::string& body) {
  const std::string req = kHeaderStart + "Content-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  net::write(s, net::buffer(req));
}

// A client that stops reading a long stream: the write that cannot finish
// times out after limits.write_timeout, the client is disconnected and the
// engine's request is cancelled (its connection closed).
TEST(HostileTest, ReaderThatStopsReadingIsCutOffAfterWriteTimeout) {
  EndlessStream engine;
  FakeUpstream up(engine.Handler());
  Config c = TestConfig({up.port()});
  c.limits.write_timeout = absl::Milliseconds(300);
  auto server = StartServer(c);
  net::io_context ioc;
  tcp::socket s(ioc);
  s.open(tcp::v4());
  s.set_option(net::socket_base::receive_buffer_size(4096));  // before connect: small window
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
  SendJson(s, kFloodBody);
  std::string acc;
  ASSERT_TRUE(ReadUntil(s, acc, "data: ")) << acc;  // the stream started; now stop reading
  auto saw_close = engine.saw_close.get_future();
  ASSERT_EQ(saw_close.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the engine was never hung up on (" << engine.bytes.load() << " bytes streamed)";
  const ReadToEnd rest = ReadUntilClosed(s);  // what was in flight, then the end
  EXPECT_TRUE(rest.closed);
  EXPECT_EQ(RequestOnce(server->port(), http::verb::post, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}]})")
                .result_int(),
            200);
  server->Shutdown();
  server->Wait();
  const std::string metrics = server->registry().Render();
  EXPECT_NE(metrics.find("kvroute_client_disconnects_total 1\n"), std::string::npos) << metrics;
}

// One worker thread; a slowloris header, a stalled body and a reader that
// stopped reading a stream all hold their connections (timeouts are long
// here), and another client is still served.
TEST(HostileTest, ServesOtherClientsWhileSlowClientsStall) {
  EndlessStream engine;
  FakeUpstream up(engine.Handler());
  Config c = TestConfig({up.port()});
  c.threads = 1;
  c.limits.header_timeout = absl::Seconds(60);
  c.limits.request_timeout = absl::Seconds(60);
  c.limits.write_timeout = absl::Seconds(60);
  auto server = StartServer(c);
  net::io_context ioc;
  tcp::socket slow_header = Connect(ioc, server->port());
  net::write(slow_header, net::buffer(kHeaderStart.substr(0, 20)));
  tcp::socket slow_body = Connect(ioc, server->port());
  net::write(slow_body, net::buffer(kHeaderStart + "Content-Length: 1000\r\n\r\n{"));
  tcp::socket slow_reader(ioc);
  slow_reader.open(tcp::v4());
  slow_reader.set_option(net::socket_base::receive_buffer_size(4096));
  slow_reader.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
  SendJson(slow_reader, kFloodBody);
  // The stream is flowing (and soon stuck).
  ASSERT_EQ(engine.started.get_future().wait_for(std::chrono::seconds(60)),
            std::future_status::ready);

  for (int i = 0; i < 3; ++i) {
    auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"hi"}]})");
    EXPECT_EQ(res.result_int(), 200) << i;
    EXPECT_EQ(res.body(), kJsonResponse);
  }
  EXPECT_EQ(RequestOnce(server->port(), http::verb::get, "/health").result_int(), 200);
  // The stalled ones are still connected: nothing has cut them off.
  EXPECT_EQ(engine.saw_close.get_future().wait_for(std::chrono::seconds(0)),
            std::future_status::timeout);
  slow_reader.close();  // kvroute's next write fails and the engine is hung up on
  slow_header.close();
  slow_body.close();
  server->Shutdown();
  server->Wait();
}

// ---------------------------------------------------------------------------
// Admin endpoints
// ---------------------------------------------------------------------------

const std::string kAdminToken = "s3cret-admin-token-0123456789";

http::response<http::string_body> GetAdmin(uint16_t port, const std::string& authorization,
                                           const std::string& target = "/admin/backends") {
  std::vector<std::pair<std::string, std::string>> headers;
  if (!authorization.empty()) headers.emplace_back("Authorization", authorization);
  return RequestOnce(port, http::verb::get, target, "", std::move(headers));
}

TEST(HostileTest, AdminAnswersOnLoopbackByDefault) {
  Config c = TestConfig({ClosedPort()});
  auto server = StartServer(c);
  auto res = GetAdmin(server->port(), "");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("\"backends\":[{\"name\":\"gpu0\""), std::string::npos) << res.body();
  // A configured token does not lock loopback out while allow_loopback holds.
  c.admin.token = kAdminToken;
  auto with_token = StartServer(c);
  EXPECT_EQ(GetAdmin(with_token->port(), "").result_int(), 200);
}

// allow_loopback: false makes 127.0.0.1 a stranger, as any remote client is.
TEST(HostileTest, AdminWithoutTokenIsForbiddenToStrangers) {
  Config c = TestConfig({ClosedPort()});
  c.admin.allow_loopback = false;
  auto server = StartServer(c);
  auto res = GetAdmin(server->port(), "Bearer " + kAdminToken);
  EXPECT_EQ(res.result_int(), 403);
  EXPECT_NE(res.body().find("\"type\":\"authentication_error\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("\"code\":403"), std::string::npos);
  EXPECT_EQ(res.count(http::field::www_authenticate), 0u);
}

TEST(HostileTest, AdminTokenAdmitsStrangersAndNothingElseDoes) {
  Config c = TestConfig({ClosedPort()});
  c.admin.allow_loopback = false;
  c.admin.token = kAdminToken;
  auto server = StartServer(c);
  const std::string wrong_last = kAdminToken.substr(0, kAdminToken.size() - 1) + "X";
  const std::vector<std::string> refused = {
      "", "Bearer", "Bearer ", "Bearer " + wrong_last, "Bearer " + kAdminToken.substr(0, 16),
      "Bearer " + kAdminToken + "x", "Basic " + kAdminToken, kAdminToken, "Bearer  wrong"};
  for (const std::string& auth : refused) {
    auto res = GetAdmin(server->port(), auth);
    EXPECT_EQ(res.result_int(), 401) << "Authorization: " << auth;
    EXPECT_EQ(res[http::field::www_authenticate].substr(0, 6), "Bearer") << auth;
    EXPECT_NE(res.body().find("\"code\":401"), std::string::npos) << res.body();
    EXPECT_EQ(res.body().find(kAdminToken), std::string::npos) << "the token leaked";
  }
  for (const std::string& auth : {"Bearer " + kAdminToken, "bearer " + kAdminToken}) {
    auto res = GetAdmin(server->port(), auth);
    EXPECT_EQ(res.result_int(), 200) << auth;
    EXPECT_NE(res.body().find("\"name\":\"gpu0\""), std::string::npos);
  }
  // Every /admin/ path is behind the same check; past it, unknown is 404.
  EXPECT_EQ(GetAdmin(server->port(), "", "/admin/reload").result_int(), 401);
  EXPECT_EQ(GetAdmin(server->port(), "Bearer " + kAdminToken, "/admin/reload").result_int(), 404);
  // Other endpoints do not need the token.
  EXPECT_EQ(GetAdmin(server->port(), "", "/metrics").result_int(), 200);
}

// ---------------------------------------------------------------------------
// Prompts and completions stay out of the logs
// ---------------------------------------------------------------------------

const char kSecretPrompt[] = "zebra-quartz-prompt-7781";
const char kSecretCompletion[] = "xylophone-completion-4413";

// Captures everything spdlog's default logger writes while it lives.
class SpdlogCapture {
 public:
  SpdlogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::trace);
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~SpdlogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "_" + std::to_string(getpid()) + ".jsonl"))
      .string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An engine whose answers carry kSecretCompletion: a JSON answer, a stream,
// a stream that breaks, and a 400 that echoes the prompt back as vLLM's does.
FakeUpstream::Handler SecretEngine() {
  return [](const http::request<http::string_body>& req, tcp::socket& s) {
    const std::string& b = req.body();
    const std::string content = std::string("\"") + kSecretCompletion + "\"";
    if (b.find("echo-error") != std::string::npos) {
      FakeUpstream::WriteJson(s, "{\"error\":{\"message\":\"bad prompt " + std::string(kSecretPrompt) +
                                     "\",\"code\":400}}",
                              400);
      return true;
    }
    if (b.find("\"stream\":true") == std::string::npos) {
      FakeUpstream::WriteJson(s, R"({"choices":[{"message":{"content":)" + content + "}}]}");
      return true;
    }
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(s, "data: {\"choices\":[{\"delta\":{\"content\":" + content +
                                    "}}]}\n\n");
    if (b.find("break") != std::string::npos) return false;  // dies mid-stream
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  };
}

// Serves a batch of requests carrying kSecretPrompt through every path that
// logs (success, stream, broken stream, upstream 4xx, bad request, health
// change); returns the request log's text and spdlog's output.
std::pair<std::string, std::string> ServeSecrets(bool log_prompts) {
  const std::string log_path = TempPath(log_prompts ? "kvroute_prompts_on" : "kvroute_prompts_off");
  std::filesystem::remove(log_path);
  SpdlogCapture capture;
  {
    FakeUpstream up(SecretEngine());
    Config c = TestConfig({up.port(), ClosedPort()});
    c.request_log = log_path;
    c.request_log_prompts = log_prompts;
    c.monitor.unhealthy_after = 1;
    auto server = StartServer(c);
    server->CheckBackendsNow();  // gpu1 goes unhealthy: a spdlog line, proving the capture
    const std::string p = kSecretPrompt;
    const std::vector<std::pair<std::string, int>> requests = {
        {R"({"messages":[{"role":"user","content":")" + p + "\"}]}", 200},
        {R"({"stream":true,"messages":[{"role":"user","content":")" + p + "\"}]}", 200},
        {R"({"stream":true,"messages":[{"role":"user","content":")" + p + " break\"}]}", 200},
        {R"({"messages":[{"role":"user","content":")" + p + " echo-error\"}]}", 400},
        {R"({"messages":[{"role":)" + std::string("\"") + p + "\", \"content\": 7}]}", 400},
        {R"({"messages":[{"role":"user","content":")" + p, 400},  // truncated JSON
    };
    for (const auto& [body, status] : requests) {
      auto res = RequestOnce(server->port(), http::verb::post, "/v1/chat/completions", body,
                             {{"X-Session-Id", "s-1"}});
      EXPECT_EQ(res.result_int(), status) << body << " -> " << res.body();
    }
    server->Shutdown();
    server->Wait();
  }
  std::string log = ReadFile(log_path);
  std::filesystem::remove(log_path);
  return {log, capture.text()};
}

TEST(HostileTest, PromptsAndCompletionsNeverReachTheLogsByDefault) {
  const auto [request_log, spdlog_text] = ServeSecrets(/*log_prompts=*/false);
  EXPECT_NE(spdlog_text.find("gpu1 ejected"), std::string::npos)
      << "the spdlog capture saw nothing: " << spdlog_text;
  EXPECT_EQ(std::count(request_log.begin(), request_log.end(), '\n'), 6) << request_log;
  for (const char* secret : {kSecretPrompt, kSecretCompletion}) {
    EXPECT_EQ(request_log.find(secret), std::string::npos) << secret << " in " << request_log;
    EXPECT_EQ(spdlog_text.find(secret), std::string::npos) << secret << " in " << spdlog_text;
  }
  EXPECT_EQ(request_log.find("\"prompt\":"), std::string::npos);
}

TEST(HostileTest, RequestLogPromptsPutsThePromptInTheRequestLogOnly) {
  const auto [request_log, spdlog_text] = ServeSecrets(/*log_prompts=*/true);
  std::istringstream lines(request_log);
  std::string first;
  ASSERT_TRUE(std::getline(lines, first));
  EXPECT_NE(first.find(std::string("\"prompt\":\"<|user|>") + kSecretPrompt + "\\n\""),
            std::string::npos)
      << first;
  EXPECT_EQ(request_log.find(kSecretCompletion), std::string::npos) << request_log;
  EXPECT_EQ(spdlog_text.find(kSecretPrompt), std::string::npos) << spdlog_text;
  EXPECT_EQ(spdlog_text.find(kSecretCompletion), std::string::npos) << spdlog_text;
}

}  // namespace
}  // namespace kvroute::proxy
