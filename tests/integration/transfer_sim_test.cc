// v2 offload and pd_sep end to end through each connector against the
// simulated fleet, and every failure path of a handoff.
#include <gtest/gtest.h>

#include <future>

#include "tests/integration/harness.h"
#include "tests/prometheus_sample.h"

namespace kvroute::testing {
namespace {

class OffloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadTest, HeavyRequestIsOffloadedThenTheSessionStaysWarmOnB) {
  // offload_gate threshold: every HEAVY request is offloaded, the case under test.
  FleetHarness h(4, "v2", [&](proxy::Config& c) {
    c.transfer.connector = GetParam();
    c.router.offload_gate = "threshold";
    c.router.offload_cost_known = true;  // the router predicts the gate's plans
  });
  json::array messages;
  messages.push_back(Msg("user", Text(120000, 21)));  // ~30k tokens, cold
  auto res = h.Chat(messages, true, "s-1", 16);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res["X-Kvroute-Class"], "HEAVY");
  const std::string label(res["X-Kvroute-Backend"]);
  const size_t arrow = label.find("->");
  ASSERT_NE(arrow, std::string::npos) << label;
  const std::string a = label.substr(0, arrow), b = label.substr(arrow + 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(res.body().rfind("data: [DONE]\n\n"), res.body().size() - 14) << res.body();
  EXPECT_EQ(res.body().find("\"error\""), std::string::npos);
  const Usage u = UsageOf(res.body());
  ASSERT_GT(u.prompt_tokens, 20000);
  EXPECT_GE(u.cached_tokens, u.prompt_tokens - 16) << "B must report the pulled KV as cached";

  messages.push_back(Msg("assistant", "done"));
  messages.push_back(Msg("user", Text(2000, 22)));
  auto next = h.Chat(messages, true, "s-1", 16);
  ASSERT_EQ(next.result_int(), 200);
  EXPECT_EQ(next["X-Kvroute-Class"], "WARM");
  EXPECT_EQ(next["X-Kvroute-Backend"], b);

  const auto log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].at("prefill_backend").as_string(), a);
  EXPECT_EQ(log[0].at("decode_backend").as_string(), b);
  EXPECT_TRUE(log[0].at("t_prefill_done").is_double());
  EXPECT_GE(log[0].at("transfer_s").to_number<double>(), 0);
  EXPECT_GT(log[0].at("predicted_ttft_s").to_number<double>(), 0);
  EXPECT_GT(log[0].at("predicted_transfer_s").to_number<double>(), 0);
  const std::string text = h.server().registry().Render();
  // The handoff's measured transfer taught the pair's factor.
  EXPECT_NE(text.find("kvroute_transfer_time_factor{prefill=\"" + a + "\",decode=\"" + b + "\"}"),
            std::string::npos)
      << text;
  EXPECT_EQ(SampleValue(text, "kvroute_offloads_total",
                        {{"connector", GetParam()}, {"outcome", "ok"}}),
            1)
      << text;
}

INSTANTIATE_TEST_SUITE_P(Connectors, OffloadTest,
                         ::testing::Values("nixl", "mooncake", "sglang"));

// pd_sep pins A = gpu0 (prefill pool) and B = gpu1 (decode pool), so each
// failure can be aimed at one leg.
void PdSep(proxy::Config& c, const std::string& connector) {
  c.router.mode = "pd_sep";
  c.transfer.connector = connector;
  c.backends[0].spec.role = router::BackendRole::kPrefill;
  c.backends[1].spec.role = router::BackendRole::kDecode;
}

double Counter(proxy::Server& s, const std::string& series) {
  const std::string text = s.registry().Render();
  const size_t p = text.find(series + " ");
  if (p == std::string::npos) return 0;
  return std::stod(text.substr(p + series.size() + 1));
}

class HandoffFailureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HandoffFailureTest, PrefillFailureIsServedColocatedOnB) {
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) { PdSep(c, GetParam()); });
  sim::Faults f;
  f.error_rate = 1.0;  // A answers 500
  h.fleet().SetFaults(0, f);
  json::array m;
  m.push_back(Msg("user", Text(4000, 31)));
  auto res = h.Chat(m, true);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu1");
  EXPECT_NE(res.body().find("data: [DONE]"), std::string::npos);
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"" + GetParam() +
                                    "\",outcome=\"prefill_failed\"}"),
            1);
}

