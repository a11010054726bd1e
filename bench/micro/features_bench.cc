// Feature extraction micro-benchmarks (Google Benchmark): the time kvroute
// spends turning a request body into router features (validating the JSON,
// finding the fields, decoding the prompt), before any hashing.
//
// BM_ExtractFeatures/<tokens>: a /v1/completions body whose prompt is
// `tokens` * 4 bytes of words with a JSON-escaped newline every 60 words,
// the shape of bench/perf's fixtures (gen_fixtures.py).
// BM_ExtractFeaturesChat/<tokens>: the same text as one chat message.
// BM_ExtractFeaturesChatTools/<tokens>: that chat body followed by a coding
// agent's tool definitions (~40 KB of JSON schema, after the messages as SDKs
// send them): the tools value's own parse and its move to the front.
// BM_ExtractFeaturesMessages/<tokens>: the same text as an Anthropic Messages
// body with the same tools (the DOM path).
//
//   build/bench/micro/features_bench --benchmark_repetitions=3
//     --benchmark_report_aggregates_only=true   (one command line)
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

#include "benchmark/benchmark.h"
#include "proxy/features.h"

namespace kvroute::proxy {
namespace {

constexpr std::string_view kWords[] = {
    "the",    "of",    "and",   "to",      "in",      "is",     "that",  "for",   "it",
    "as",     "with",  "was",   "on",      "be",      "at",     "by",    "this",  "had",
    "not",    "are",   "but",   "from",    "or",      "have",   "an",    "they",  "which",
    "one",    "you",   "were",  "all",     "we",      "when",   "your",  "can",   "said",
    "there",  "use",   "each",  "she",     "do",      "how",    "their", "if",    "will",
    "up",     "other", "about", "out",     "many",    "then",   "them",  "these", "so",
    "kernel", "tensor", "cache", "prefill", "decode", "token",  "routing", "latency", "batch"};

// The prompt as JSON string contents: exactly `bytes` decoded bytes, a word
// and a space at a time, every 60th separator a newline written as "\n".
std::string EscapedPrompt(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  size_t decoded = 0;
  for (int n = 1; decoded < bytes; ++n) {
    std::string_view w = kWords[rng() % std::size(kWords)];
    if (w.size() > bytes - decoded) w = w.substr(0, bytes - decoded);
    out.append(w);
    decoded += w.size();
    if (decoded == bytes) break;
    out.append(n % 60 == 0 ? "\\n" : " ");
    ++decoded;
  }
  return out;
}

void Run(benchmark::State& state, Endpoint endpoint, const std::string& body) {
  for (auto _ : state) {
    absl::StatusOr<router::RequestFeatures> f = ExtractFeatures(endpoint, body, "");
    if (!f.ok()) std::abort();
    benchmark::DoNotOptimize(f->prompt_bytes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

void BM_ExtractFeatures(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  const std::string body =
      "{\"model\": \"Qwen/Qwen3-Coder-30B-A3B-Instruct\", \"prompt\": \"" +
      EscapedPrompt(tokens * 4, tokens) + "\", \"max_tokens\": 16, \"temperature\": 0}";
  Run(state, Endpoint::kCompletions, body);
}
BENCHMARK(BM_ExtractFeatures)->Arg(1024)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);

void BM_ExtractFeaturesChat(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  const std::string body =
      "{\"model\": \"Qwen/Qwen3-Coder-30B-A3B-Instruct\", \"stream\": true, \"max_tokens\": 256, "
      "\"messages\": [{\"role\": \"user\", \"content\": \"" +
      EscapedPrompt(tokens * 4, tokens) + "\"}]}";
  Run(state, Endpoint::kChat, body);
}
BENCHMARK(BM_ExtractFeaturesChat)->Arg(1024)->Arg(131072)->Unit(benchmark::kMicrosecond);

// `n` tool definitions with a description and a few typed parameters each.
std::string ToolsJson(int n, bool anthropic) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) {
    const std::string name = "tool_" + std::to_string(i);
    const std::string params =
        "{\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\", "
        "\"description\": \"" + EscapedPrompt(200, i) + "\"}, \"line\": {\"type\": "
        "\"integer\"}, \"recursive\": {\"type\": \"boolean\"}}, \"required\": [\"path\"]}";
    const std::string description = EscapedPrompt(400, 1000 + i);
    if (i > 0) out += ", ";
    out += anthropic ? "{\"name\": \"" + name + "\", \"description\": \"" + description +
                           "\", \"input_schema\": " + params + "}"
                     : "{\"type\": \"function\", \"function\": {\"name\": \"" + name +
                           "\", \"description\": \"" + description + "\", \"parameters\": " +
                           params + "}}";
  }
  return out + "]";
}

void BM_ExtractFeaturesChatTools(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  const std::string body =
      "{\"model\": \"Qwen/Qwen3-Coder-30B-A3B-Instruct\", \"stream\": true, \"max_tokens\": 256, "
      "\"messages\": [{\"role\": \"user\", \"content\": \"" +
      EscapedPrompt(tokens * 4, tokens) + "\"}], \"tools\": " + ToolsJson(48, false) + "}";
  Run(state, Endpoint::kChat, body);
}
BENCHMARK(BM_ExtractFeaturesChatTools)->Arg(1024)->Arg(131072)->Unit(benchmark::kMicrosecond);

void BM_ExtractFeaturesMessages(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  const std::string body =
      "{\"model\": \"claude\", \"stream\": true, \"max_tokens\": 256, \"system\": "
      "\"You are a coding agent.\", \"messages\": [{\"role\": \"user\", \"content\": "
      "[{\"type\": \"text\", \"text\": \"" +
      EscapedPrompt(tokens * 4, tokens) + "\"}]}], \"tools\": " + ToolsJson(48, true) + "}";
  Run(state, Endpoint::kMessages, body);
}
BENCHMARK(BM_ExtractFeaturesMessages)->Arg(1024)->Arg(131072)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvroute::proxy

BENCHMARK_MAIN();
