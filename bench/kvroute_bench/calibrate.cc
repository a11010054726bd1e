#include "bench/kvroute_bench/calibrate.h"

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace kvroute::bench {
namespace net = boost::asio;
namespace json = boost::json;

namespace {

// Columns of the fit, in this order.
enum Column { kFixed, kWeights, kLinear, kAttention, kPerSeq, kKvRead, kColumns };
using Row = std::array<double, kColumns>;

// The chunks a lone prompt of `n` tokens is prefilled in: (context, new tokens).
std::vector<std::pair<int64_t, int64_t>> Chunks(int64_t n, int64_t budget) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t c = 0; c < n; c += budget) chunks.emplace_back(c, std::min(budget, n - c));
  return chunks;
}

Row PrefillRow(const sim::TimingModel& tm, int64_t n, int64_t budget) {
  Row row{};
  for (const auto& [c, k] : Chunks(n, budget)) {
    const double kd = static_cast<double>(k);
    row[kFixed] += 1;
    row[kWeights] += tm.WeightFraction(k);
    row[kLinear] += kd;
    row[kAttention] += kd * (static_cast<double>(c) + kd / 2);
  }
  return row;
}

Row DecodeRow(const sim::TimingModel& tm, int batch, double context) {
  Row row{};
  row[kFixed] = 1;
  row[kWeights] = tm.WeightFraction(batch);
  row[kPerSeq] = batch;
  row[kKvRead] = batch * context;
  return row;
}

double Dot(const Row& row, const Row& x) {
  double s = 0;
  for (int j = 0; j < kColumns; ++j) s += row[j] * x[j];
  return s;
}

