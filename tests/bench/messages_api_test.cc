// kvroute-bench's agentic workload through the Anthropic Messages API (--api messages) against
// an in-process simulated vLLM (port 0, time scale 0): the body a coding agent sends, the SSE
// events read back, the conversation growing turn by turn.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/runner.h"
#include "sim/fleet.h"

namespace kvroute::bench {
namespace {

namespace json = boost::json;

TEST(MessagesBodyTest, CodingAgentShape) {
  const std::string body = BuildMessagesBody(
      "m", {{"system", "rules"}, {"user", "task"}, {"assistant", "ok"}, {"user", "tool out"}}, 16,
      "job-7");
  const json::object o = json::parse(body).as_object();
  EXPECT_EQ(o.at("model"), "m");
  EXPECT_EQ(o.at("max_tokens"), 16);
  EXPECT_EQ(o.at("stream"), true);
  EXPECT_EQ(o.at("system").at(0).at("text"), "rules");
  EXPECT_EQ(o.at("messages").as_array().size(), 3u);
  EXPECT_EQ(o.at("messages").at(0).at("role"), "user");
  EXPECT_EQ(o.at("tools").as_array().size(), 3u);
  EXPECT_EQ(o.at("tools").at(0).at("name"), "bash");
  EXPECT_EQ(o.at("metadata").at("user_id"), "job-7");
  EXPECT_FALSE(o.contains("min_tokens"));
  EXPECT_TRUE(ParseChatApi("messages").ok());
  EXPECT_FALSE(ParseChatApi("responses").ok());
}

TEST(MessagesRunnerTest, AgenticJobsThroughMessagesAgainstTheSimulator) {
  sim::FleetOptions fo;
  fo.time_scale = 0;
  fo.profile = sim::DefaultProfile();
  fo.profile.model_name = "kvroute/tiny-test";
  fo.profile.mean_output_tokens = 8;
  sim::Fleet fleet(fo);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
  ASSERT_TRUE(ports.ok()) << ports.status();

  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic = {.jobs_per_second = 50,
               .duration_s = 0.1,
               .turns = 3,
               .tool_tokens = {700, 300},
               .system_tokens = 400,
               .task_tokens = 50,
               .tool_time_s = 0.001,
               .completion_tokens = 12,
               .max_jobs = 2,
               .seed = 5};
  const size_t planned = PlanAgenticJobs(w.agentic).size();
  ASSERT_GT(planned, 0u);
  ASSERT_TRUE(PrepareWorkload(w).ok());
  RunOptions o;
  o.name = "messages";
  o.api = ChatApi::kMessages;
  o.target = {"127.0.0.1", (*ports)[0], ""};
  o.instances = {{"gpu0", {"127.0.0.1", (*ports)[0], ""}}};
  o.sample_interval_s = 0.01;
  o.request_timeout_s = 30;
  o.drain_timeout_s = 60;
  o.progress = [](std::string_view) {};
  absl::StatusOr<RunResult> r = RunWorkload(o, w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->requests.size(), planned * 3);
  for (const JobRecord& j : r->jobs) EXPECT_TRUE(j.ok);
  for (const RequestRecord& q : r->requests) {
    ASSERT_TRUE(q.ok()) << q.error;
    EXPECT_GT(q.prompt_tokens, 400);
    EXPECT_GE(q.completion_tokens, 1);
    EXPECT_LE(q.completion_tokens, 12);
    EXPECT_EQ(q.cached_tokens, -1);  // the Messages API reports no cache counts
    EXPECT_GT(q.ttft, 0);
  }
  for (const RequestRecord& q : r->requests) {
    if (q.turn > 1) {
      // The conversation grows: each turn resends the previous one (prompt + completion).
      EXPECT_GT(q.prompt_tokens, q.bound_cached_tokens);
      EXPECT_GT(q.bound_cached_tokens, 400);
    }
  }
}

}  // namespace
}  // namespace kvroute::bench
