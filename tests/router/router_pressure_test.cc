// The router's cache estimate under KV memory pressure, against a scripted fleet: one
// sim::Engine per backend (the simulator's paged KV pool with vLLM's prefix caching and
// least-recently-freed eviction) on a virtual clock. Agent sessions whose working set is about
// twice the fleet's KV run their turns through Router::Route -> Engine::Submit -> Step ->
// OnFirstToken / OnComplete with the engine's cached_tokens, exactly as the proxy feeds it, and
// the test compares every estimate with the engine's truth.
//
// Deterministic: the clock is the engines' virtual time, text and sizes come from seeded
// generators, and nothing sleeps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "router/router.h"
#include "sim/engine.h"
#include "sim/tokenizer.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// `tokens` tokens of " abc" words (4 bytes each), fixed by `seed`.
std::string Words(uint64_t seed, int tokens) {
  std::mt19937_64 rng(seed);
  std::string s;
  s.reserve(static_cast<size_t>(tokens) * 4);
  for (int i = 0; i < tokens; ++i) {
    s += ' ';
    for (int j = 0; j < 3; ++j) s += static_cast<char>('a' + rng() % 26);
  }
  return s;
}

struct Script {
  int instances = 4;
  int64_t blocks_per_instance = 400;  // 16-token blocks: 6,400 tokens each
  int sessions = 16;
  int turns = 8;
  int system_tokens = 512;
  int context_min = 1000, context_max = 2000;
  int tool_min = 150, tool_max = 400;
  int answer_tokens = 32;
  double tool_time_s = 1.0;
  double session_gap_s = 0.2;
  // Declared capacity as a multiple of the engines' real pool (1: the truth).
  double declared_capacity_factor = 1.0;
  // Placement by memory (the resident window and the two memory weights);
  // off, `baseline` places by cache hit and load alone.
  bool memory_placement = true;
  uint64_t seed = 5;
};

struct Result {
  std::vector<double> signed_errors;  // (estimate - actual) / prompt tokens
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t evictions = 0;
  int64_t peak_working_set_tokens = 0;
};

