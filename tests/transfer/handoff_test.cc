// The handoff's sequencing and every row of its failure table, driven by a
// scripted leg runner: no sockets, no clock, no sleeps. Legs that "wait" end
// only when the handoff cancels them; the io_context is polled, never run
// until idle, so a missing cancellation fails the test instead of hanging it.
#include "transfer/handoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"

namespace kvroute::transfer {
namespace {

namespace net = boost::asio;

constexpr char kClientBody[] = R"({"model":"m","prompt":"hello","stream":true,"max_tokens":8})";

// How a scripted leg ends.
struct ScriptedLeg {
  LegReport report;              // what it returns when it ends by itself
  bool until_cancelled = false;  // it ends only when cancelled, with nothing set
};

LegReport Ok(double t) {
  LegReport r;
  r.completed = true;
  r.status = 200;
  r.headers_sent = true;
  r.t_first_byte = t;
  r.t_done = t;
  return r;
}

LegReport PrefillOk(double t_done, std::string body) {
  LegReport r = Ok(t_done);
  r.headers_sent = false;
  r.t_first_byte = -1;
  r.body = std::move(body);
  return r;
}

LegReport UpstreamFailed() {
  LegReport r;
  r.upstream_failed = true;
  return r;
}

class FakeLegs : public LegRunner {
 public:
  explicit FakeLegs(net::io_context& ioc)
      : prefill_timer_(ioc, net::steady_timer::time_point::max()),
        decode_timer_(ioc, net::steady_timer::time_point::max()) {}

  ScriptedLeg prefill;
  ScriptedLeg decode;
  std::optional<std::string> query_answer;
  double now = 100.0;

  // What the handoff did, in order.
  std::vector<std::string> calls;
  std::string prefill_body;
  std::string decode_body;
  bool prefill_watched_client = false;
  bool decode_kv_transferred = false;

  double Now() override { return now; }

  net::awaitable<std::optional<std::string>> QueryBootstrap(const std::string& host,
                                                            uint16_t port) override {
    calls.push_back(absl::StrCat("query ", host, ":", port));
    co_return query_answer;
  }

  net::awaitable<LegReport> RunPrefill(std::string body, bool watch_client) override {
    calls.push_back("prefill");
    prefill_body = std::move(body);
    prefill_watched_client = watch_client;
    LegReport r = co_await Run(prefill, prefill_timer_, prefill_cancelled_);
    calls.push_back("prefill done");
    co_return r;
  }

  net::awaitable<LegReport> RunDecode(std::string body, bool kv_transferred) override {
    calls.push_back("decode");
    decode_body = std::move(body);
    decode_kv_transferred = kv_transferred;
    LegReport r = co_await Run(decode, decode_timer_, decode_cancelled_);
    calls.push_back("decode done");
    co_return r;
  }

  void CancelPrefill() override {
    calls.push_back("cancel prefill");
    prefill_cancelled_ = true;
    prefill_timer_.cancel();
  }
  void CancelDecode() override {
    calls.push_back("cancel decode");
    decode_cancelled_ = true;
    decode_timer_.cancel();
  }

 private:
  // A leg cancelled before it starts never sends anything, as a relay whose
  // leg state is already cancelled.
  static net::awaitable<LegReport> Run(const ScriptedLeg& leg, net::steady_timer& timer,
                                       const bool& cancelled) {
    if (cancelled) co_return LegReport{};
    if (!leg.until_cancelled) co_return leg.report;
    while (!cancelled) co_await timer.async_wait(net::as_tuple(net::use_awaitable));
    co_return LegReport{};
  }

  net::steady_timer prefill_timer_;
  net::steady_timer decode_timer_;
  bool prefill_cancelled_ = false;
  bool decode_cancelled_ = false;
};

HandoffRequest Request(std::string_view client_body = kClientBody) {
  HandoffRequest r;
  r.request_id = "req-1";
  r.client_body = client_body;
  r.prefill_backend = 0;
  r.prefill_name = "gpu0";
  r.prefill_host = "10.0.0.1";
  r.prefill_port = 8100;
  return r;
}

std::unique_ptr<Handoff> MakeHandoff(std::string_view connector, int64_t bound = 8) {
  auto c = MakeConnector(connector);
  EXPECT_TRUE(c.ok());
  auto h = std::make_unique<Handoff>(*std::move(c), bound);
  h->bootstrap().SetPorts({}, 8998);
  return h;
}

// Polls until `a` finishes; nullopt when it is stuck (nothing left to run).
template <typename T>
std::optional<T> Finish(net::io_context& ioc, net::awaitable<T> a) {
  std::optional<T> out;
  net::co_spawn(ioc, std::move(a), [&out](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out = std::move(v);
  });
  while (!out && ioc.poll() > 0) {
  }
  ioc.restart();
  return out;
}

class HandoffTest : public ::testing::Test {
 protected:
  std::optional<HandoffResult> Run(Handoff& h, const HandoffRequest& req = Request()) {
    return Finish(ioc_, h.Run(req, legs_, gen_));
  }