TEST_P(HandoffFailureTest, DecodeFailureBeforeFirstByteIsRetriedOnA) {
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) {
    PdSep(c, GetParam());
    c.upstream.connect_timeout = absl::Seconds(2);
  });
  sim::Faults f;
  f.error_rate = 1.0;  // B answers 500 before any byte reaches the client
  h.fleet().SetFaults(1, f);
  json::array m;
  m.push_back(Msg("user", Text(4000, 32)));
  auto res = h.Chat(m, false);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu0");
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"" + GetParam() +
                                    "\",outcome=\"decode_failed\"}"),
            1);
  EXPECT_EQ(Counter(h.server(), "kvroute_retries_total{backend=\"gpu0\",reason=\"decode_failed\"}"),
            1);
}

TEST_P(HandoffFailureTest, DecodeDyingMidStreamEndsWithErrorEvent) {
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) { PdSep(c, GetParam()); });
  sim::Faults f;
  f.die_after_events = 2;
  h.fleet().SetFaults(1, f);
  json::array m;
  m.push_back(Msg("user", Text(4000, 33)));
  auto res = h.Chat(m, true, "", 32);
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("data: {\"error\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("data: [DONE]\n\n"), std::string::npos);
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"" + GetParam() +
                                    "\",outcome=\"stream_error\"}"),
            1);
}

TEST_P(HandoffFailureTest, OverTheOffloadBoundIsServedColocated) {
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) {
    PdSep(c, GetParam());
    c.transfer.max_offload_inflight = 0;
  });
  json::array m;
  m.push_back(Msg("user", Text(4000, 34)));
  auto res = h.Chat(m, false);
  ASSERT_EQ(res.result_int(), 200);
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu1");
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"" + GetParam() +
                                    "\",outcome=\"over_bound\"}"),
            1);
}

INSTANTIATE_TEST_SUITE_P(Connectors, HandoffFailureTest,
                         ::testing::Values("nixl", "mooncake", "sglang"));

TEST(HandoffTest, PrefillTimeoutIsServedColocatedOnB) {
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) {
    PdSep(c, "nixl");
    c.upstream.first_token_timeout = absl::Milliseconds(300);  // the prefill leg's answer
  });
  sim::Faults f;
  f.hang = true;  // A reads the prefill leg and never answers
  h.fleet().SetFaults(0, f);
  json::array m;
  m.push_back(Msg("user", Text(4000, 36)));
  auto res = h.Chat(m, true);
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res["X-Kvroute-Backend"], "gpu1");
  EXPECT_NE(res.body().find("data: [DONE]"), std::string::npos);
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"nixl\",outcome=\"prefill_failed\"}"),
            1);
  EXPECT_EQ(Counter(h.server(), "kvroute_upstream_errors_total{backend=\"gpu0\",kind=\"timeout\"}"),
            1);
}

TEST(HandoffTest, ClientDisconnectDuringPrefillCancelsBothLegs) {
  // A is a fake engine that never finishes its prefill and reports when
  // kvroute hangs up on it; B is a simulated instance.
  std::promise<void> got_prefill, prefill_closed;
  FakeUpstream a([&](const auto& req, auto& s) {
    if (req.method() == http::verb::get) {
      http::response<http::string_body> res{http::status::ok, 11};
      res.prepare_payload();
      http::write(s, res);
      return true;
    }
    got_prefill.set_value();
    char b[16];
    beast::error_code ec;
    s.read_some(net::buffer(b), ec);
    if (ec) prefill_closed.set_value();
    return false;
  });
  FleetHarness h(2, "pd_sep", [&](proxy::Config& c) {
    PdSep(c, "nixl");
    c.backends[0].spec.port = a.port();
  });
  {
    net::io_context ioc;
    auto s = Connect(ioc, h.server().port());
    json::array m;
    m.push_back(Msg("user", Text(4000, 35)));
    const std::string body = ChatBody(h.model(), m, true);
    const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    net::write(s, net::buffer(req));
    got_prefill.get_future().wait();
    s.close();
  }
  auto closed = prefill_closed.get_future();
  ASSERT_EQ(closed.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "the prefill leg was not cancelled";
  h.StopAndReadLog();
  EXPECT_EQ(Counter(h.server(), "kvroute_offloads_total{connector=\"nixl\",outcome=\"client_gone\"}"),
            1);
}

}  // namespace
}  // namespace kvroute::testing