Result RunScript(const Script& sc) {
  sim::EngineConfig config;
  config.block_size = 16;
  config.num_gpu_blocks = sc.blocks_per_instance;
  config.max_num_batched_tokens = 2048;
  config.max_num_seqs = 64;
  std::vector<std::unique_ptr<sim::Engine>> engines;
  std::vector<BackendSpec> specs;
  for (int i = 0; i < sc.instances; ++i) {
    engines.push_back(std::make_unique<sim::Engine>(config));
    specs.push_back({.name = "gpu" + std::to_string(i),
                     .host = "127.0.0.1",
                     .port = static_cast<uint16_t>(8100 + i),
                     .capacity_tokens = static_cast<int64_t>(
                         static_cast<double>(sc.blocks_per_instance * config.block_size) *
                         sc.declared_capacity_factor)});
  }
  Options options;
  options.mode = "baseline";
  if (!sc.memory_placement) {
    options.session_resident_window = absl::ZeroDuration();
    options.baseline.admission_weight = 0;
    options.baseline.eviction_weight = 0;
  }
  auto created = Router::Create(options, specs);
  EXPECT_TRUE(created.ok()) << created.status();
  Router& router = **created;

  struct Session {
    std::string text;
    int turn = 0;  // turns sent
    double next_arrival = -1;
    int64_t context = 0;  // tokens the session holds (for the working set)
  };
  const std::string system = Words(sc.seed, sc.system_tokens);
  std::mt19937_64 rng(sc.seed + 1);
  std::vector<Session> sessions(static_cast<size_t>(sc.sessions));
  for (int s = 0; s < sc.sessions; ++s) {
    const int context =
        sc.context_min +
        static_cast<int>(rng() % static_cast<uint64_t>(sc.context_max - sc.context_min + 1));
    sessions[s].text = system + Words(sc.seed * 1000 + static_cast<uint64_t>(s), context);
    sessions[s].next_arrival = s * sc.session_gap_s;
  }
  struct Running {
    int session = -1;
    uint64_t output_seed = 0;
    RouteTicket ticket;
  };
  std::vector<absl::flat_hash_map<sim::RequestHandle, Running>> running(
      static_cast<size_t>(sc.instances));
  Result result;
  uint64_t output_seed = 1;
  auto at = [](double t) { return kT0 + absl::Seconds(t); };

  for (int guard = 0; guard < 10'000'000; ++guard) {
    double next = std::numeric_limits<double>::infinity();
    for (const Session& s : sessions) {
      if (s.next_arrival >= 0) next = std::min(next, s.next_arrival);
    }
    for (const auto& e : engines) {
      if (e->HasRunnableWork()) next = std::min(next, e->now());
    }
    if (!std::isfinite(next)) break;
    // Arrivals due now go through the router to their engine.
    for (int s = 0; s < sc.sessions; ++s) {
      Session& ss = sessions[s];
      if (ss.next_arrival < 0 || ss.next_arrival > next) continue;
      RequestFeatures f;
      f.model = "m";
      f.session_id = "s" + std::to_string(s);
      f.max_tokens = sc.answer_tokens;
      f.prompt_bytes = ss.text;
      f.chunk_hashes = HashPromptChunks(f.prompt_bytes, options.chunk_bytes);
      absl::StatusOr<RouteTicket> t = router.Route(f, at(next));
      EXPECT_TRUE(t.ok()) << t.status();
      const int b = t->decision.decode_backend;
      sim::Engine& e = *engines[b];
      e.AdvanceTo(next);
      const uint64_t seed = output_seed++;
      const sim::RequestHandle h = e.Submit({.request_id = f.session_id,
                                             .prompt = sim::StandInTokenizer::Encode(ss.text),
                                             .max_tokens = sc.answer_tokens,
                                             .min_tokens = sc.answer_tokens,
                                             .ignore_eos = true,
                                             .output_seed = seed});
      running[b][h] = Running{s, seed, *t};
      ss.next_arrival = -1;
      ++ss.turn;
    }
    // Engines due now run one step each.
    int64_t live = 0;
    for (const Session& s : sessions) live += s.context;
    result.peak_working_set_tokens = std::max(result.peak_working_set_tokens, live);
    for (int b = 0; b < sc.instances; ++b) {
      sim::Engine& e = *engines[b];
      if (!e.HasRunnableWork() || e.now() > next) continue;
      const sim::StepResult step = e.Step();
      for (const sim::TokenEvent& ev : step.tokens) {
        auto it = running[b].find(ev.handle);
        if (it == running[b].end()) continue;
        if (ev.index == 0) router.OnFirstToken(it->second.ticket, at(e.now()));
        if (ev.finish == sim::FinishReason::kNone) continue;
        const sim::RequestInfo* info = e.Info(ev.handle);
        Outcome o;
        o.ok = true;
        o.prompt_tokens = info->prompt_tokens;
        o.cached_tokens = info->cached_tokens;
        o.completion_tokens = info->completion_tokens;
        o.served_by = b;
        o.kv_transferred = false;
        const std::optional<int64_t> err = EstimateError(it->second.ticket.decision, o);
        if (err) {
          result.signed_errors.push_back(static_cast<double>(*err) /
                                         static_cast<double>(info->prompt_tokens));
        }
        ++result.requests;
        result.prompt_tokens += info->prompt_tokens;
        result.cached_tokens += info->cached_tokens;
        router.OnComplete(it->second.ticket, o, at(e.now()));
        Session& ss = sessions[it->second.session];
        if (ss.turn < sc.turns) {
          // The next prompt carries the answer, as the engine generated it, and a tool output.
          ss.context = info->prompt_tokens + info->completion_tokens;
          for (int i = 0; i < info->completion_tokens; ++i) {
            ss.text += sim::StandInTokenizer::GeneratedPiece(it->second.output_seed, i);
          }
          const int tool =
              sc.tool_min +
              static_cast<int>(rng() % static_cast<uint64_t>(sc.tool_max - sc.tool_min + 1));
          ss.text += Words(rng(), tool);
          ss.next_arrival = e.now() + sc.tool_time_s;
        } else {
          ss.context = 0;
        }
        e.Forget(ev.handle);
        running[b].erase(it);
      }
    }
  }
  for (const auto& e : engines) result.evictions += e->blocks().num_evictions();
  return result;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::vector<double> Abs(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

TEST(RouterPressureTest, EstimateHoldsWhileTheEnginesEvict) {
  for (uint64_t seed : {5, 1, 2}) {
    Script sc;
    sc.seed = seed;
    const Result r = RunScript(sc);
    const double fleet_kv = static_cast<double>(sc.instances * sc.blocks_per_instance * 16);
    // The regime: the sessions' working set is well beyond the fleet's KV and the engines
    // evict all the time.
    EXPECT_GT(static_cast<double>(r.peak_working_set_tokens), 1.5 * fleet_kv);
    EXPECT_GT(static_cast<double>(r.evictions * 16), 2.0 * fleet_kv);
    ASSERT_EQ(r.requests, sc.sessions * sc.turns);
    ASSERT_EQ(static_cast<int64_t>(r.signed_errors.size()), r.requests);
    const double median_abs = Median(Abs(r.signed_errors));
    const double mean_signed = Mean(r.signed_errors);
    EXPECT_LE(median_abs, 0.05) << "seed " << seed << ", mean signed " << mean_signed;
    EXPECT_LE(std::abs(mean_signed), 0.05) << "seed " << seed << ", median " << median_abs;
    // Caching still pays: part of the prompts came from the engines' caches.
    EXPECT_GT(static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens), 0.15);
  }
}

TEST(RouterPressureTest, AnEstimatorThatOverratesThePoolIsCaught) {
  // The same sessions, but the router believes every pool is twice its size (as a shadow
  // that ignores what requests in flight occupy does): it promises prefixes the engines
  // evicted, and the signed error says so. Placed by hit and load alone, so that sessions
  // keep outgrowing their instances.
  Script sc;
  sc.declared_capacity_factor = 2.0;
  sc.memory_placement = false;
  const Result r = RunScript(sc);
  EXPECT_GT(Mean(r.signed_errors), 0.10);
  EXPECT_GT(Median(Abs(r.signed_errors)), 0.05);
}

}  // namespace
}  // namespace kvroute::router