// Solves min sum ((row . x - y) / y)^2 over the columns in `fit`; the others keep `x`'s value.
absl::Status SolveRelativeLeastSquares(const std::vector<Row>& rows, const std::vector<double>& ys,
                                       const std::array<bool, kColumns>& fit, Row& x) {
  std::vector<int> cols;
  for (int j = 0; j < kColumns; ++j) {
    if (fit[j]) cols.push_back(j);
  }
  const size_t m = cols.size();
  // Column scales keep the normal equations well conditioned (entries span 1 to 1e10).
  std::vector<double> scale(m, 0);
  for (const Row& r : rows) {
    for (size_t a = 0; a < m; ++a) scale[a] = std::max(scale[a], std::abs(r[cols[a]]));
  }
  for (size_t a = 0; a < m; ++a) {
    if (scale[a] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the probes do not constrain timing column ", cols[a]));
    }
  }
  std::vector<std::vector<double>> ata(m, std::vector<double>(m + 1, 0));
  for (size_t i = 0; i < rows.size(); ++i) {
    const double w = 1 / ys[i];
    double target = ys[i];
    for (int j = 0; j < kColumns; ++j) {
      if (!fit[j]) target -= rows[i][j] * x[j];
    }
    for (size_t a = 0; a < m; ++a) {
      const double va = rows[i][cols[a]] / scale[a] * w;
      for (size_t b = 0; b < m; ++b) ata[a][b] += va * rows[i][cols[b]] / scale[b] * w;
      ata[a][m] += va * target * w;
    }
  }
  // Gaussian elimination with partial pivoting.
  for (size_t p = 0; p < m; ++p) {
    size_t best = p;
    for (size_t r = p + 1; r < m; ++r) {
      if (std::abs(ata[r][p]) > std::abs(ata[best][p])) best = r;
    }
    std::swap(ata[p], ata[best]);
    if (std::abs(ata[p][p]) < 1e-12) {
      return absl::InvalidArgumentError(
          "the probes cannot separate the timing coefficients (singular fit); add prefill "
          "lengths, decode batch sizes or long-context decode probes");
    }
    for (size_t r = 0; r < m; ++r) {
      if (r == p) continue;
      const double f = ata[r][p] / ata[p][p];
      for (size_t c = p; c <= m; ++c) ata[r][c] -= f * ata[p][c];
    }
  }
  for (size_t a = 0; a < m; ++a) x[cols[a]] = ata[a][m] / ata[a][a] / scale[a];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Calibration> FitTiming(const sim::Profile& base,
                                      std::span<const PrefillObservation> prefills,
                                      std::span<const DecodeObservation> decodes) {
  const sim::TimingModel& tm = base.timing;
  const bool moe = tm.num_experts > 0 && tm.experts_per_token > 0;
  std::vector<Row> rows;
  std::vector<double> ys;
  std::vector<std::string> names;
  for (const PrefillObservation& p : prefills) {
    if (!(p.seconds > 0)) continue;
    rows.push_back(PrefillRow(tm, p.prompt_tokens, base.max_num_batched_tokens));
    ys.push_back(p.seconds);
    names.push_back(absl::StrCat("prefill ", p.prompt_tokens, " tokens"));
  }
  for (const DecodeObservation& d : decodes) {
    if (!(d.seconds > 0)) continue;
    rows.push_back(DecodeRow(tm, d.batch, d.mean_context));
    ys.push_back(d.seconds);
    names.push_back(
        absl::StrFormat("decode step, batch %d at %.0f tokens", d.batch, d.mean_context));
  }
  std::array<bool, kColumns> fit;
  fit.fill(true);
  fit[kWeights] = moe;
  Row x{};
  x[kWeights] = tm.weight_read_s;
  if (absl::Status s = SolveRelativeLeastSquares(rows, ys, fit, x); !s.ok()) return s;

  Calibration c;
  c.weight_read_fitted = moe;
  c.timing = tm;
  c.timing.step_fixed_s = x[kFixed];
  c.timing.weight_read_s = x[kWeights];
  c.timing.prefill_s_per_token = x[kLinear];
  c.timing.attn_s_per_token_pair = x[kAttention];
  c.timing.decode_s_per_seq = x[kPerSeq];
  c.timing.kv_read_s_per_token = x[kKvRead];
  for (size_t i = 0; i < rows.size(); ++i) {
    c.residuals.push_back({names[i], ys[i], Dot(rows[i], x)});
  }
  return c;
}

namespace {

// Sums of the series calibrate reads from a Prometheus text page.
struct Scrape {
  double prefill_sum = 0, prefill_count = 0;
  double itl_sum = 0, itl_count = 0;
  double tpot_sum = 0, tpot_count = 0;  // the older name of the inter-token histogram
  double generation = 0;
  double running = 0;
  double preemptions = 0;
  bool has_prefill = false, has_itl = false;

  double ItlSum() const { return has_itl ? itl_sum : tpot_sum; }
  double ItlCount() const { return has_itl ? itl_count : tpot_count; }
};

Scrape ParseScrape(absl::string_view text) {
  Scrape s;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_at = line.rfind(' ');
    if (name_end == absl::string_view::npos || value_at == absl::string_view::npos) continue;
    double v = 0;
    if (!absl::SimpleAtod(line.substr(value_at + 1), &v)) continue;
    const absl::string_view name = line.substr(0, name_end);
    if (name == "vllm:request_prefill_time_seconds_sum") {
      s.prefill_sum += v;
      s.has_prefill = true;
    } else if (name == "vllm:request_prefill_time_seconds_count") {
      s.prefill_count += v;
    } else if (name == "vllm:inter_token_latency_seconds_sum") {
      s.itl_sum += v;
      s.has_itl = true;
    } else if (name == "vllm:inter_token_latency_seconds_count") {
      s.itl_count += v;
    } else if (name == "vllm:time_per_output_token_seconds_sum") {
      s.tpot_sum += v;
    } else if (name == "vllm:time_per_output_token_seconds_count") {
      s.tpot_count += v;
    } else if (name == "vllm:generation_tokens_total") {
      s.generation += v;
    } else if (name == "vllm:num_requests_running") {
      s.running += v;
    } else if (name == "vllm:num_preemptions_total") {
      s.preemptions += v;
    }
  }
  return s;
}

// One request of a decode batch; counts itself in `finished` and records the first failure.
net::awaitable<void> RunDecodeRequest(ChatCall call, std::shared_ptr<int> finished,
                                      std::shared_ptr<std::string> failure) {
  ChatOutcome out = co_await StreamChat(std::move(call));
  if ((!out.error.empty() || out.http_status != 200) && failure->empty()) {
    *failure = absl::StrCat("HTTP ", out.http_status, " ", out.error);
  }
  ++*finished;
}

// Runs the probes of CalibrateOptions in order on one io_context.
class Prober {
 public:
  explicit Prober(const CalibrateOptions& options) : options_(options), rng_(options.seed) {}

  net::awaitable<absl::StatusOr<Calibration>> Run() {
    if (options_.model.empty()) {
      HttpResponse r = co_await HttpGet(options_.target, "/v1/models", std::chrono::seconds(30));
      if (r.status != 200) co_return Unavailable("GET /v1/models", r);
      boost::system::error_code ec;
      json::value v = json::parse(r.body, ec);
      if (ec || !v.is_object() || !v.as_object().contains("data") || !v.at("data").is_array() ||
          v.at("data").as_array().empty()) {
        co_return absl::FailedPreconditionError("GET /v1/models lists no model");
      }
      const json::object& m = v.at("data").as_array()[0].as_object();
      model_ = std::string(m.at("id").as_string());
      if (const json::value* len = m.if_contains("max_model_len"); len && len->is_int64()) {
        max_model_len_ = len->as_int64();
      }
    } else {
      model_ = options_.model;
    }
    absl::StatusOr<Scrape> first = co_await ScrapeNow();
    if (!first.ok()) co_return first.status();
    if (!first->has_prefill || !(first->has_itl || first->tpot_count > 0 || first->tpot_sum > 0)) {
      co_return absl::FailedPreconditionError(
          "the target's /metrics has no vllm:request_prefill_time_seconds or "
          "vllm:inter_token_latency_seconds histogram (is it vLLM v1?)");
    }

    std::vector<PrefillObservation> prefills;
    for (int n : options_.prompt_lengths) {
      if (max_model_len_ > 0 && n + 2 > max_model_len_) {
        spdlog::info("calibrate: skipping the {}-token prefill (max_model_len {})", n,
                     max_model_len_);
        continue;
      }
      absl::StatusOr<double> t = co_await PrefillProbe(n, nullptr);
      if (!t.ok()) co_return t.status();
      spdlog::info("calibrate: prefill {} tokens: {:.4f} s", n, *t);
      prefills.push_back({n, *t});
    }
    std::vector<DecodeObservation> decodes;
    for (int b : options_.decode_batches) {
      absl::StatusOr<DecodeObservation> d = co_await DecodeProbe(b, options_.decode_context);
      if (!d.ok()) co_return d.status();
      decodes.push_back(*d);
    }
    for (int ctx : options_.long_contexts) {
      if (max_model_len_ > 0 && ctx + options_.decode_tokens + 2 > max_model_len_) continue;
      absl::StatusOr<DecodeObservation> d = co_await DecodeProbe(1, ctx);
      if (!d.ok()) co_return d.status();
      decodes.push_back(*d);
    }
    absl::StatusOr<Calibration> c = FitTiming(options_.base, prefills, decodes);
    if (!c.ok()) co_return c.status();

    // The cache: the same prompt twice.
    const std::vector<int32_t> prompt = RandomPrompt(options_.cache_prompt_tokens);
    int cached = -1;
    absl::StatusOr<double> cold = co_await PrefillProbe(prompt, nullptr);
    if (!cold.ok()) co_return cold.status();
    absl::StatusOr<double> warm = co_await PrefillProbe(prompt, &cached);
    if (!warm.ok()) co_return warm.status();
    c->cache_prompt_tokens = options_.cache_prompt_tokens;
    c->cache_cached_tokens = cached;
    c->cache_cold_s = *cold;
    c->cache_warm_s = *warm;
    co_return c;
  }

 private:
  static absl::Status Unavailable(absl::string_view what, const HttpResponse& r) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", r.status == 0 ? r.error : absl::StrCat("HTTP ", r.status)));
  }

  net::awaitable<absl::StatusOr<Scrape>> ScrapeNow() {
    HttpResponse r = co_await HttpGet(options_.target, "/metrics", std::chrono::seconds(30));
    if (r.status != 200) co_return Unavailable("GET /metrics", r);
    co_return ParseScrape(r.body);
  }

  net::awaitable<void> Pause() {
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(options_.poll_interval);
    co_await timer.async_wait(net::use_awaitable);
  }

  std::vector<int32_t> RandomPrompt(int n) {
    // Ids well inside any vocabulary; random, so no two probes share a first block.
    std::uniform_int_distribution<int32_t> id(1000, 30000);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = id(rng_);
    return ids;
  }

  std::string Body(const std::vector<int32_t>& prompt, int max_tokens) const {
    json::object o;
    o["model"] = model_;
    json::array ids;
    ids.reserve(prompt.size());
    for (int32_t t : prompt) ids.emplace_back(t);
    o["prompt"] = std::move(ids);
    o["max_tokens"] = max_tokens;
    o["min_tokens"] = max_tokens;
    o["ignore_eos"] = true;
    o["temperature"] = 0;
    o["stream"] = true;
    o["stream_options"] = json::object{{"include_usage", true}};
    return json::serialize(o);
  }

  ChatCall Call(const std::vector<int32_t>& prompt, int max_tokens) const {
    ChatCall call;
    call.endpoint = options_.target;
    call.path = "/v1/completions";
    call.body = Body(prompt, max_tokens);
    call.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options_.probe_timeout);
    return call;
  }

  // Polls /metrics until `done(scrape)` or the probe timeout.
  template <typename Done>
  net::awaitable<absl::StatusOr<Scrape>> WaitFor(Done done, absl::string_view what) {
    const auto deadline = std::chrono::steady_clock::now() + options_.probe_timeout;
    while (true) {
      absl::StatusOr<Scrape> s = co_await ScrapeNow();
      if (!s.ok() || done(*s)) co_return s;
      if (std::chrono::steady_clock::now() > deadline) {
        co_return absl::DeadlineExceededError(
            absl::StrCat("calibrate: timed out waiting for ", what));
      }
      co_await Pause();
    }
  }

  net::awaitable<absl::StatusOr<double>> PrefillProbe(int n, int* cached) {
    co_return co_await PrefillProbe(RandomPrompt(n), cached);
  }

  // One request alone: the engine's prefill time for it. `cached` (optional) receives its
  // cached tokens; without it, a cache hit is an error (the probe must be cold).
  net::awaitable<absl::StatusOr<double>> PrefillProbe(const std::vector<int32_t>& prompt,
                                                      int* cached) {
    absl::StatusOr<Scrape> before = co_await ScrapeNow();
    if (!before.ok()) co_return before.status();
    ChatOutcome out = co_await StreamChat(Call(prompt, 1));
    if (!out.error.empty() || out.http_status != 200) {
      co_return absl::UnavailableError(absl::StrCat("calibrate: a ", prompt.size(),
                                                    "-token request failed: HTTP ", out.http_status,
                                                    " ", out.error));
    }
    if (cached != nullptr) {
      *cached = static_cast<int>(out.cached_tokens);
    } else if (out.cached_tokens > 0) {
      co_return absl::FailedPreconditionError(absl::StrCat(
          "calibrate: a random ", prompt.size(), "-token prompt hit the prefix cache (",
          out.cached_tokens, " tokens): the target's cache is not cold"));
    }
    const double count0 = before->prefill_count;
    absl::StatusOr<Scrape> after = co_await WaitFor(
        [&](const Scrape& s) { return s.prefill_count >= count0 + 1; }, "the prefill histogram");
    if (!after.ok()) co_return after.status();
    const double dn = after->prefill_count - before->prefill_count;
    co_return (after->prefill_sum - before->prefill_sum) / dn;
  }

  // `batch` requests of `context` tokens decoding together: the mean step over a window in
  // which all of them decode and nothing prefills.
  net::awaitable<absl::StatusOr<DecodeObservation>> DecodeProbe(int batch, int context) {
    absl::StatusOr<Scrape> s0 = co_await ScrapeNow();
    if (!s0.ok()) co_return s0.status();
    auto finished = std::make_shared<int>(0);
    auto failure = std::make_shared<std::string>();
    const auto executor = co_await net::this_coro::executor;
    for (int i = 0; i < batch; ++i) {
      net::co_spawn(
          executor,
          RunDecodeRequest(Call(RandomPrompt(context), options_.decode_tokens), finished, failure),
          net::detached);
    }
    const double prefilled = s0->prefill_count + batch;
    absl::StatusOr<Scrape> s1 = co_await WaitFor(
        [&](const Scrape& s) { return s.prefill_count >= prefilled || !failure->empty(); },
        "a decode batch to be prefilled");
    if (s1.ok()) {
      const double itl_target = s1->ItlCount() + static_cast<double>(batch) * options_.window_steps;
      absl::StatusOr<Scrape> s2 = co_await WaitFor(
          [&](const Scrape& s) { return s.ItlCount() >= itl_target || !failure->empty(); },
          "decode steps");
      // Every stream ends by itself (max_tokens); wait for them before the next probe.
      while (*finished < batch) co_await Pause();
      if (!failure->empty()) {
        co_return absl::UnavailableError(
            absl::StrCat("calibrate: a decode request failed: ", *failure));
      }
      if (!s2.ok()) co_return s2.status();
      if (s2->running < batch || s2->preemptions != s0->preemptions) {
        co_return absl::FailedPreconditionError(absl::StrCat(
            "calibrate: the batch of ", batch, " did not decode together through the window (",
            s2->running, " running, ", s2->preemptions - s0->preemptions,
            " preemptions); lower --decode-context or raise --decode-tokens"));
      }
      DecodeObservation d;
      d.batch = batch;
      d.seconds = (s2->ItlSum() - s1->ItlSum()) / (s2->ItlCount() - s1->ItlCount());
      // Each sequence reads its prompt plus the tokens it has generated; the mean over the
      // window is halfway between the two scrapes.
      const double generated = ((s1->generation + s2->generation) / 2 - s0->generation) / batch;
      d.mean_context = context + generated - 0.5;
      spdlog::info("calibrate: decode batch {} at {:.0f} tokens: {:.5f} s per step", batch,
                   d.mean_context, d.seconds);
      co_return d;
    }
    while (*finished < batch) co_await Pause();
    co_return s1.status();
  }

  const CalibrateOptions& options_;
  std::mt19937_64 rng_;
  std::string model_;
  int64_t max_model_len_ = 0;
};

}  // namespace