  net::io_context ioc_;
  FakeLegs legs_{ioc_};
  std::mt19937_64 gen_{42};
};

using Fallback = HandoffResult::Fallback;
using Calls = std::vector<std::string>;

// Where `call` first is in `calls`; calls.size() when absent.
size_t Index(const Calls& calls, std::string_view call) {
  return static_cast<size_t>(std::find(calls.begin(), calls.end(), call) - calls.begin());
}

TEST_F(HandoffTest, SequentialHandsAsKvParamsToTheDecodeLeg) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report = PrefillOk(101.0, R"({"kv_transfer_params":{"remote_block_ids":[7]}})");
  legs_.decode.report = Ok(101.5);
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kNone);
  EXPECT_EQ(r->outcome, "ok");
  EXPECT_TRUE(r->decode_ran);
  EXPECT_TRUE(r->kv_transferred);
  EXPECT_FALSE(r->no_kv_params);
  EXPECT_EQ(r->attempts, 2);
  EXPECT_DOUBLE_EQ(r->prefill_seconds, 1.0);
  EXPECT_DOUBLE_EQ(r->t_prefill_done, 101.0);
  EXPECT_DOUBLE_EQ(r->transfer_s, 0.5);
  EXPECT_EQ(legs_.calls, (Calls{"prefill", "prefill done", "decode", "decode done"}));
  EXPECT_TRUE(legs_.prefill_watched_client);
  EXPECT_TRUE(legs_.decode_kv_transferred);
  EXPECT_NE(legs_.prefill_body.find(R"("do_remote_decode":true)"), std::string::npos);
  EXPECT_NE(legs_.decode_body.find(R"("remote_block_ids":[7])"), std::string::npos);
  EXPECT_EQ(h->bound().inflight(), 0);
}

TEST_F(HandoffTest, SequentialWithoutKvParamsLetsBPrefill) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report = PrefillOk(101.0, R"({"choices":[]})");
  legs_.decode.report = Ok(102.0);
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, "ok");
  EXPECT_TRUE(r->no_kv_params);
  EXPECT_FALSE(r->kv_transferred);
  EXPECT_FALSE(legs_.decode_kv_transferred);
}

// Row: prefill leg fails -> co-located on B.
TEST_F(HandoffTest, SequentialPrefillFailedFallsBackOnDecode) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report = PrefillOk(101.0, "");
  legs_.prefill.report.status = 500;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnDecode);
  EXPECT_EQ(r->outcome, "prefill_failed");
  EXPECT_EQ(r->attempts, 1);
  EXPECT_FALSE(r->kv_transferred);
  EXPECT_EQ(legs_.calls, (Calls{"prefill", "prefill done"}));
  EXPECT_EQ(h->bound().inflight(), 0);
}

// Row: prefill leg fails -> the waiting decode leg is cut short, co-located on B.
TEST_F(HandoffTest, ConcurrentPrefillFailedCancelsDecodeAndFallsBackOnDecode) {
  auto h = MakeHandoff("sglang");
  legs_.prefill.report = UpstreamFailed();
  legs_.decode.until_cancelled = true;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnDecode);
  EXPECT_EQ(r->outcome, "prefill_failed");
  EXPECT_EQ(r->attempts, 2);
  // The decode leg is cancelled once the prefill leg has failed, and ends.
  EXPECT_LT(Index(legs_.calls, "prefill done"), Index(legs_.calls, "cancel decode"));
  EXPECT_LT(Index(legs_.calls, "cancel decode"), Index(legs_.calls, "decode done"));
  EXPECT_FALSE(legs_.prefill_watched_client);
}

// Row: decode leg fails before its first byte -> co-located on A.
TEST_F(HandoffTest, SequentialDecodeFailedFallsBackOnPrefill) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report = PrefillOk(101.0, R"({"kv_transfer_params":{}})");
  legs_.decode.report = UpstreamFailed();
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnPrefill);
  EXPECT_EQ(r->outcome, "decode_failed");
  EXPECT_TRUE(r->kv_transferred);  // A holds the prompt's KV
  EXPECT_EQ(r->attempts, 2);
  EXPECT_DOUBLE_EQ(r->prefill_seconds, 1.0);
  EXPECT_DOUBLE_EQ(r->t_prefill_done, -1);
}

