// What usage on every stream costs a streamed request (proxy/stream_usage.h):
//
// BM_PlanStreamUsage/<tokens>/<has_options>: planning the request body's
// change for a chat body of `tokens` x 4 bytes, without stream_options (the
// common case: one search of the body) or with a stream_options that turns
// usage off placed last (the top-level scan and a rewrite of its value).
// BM_RelayStream/<filtered>: a 256-token chat stream in vLLM's shape, one
// event per read, through the ResponseObserver alone (0: what kvroute does
// without the change) or through the StreamUsageFilter and the observer (1).
//
//   build/bench/micro/stream_usage_bench --benchmark_repetitions=3
//     --benchmark_report_aggregates_only=true   (one command line)
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "proxy/response_observer.h"
#include "proxy/stream_usage.h"

namespace kvroute::proxy {
namespace {

std::string ChatBody(size_t tokens, bool with_options) {
  std::string text;
  for (size_t i = 0; text.size() < tokens * 4; ++i) text += (i % 60 == 59) ? "word\\n" : "word ";
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")" + text +
                     R"("}],"stream":true,"max_tokens":256)";
  if (with_options) body += R"(,"stream_options":{"include_usage":false})";
  return body + "}";
}

void BM_PlanStreamUsage(benchmark::State& state) {
  const std::string body = ChatBody(static_cast<size_t>(state.range(0)), state.range(1) != 0);
  for (auto _ : state) {
    StreamUsagePlan plan = PlanStreamUsage(body);
    if (!plan.edits_body()) std::abort();
    benchmark::DoNotOptimize(plan.text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_PlanStreamUsage)
    ->ArgsProduct({{1000, 30000}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

std::vector<std::string> StreamEvents(int tokens) {
  const std::string head =
      R"(data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1700000000,)"
      R"("model":"Qwen/Qwen3-Coder-30B-A3B-Instruct",)";
  std::vector<std::string> out;
  out.push_back(head + R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
                       R"("logprobs":null,"finish_reason":null}]})" + "\n\n");
  for (int i = 0; i < tokens; ++i) {
    out.push_back(head + R"("choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,)"
                         R"("finish_reason":null}]})" + "\n\n");
  }
  out.push_back(head + R"("choices":[],"usage":{"prompt_tokens":30000,"total_tokens":30256,)"
                       R"("completion_tokens":256,"prompt_tokens_details":{"cached_tokens":29984}}})" +
                "\n\n");
  out.push_back("data: [DONE]\n\n");
  return out;
}

void BM_RelayStream(benchmark::State& state) {
  const std::vector<std::string> events = StreamEvents(256);
  const bool filtered = state.range(0) != 0;
  CachedTokensRule rule(AbsentCachedTokens::kZero);
  size_t bytes = 0;
  for (const auto& e : events) bytes += e.size();
  for (auto _ : state) {
    ResponseObserver observer(/*sse=*/true, 1 << 20, 1 << 20, false, ApiDialect::kOpenAi, &rule);
    StreamUsageFilter filter(&observer, 1 << 20);
    size_t out = 0;
    for (const std::string& e : events) {
      if (filtered) {
        for (std::string_view p : filter.Feed(e)) out += p.size();
      } else {
        observer.Feed(e);
        out += e.size();
      }
    }
    if (filtered) filter.Finish();
    observer.Finish();
    if (observer.usage().cached_tokens != 29984) std::abort();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_RelayStream)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvroute::proxy

BENCHMARK_MAIN();