absl::StatusOr<Calibration> Calibrate(const CalibrateOptions& options) {
  net::io_context io;
  Prober prober(options);
  std::optional<absl::StatusOr<Calibration>> result;
  net::co_spawn(io, prober.Run(), [&](std::exception_ptr e, absl::StatusOr<Calibration> r) {
    if (e) {
      result = absl::InternalError("calibrate: unexpected exception");
    } else {
      result = std::move(r);
    }
  });
  io.run();
  if (!result) return absl::InternalError("calibrate: the probe loop did not finish");
  return *std::move(result);
}

std::string TimingYaml(const Calibration& c, absl::string_view target) {
  const sim::TimingModel& t = c.timing;
  std::string out = absl::StrCat("# Fitted by kvroute-bench calibrate against ", target,
                                 ". Residuals (engine-measured vs fitted):\n");
  double worst = 0;
  for (const ProbeResidual& r : c.residuals) {
    const double rel = r.fitted_s / r.measured_s - 1;
    worst = std::max(worst, std::abs(rel));
    absl::StrAppendFormat(&out, "#   %-40s %10.5f s  %10.5f s  %+6.1f%%\n", r.probe, r.measured_s,
                          r.fitted_s, 100 * rel);
  }
  absl::StrAppendFormat(&out, "#   worst residual %.1f%%\n", 100 * worst);
  if (c.cache_prompt_tokens > 0) {
    absl::StrAppendFormat(&out,
                          "# Repeated %d-token prompt: %d tokens cached the second time; "
                          "prefill %.4f s cold, %.4f s warm.\n",
                          c.cache_prompt_tokens, c.cache_cached_tokens, c.cache_cold_s,
                          c.cache_warm_s);
  }
  if (!c.weight_read_fitted) {
    out +=
        "# Dense model: weight_read_s is kept from the base profile (it cannot be told\n"
        "# apart from step_fixed_s).\n";
  }
  auto g = [](double v) { return absl::StrFormat("%.4g", std::max(0.0, v)); };
  absl::StrAppend(&out, "timing:\n", "  step_fixed_s: ", g(t.step_fixed_s), "\n",
                  "  prefill_s_per_token: ", g(t.prefill_s_per_token), "\n",
                  "  attn_s_per_token_pair: ", g(t.attn_s_per_token_pair), "\n",
                  "  weight_read_s: ", g(t.weight_read_s), "\n");
  if (t.num_experts > 0) {
    absl::StrAppend(&out, "  expert_weight_fraction: ", g(t.expert_weight_fraction), "\n",
                    "  num_experts: ", t.num_experts, "\n",
                    "  experts_per_token: ", t.experts_per_token, "\n");
  }
  absl::StrAppend(&out, "  decode_s_per_seq: ", g(t.decode_s_per_seq), "\n",
                  "  kv_read_s_per_token: ", g(t.kv_read_s_per_token), "\n");
  return out;
}

std::string ReplaceTimingSection(absl::string_view base_yaml, absl::string_view timing_yaml) {
  std::vector<absl::string_view> lines = absl::StrSplit(base_yaml, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  size_t at = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].substr(0, 7) == "timing:") {
      at = i;
      break;
    }
  }
  std::string out;
  if (at == lines.size()) {
    for (absl::string_view l : lines) absl::StrAppend(&out, l, "\n");
    absl::StrAppend(&out, timing_yaml);
    return out;
  }
  size_t begin = at;
  while (begin > 0 && !lines[begin - 1].empty() && lines[begin - 1].front() == '#') --begin;
  size_t end = at + 1;
  while (end < lines.size() && !lines[end].empty() &&
         (lines[end].front() == ' ' || lines[end].front() == '\t')) {
    ++end;
  }
  for (size_t i = 0; i < begin; ++i) absl::StrAppend(&out, lines[i], "\n");
  absl::StrAppend(&out, timing_yaml);
  for (size_t i = end; i < lines.size(); ++i) absl::StrAppend(&out, lines[i], "\n");
  return out;
}

}  // namespace kvroute::bench