TEST_F(HandoffTest, ConcurrentDecodeFailedCancelsPrefillAndFallsBackOnPrefill) {
  auto h = MakeHandoff("sglang");
  legs_.prefill.until_cancelled = true;
  legs_.decode.report = UpstreamFailed();
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnPrefill);
  EXPECT_EQ(r->outcome, "decode_failed");
  EXPECT_LT(Index(legs_.calls, "cancel prefill"), legs_.calls.size());
  EXPECT_EQ(h->bound().inflight(), 0);
}

// Row: decode leg fails after its first byte -> no fallback (the relay ends
// the client's stream with an error event).
TEST_F(HandoffTest, DecodeBrokenAfterFirstByteIsStreamError) {
  for (const char* name : {"nixl", "mooncake", "sglang"}) {
    SCOPED_TRACE(name);
    auto h = MakeHandoff(name);
    legs_.query_answer = R"({"0":{"engine_id":"engine-A"}})";
    legs_.prefill.report = PrefillOk(101.0, R"({"kv_transfer_params":{}})");
    legs_.decode.report = Ok(102.0);
    legs_.decode.report.completed = false;
    const auto r = Run(*h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->fallback, Fallback::kNone);
    EXPECT_EQ(r->outcome, "stream_error");
    EXPECT_TRUE(r->decode_ran);
  }
}

// Row: the client disconnects -> both legs end, nothing is served.
TEST_F(HandoffTest, ClientGoneDuringSequentialPrefillSkipsDecode) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report.client_gone = true;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kNone);
  EXPECT_EQ(r->outcome, "client_gone");
  EXPECT_FALSE(r->decode_ran);  // the prefill leg's result is the client's
  EXPECT_EQ(r->attempts, 1);
  EXPECT_EQ(legs_.calls, (Calls{"prefill", "prefill done"}));
  EXPECT_EQ(h->bound().inflight(), 0);
}

TEST_F(HandoffTest, ClientGoneDuringConcurrentDecodeCancelsPrefill) {
  auto h = MakeHandoff("sglang");
  legs_.prefill.until_cancelled = true;
  legs_.decode.report.client_gone = true;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kNone);
  EXPECT_EQ(r->outcome, "client_gone");
  EXPECT_TRUE(r->decode_ran);
  EXPECT_DOUBLE_EQ(r->t_prefill_done, -1);
  EXPECT_LT(Index(legs_.calls, "cancel prefill"), legs_.calls.size());
}

TEST_F(HandoffTest, ClientGoneAfterDecodeHeaderIsCountedAsClientGone) {
  auto h = MakeHandoff("nixl");
  legs_.prefill.report = PrefillOk(101.0, R"({"kv_transfer_params":{}})");
  legs_.decode.report = Ok(101.2);
  legs_.decode.report.completed = false;
  legs_.decode.report.client_gone = true;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, "client_gone");
  EXPECT_EQ(r->fallback, Fallback::kNone);
}

// Row: max_offload_inflight reached -> co-located on B, no leg sent.
TEST_F(HandoffTest, OverBoundFallsBackOnDecodeWithoutLegs) {
  auto h = MakeHandoff("nixl", /*bound=*/0);
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnDecode);
  EXPECT_EQ(r->outcome, "over_bound");
  EXPECT_EQ(r->attempts, 0);
  EXPECT_TRUE(legs_.calls.empty());
}

TEST_F(HandoffTest, SlotIsHeldWhileLegsRun) {
  auto h = MakeHandoff("sglang", /*bound=*/1);
  // The first handoff's legs wait; a second one meanwhile is over the bound.
  legs_.prefill.until_cancelled = true;
  legs_.decode.until_cancelled = true;
  std::optional<HandoffResult> first;
  const HandoffRequest req = Request();
  net::co_spawn(ioc_, h->Run(req, legs_, gen_),
                [&first](std::exception_ptr, HandoffResult r) { first = r; });
  while (ioc_.poll() > 0) {
  }
  ioc_.restart();
  ASSERT_FALSE(first);
  EXPECT_EQ(h->bound().inflight(), 1);
  FakeLegs other(ioc_);
  const auto second = Finish(ioc_, h->Run(req, other, gen_));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->outcome, "over_bound");
  legs_.CancelDecode();  // the first handoff's decode leg ends
  while (!first && ioc_.poll() > 0) {
  }
  ASSERT_TRUE(first);
  EXPECT_EQ(h->bound().inflight(), 0);
}

// Row: Mooncake's bootstrap /query fails -> co-located on B, no leg sent.
TEST_F(HandoffTest, MooncakeBootstrapFailedFallsBackOnDecode) {
  for (std::optional<std::string> answer :
       {std::optional<std::string>(), std::optional<std::string>("not json"),
        std::optional<std::string>(R"({"0":{"engine_id":""}})")}) {
    auto h = MakeHandoff("mooncake");
    legs_.calls.clear();
    legs_.query_answer = answer;
    const auto r = Run(*h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->fallback, Fallback::kOnDecode);
    EXPECT_EQ(r->outcome, "bootstrap_failed");
    EXPECT_EQ(legs_.calls, (Calls{"query 10.0.0.1:8998"}));
    EXPECT_FALSE(h->bootstrap().EngineId(0).has_value());
  }
}

TEST_F(HandoffTest, MooncakeEngineIdIsCachedUntilAPrefillFails) {
  auto h = MakeHandoff("mooncake");
  h->bootstrap().SetPorts({{"gpu0", 9100}}, 8998);
  legs_.query_answer = R"({"0":{"engine_id":"engine-A"}})";
  legs_.prefill.report = PrefillOk(101.0, "{}");
  legs_.decode.report = Ok(101.0);
  ASSERT_TRUE(Run(*h));
  EXPECT_EQ(legs_.calls[0], "query 10.0.0.1:9100");  // A's own bootstrap port
  EXPECT_NE(legs_.decode_body.find(R"("remote_engine_id":"engine-A")"), std::string::npos);
  EXPECT_NE(legs_.decode_body.find(R"("remote_bootstrap_addr":"http://10.0.0.1:9100")"),
            std::string::npos);
  EXPECT_EQ(h->bootstrap().EngineId(0), "engine-A");

  legs_.calls.clear();
  ASSERT_TRUE(Run(*h));
  for (const std::string& call : legs_.calls) EXPECT_NE(call.rfind("query", 0), 0u) << call;

  // A failed prefill may mean A restarted with another engine id: forget it.
  legs_.calls.clear();
  legs_.prefill.report = UpstreamFailed();
  legs_.decode.until_cancelled = true;
  const auto r = Run(*h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->outcome, "prefill_failed");
  EXPECT_FALSE(h->bootstrap().EngineId(0).has_value());
}

TEST_F(HandoffTest, BadClientBodyFallsBackOnDecode) {
  auto h = MakeHandoff("sglang");
  const auto r = Run(*h, Request("[1,2]"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->fallback, Fallback::kOnDecode);
  EXPECT_EQ(r->outcome, "bad_body");
  EXPECT_TRUE(legs_.calls.empty());
}

TEST_F(HandoffTest, SglangBootstrapRoomComesFromTheInjectedRandomSource) {
  auto h = MakeHandoff("sglang");
  legs_.prefill.report = PrefillOk(101.0, "{}");
  legs_.decode.report = Ok(101.0);
  ASSERT_TRUE(Run(*h));
  std::mt19937_64 same{42};
  const uint64_t room = absl::Uniform<uint64_t>(same) & 0x7fffffffffffffffULL;
  const std::string field = absl::StrCat(R"("bootstrap_room":)", room);
  EXPECT_NE(legs_.prefill_body.find(field), std::string::npos) << legs_.prefill_body;
  EXPECT_NE(legs_.decode_body.find(field), std::string::npos);
  EXPECT_NE(legs_.decode_body.find(R"("bootstrap_port":8998)"), std::string::npos);
}

TEST(InflightBoundTest, SlotsAreBoundedAndReleasedByTheirGuards) {
  InflightBound bound(2);
  InflightBound::Slot a = bound.TryAcquire();
  InflightBound::Slot b = bound.TryAcquire();
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
  EXPECT_FALSE(bound.TryAcquire());
  EXPECT_EQ(bound.inflight(), 2);
  InflightBound::Slot moved = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from slot is empty
  EXPECT_EQ(bound.inflight(), 2);
  moved.Release();
  EXPECT_EQ(bound.inflight(), 1);
  {
    InflightBound::Slot c = bound.TryAcquire();
    EXPECT_TRUE(c);
  }
  EXPECT_EQ(bound.inflight(), 1);
  b = InflightBound::Slot();
  EXPECT_EQ(bound.inflight(), 0);
}

TEST(InflightBoundTest, ConcurrentTakersNeverExceedTheLimit) {
  InflightBound bound(3);
  std::atomic<int64_t> held{0};
  std::atomic<int64_t> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        InflightBound::Slot s = bound.TryAcquire();
        if (!s) continue;
        const int64_t now = held.fetch_add(1) + 1;
        int64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        held.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_EQ(bound.inflight(), 0);
}

}  // namespace
}  // namespace kvroute::transfer
