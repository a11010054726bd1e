#include "bench/kvroute_bench/runner.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvroute::bench {
namespace net = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAsTuple = net::as_tuple(net::use_awaitable);

Clock::duration WallFromSeconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// One run: owns the result and the counters; every member is touched only from the
// io_context's single thread.
class Run {
 public:
  Run(net::io_context& io, const RunOptions& options, const WorkloadSpec& workload)
      : io_(io),
        options_(options),
        workload_(workload),
        timer_(io),
        progress_timer_(io),
        drain_timer_(io) {
    result_.name = options.name;
    result_.mode = options.mode;
    result_.heavy_threshold = options.heavy_threshold;
    result_.target = options.target.Url();
    result_.workload = std::string(WorkloadName(workload.kind));
    result_.time_scale = options.time_scale > 0 ? options.time_scale : 1.0;
    result_.slo = options.slo;
    result_.kv_bytes_per_token = options.kv_bytes_per_token;
    result_.client_timeout_s = options.client_timeout_s;
    result_.shed_retries = options.shed_retries;
    if (workload.kind == WorkloadKind::kAgentic) {
      result_.session_ids = workload.agentic.client.send_session_ids;
      result_.open_loop_turn_s = workload.agentic.client.open_loop_turn_s;
    }
  }

  net::awaitable<void> Main() {
    model_ = options_.model;
    if (model_.empty()) model_ = co_await DetectModel();
    result_.fleet_kv_tokens = options_.fleet_kv_tokens;
    if (result_.fleet_kv_tokens <= 0 || options_.reference) {
      const std::vector<int64_t> pools = co_await ScrapeInstanceKv();
      const bool known = std::all_of(pools.begin(), pools.end(), [](int64_t t) { return t > 0; });
      if (result_.fleet_kv_tokens <= 0 && known) {
        result_.fleet_kv_tokens = std::accumulate(pools.begin(), pools.end(), int64_t{0});
      }
      for (size_t i = 0; options_.reference && i < pools.size(); ++i) {
        if (pools[i] > 0) options_.reference->SetCapacity(static_cast<int>(i), pools[i]);
      }
    }
    epoch_ = Clock::now();
    if (!options_.instances.empty() || !options_.dcgm.host.empty()) {
      net::co_spawn(io_,
                    SampleFleet(options_.instances, options_.dcgm,
                                std::chrono::milliseconds(
                                    static_cast<int64_t>(options_.sample_interval_s * 1000)),
                                epoch_, &sampler_, &result_.samples),
                    net::detached);
    }
    net::co_spawn(io_, ProgressLoop(), net::detached);
    if (workload_.kind == WorkloadKind::kAgentic) {
      co_await AgenticArrivals();
    } else {
      co_await TraceArrivals();
    }
    arrivals_done_ = true;
    if (active_ > 0) {
      drain_timer_.expires_after(WallFromSeconds(options_.drain_timeout_s));
      auto [ec] = co_await drain_timer_.async_wait(kAsTuple);
      if (!ec) Report(absl::StrCat("drain timeout: ", active_, " units still in flight"));
    }
    result_.duration_s = Seconds();
    if (!options_.reference) co_await ScrapeLearnedFactors();
    Report("finished");
    stopped_ = true;
    sampler_.Stop();
    progress_timer_.cancel();
    if (active_ > 0) io_.stop();  // abandon what the drain timeout left behind
  }

  RunResult TakeResult() {
    for (RequestRecord& r : result_.requests) {
      if (r.e2e < 0 && r.error.empty()) {
        r.error = "unfinished at end of run";
        r.failure = RequestOutcome::kGaveUp;  // the client stopped waiting for it
      }
    }
    return std::move(result_);
  }

 private:
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }

  void Report(std::string_view what) {
    std::string line = absl::StrFormat(
        "[%s] %.1fs %s: %d sent, %d done, %d errors, %d shed, %d gave up, %d in flight, "
        "%d dropped",
        options_.name, Seconds(), what, sent_, done_, errors_, shed_, gave_up_, sent_ - done_,
        result_.dropped);
    if (options_.progress) {
      options_.progress(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

  net::awaitable<void> ProgressLoop() {
    while (!stopped_) {
      progress_timer_.expires_after(WallFromSeconds(options_.progress_interval_s));
      co_await progress_timer_.async_wait(kAsTuple);
      if (stopped_) break;
      Report("running");
    }
  }

  net::awaitable<std::string> DetectModel() {
    HttpResponse r = co_await HttpGet(options_.target, "/v1/models", std::chrono::seconds(10));
    if (r.status == 200) {
      boost::system::error_code ec;
      json::value v = json::parse(r.body, ec);
      if (!ec && v.is_object()) {
        if (const json::value* d = v.as_object().if_contains("data");
            d && d->is_array() && !d->as_array().empty() && d->as_array()[0].is_object()) {
          if (const json::value* id = d->as_array()[0].as_object().if_contains("id");
              id && id->is_string()) {
            co_return std::string(id->as_string());
          }
        }
      }
    }
    co_return "default";
  }

  // Hands the /metrics samples taken since the last call to the oracle reference.
  void FeedReferenceGauges() {
    const std::vector<NamedEndpoint>& instances = options_.reference->instances();
    for (; fed_samples_ < result_.samples.size(); ++fed_samples_) {
      const InstanceSample& x = result_.samples[fed_samples_];
      for (size_t i = 0; i < instances.size(); ++i) {
        if (instances[i].name == x.instance) {
          options_.reference->UpdateGauges(static_cast<int>(i), x);
        }
      }
    }
  }

  // kvroute's learned time factors, from the first replica (or the target) that answers:
  // a killed replica does not, and every live one learned from the same engines' metrics.
  net::awaitable<void> ScrapeLearnedFactors() {
    std::vector<Endpoint> routers = options_.replicas;
    if (routers.empty()) routers.push_back(options_.target);
    for (const Endpoint& e : routers) {
      HttpResponse r = co_await HttpGet(e, "/metrics", std::chrono::seconds(10));
      if (r.status != 200) continue;
      result_.learned_factors = LearnedFactorsFromMetrics(ParsePrometheusText(r.body));
      co_return;
    }
  }

  // num_gpu_blocks x block_size of each instance (0 where unknown).
  net::awaitable<std::vector<int64_t>> ScrapeInstanceKv() {
    std::vector<int64_t> pools;
    for (const NamedEndpoint& inst : options_.instances) {
      HttpResponse r = co_await HttpGet(inst.endpoint, "/metrics", std::chrono::seconds(10));
      int64_t tokens = 0;
      if (r.status == 200) {
        for (const PromSample& s : ParsePrometheusText(r.body)) {
          if (s.name != "vllm:cache_config_info") continue;
          int64_t blocks = 0, block_size = 0;
          auto b = s.labels.find("num_gpu_blocks");
          auto z = s.labels.find("block_size");
          if (b != s.labels.end() && z != s.labels.end() && absl::SimpleAtoi(b->second, &blocks) &&
              absl::SimpleAtoi(z->second, &block_size)) {
            tokens = blocks * block_size;
          }
        }
      }
      pools.push_back(tokens);
    }
    co_return pools;
  }

  // Waits until `offset_s` workload seconds after the epoch.
  net::awaitable<void> WaitUntil(double offset_s) {
    timer_.expires_at(epoch_ + WallFromSeconds(offset_s * result_.time_scale));
    co_await timer_.async_wait(kAsTuple);
  }

  void UnitStarted() { ++active_; }
  void UnitDone() {
    --active_;
    if (arrivals_done_ && active_ == 0) drain_timer_.cancel();
  }

  // Sends one chat request and records it; returns the record's index and the generated text.
  net::awaitable<std::pair<size_t, std::string>> Send(std::vector<ChatMessage> const& messages,
                                                      int64_t completion, std::string session,
                                                      RequestRecord record) {
    record.request_id = absl::StrCat("bench-", options_.name, "-", next_request_++);
    record.t_start = Seconds();
    const size_t index = result_.requests.size();
    result_.requests.push_back(record);
    ++sent_;
    ChatCall call;
    call.endpoint = options_.target;
    if (options_.api == ChatApi::kMessages) {
      call.path = std::string(ChatApiPath(ChatApi::kMessages));
      call.body = BuildMessagesBody(model_, messages, completion, session);
    } else {
      call.body = BuildChatBody(model_, messages, completion);
      call.session_id = session;
    }
    call.request_id = record.request_id;
    double timeout_s = options_.request_timeout_s;
    if (options_.client_timeout_s > 0) {
      timeout_s = std::min(timeout_s, options_.client_timeout_s * result_.time_scale);
    }
    OracleReference::Routed routed;
    ChatOutcome out;
    // The oracle routes in the bench: its routing, and the residency gate's wait, are part of
    // the request's latency as they are inside kvroute.
    const auto routing_start = std::chrono::steady_clock::now();
    double routing_s = 0;
    if (options_.reference) {
      FeedReferenceGauges();
      std::string prompt;
      for (const ChatMessage& m : messages) absl::StrAppend(&prompt, m.role, "\n", m.content, "\n");
      routed = co_await options_.reference->Route(call.body, std::move(prompt), session, completion,
                                                  record.request_id);
      routing_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - routing_start).count();
      timeout_s -= routing_s;  // the client's patience counts from sending, routing included
      call.endpoint = routed.endpoint;
      OracleReference* reference = options_.reference.get();
      call.on_first_token = [reference, &routed] { reference->OnFirstToken(routed); };
    }
    if (routed.error.empty() && timeout_s <= 0) {
      out.error = "client timeout while the oracle reference routed";
      out.timed_out = true;
    } else if (routed.error.empty() && !options_.replicas.empty()) {
      out = co_await SendToReplicas(std::move(call), timeout_s, index);
    } else if (routed.error.empty()) {
      call.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
      out = co_await StreamChat(std::move(call));
      if (out.ttft >= 0) out.ttft += routing_s;
      if (out.e2e >= 0) out.e2e += routing_s;
    } else {
      out.error = routed.error;
    }
    if (options_.reference && routed.error.empty()) {
      options_.reference->OnComplete(routed, out.error.empty(), out.prompt_tokens,
                                     out.cached_tokens, out.completion_tokens);
      out.klass = routed.klass;
      out.backend = routed.backend;
    }
    ++done_;
    RequestRecord& r = result_.requests[index];
    if (!out.request_id.empty()) r.request_id = out.request_id;
    r.klass = out.klass;
    r.backend = out.backend;
    r.http_status = out.http_status;
    r.error = out.error;
    r.failure = FailureOutcome(out.http_status, out.timed_out);
    r.retry_after_s = out.retry_after_s;
    if (!r.ok()) {
      ++errors_;
      shed_ += r.outcome() == RequestOutcome::kShed ? 1 : 0;
      gave_up_ += r.outcome() == RequestOutcome::kGaveUp ? 1 : 0;
    }
    r.ttft = out.ttft;
    r.tpot = out.tpot;
    r.e2e = out.e2e;
    r.prompt_tokens = out.prompt_tokens;
    r.cached_tokens = out.cached_tokens;
    r.completion_tokens = out.completion_tokens;
    if (options_.reference) r.cached_tokens_est = routed.cached_tokens_est;
    RecordGaps(r, out.content_gaps);
    if (options_.prefill_floor && r.ok() && r.prompt_tokens > 0 && r.cached_tokens >= 0) {
      r.compute_floor_s =
          options_.prefill_floor(r.prompt_tokens, r.cached_tokens) * result_.time_scale;
    }
    co_return std::pair<size_t, std::string>(index, std::move(out.content));
  }

  // Sends `call` to the replicas round robin; a connection error (the replica refused or
  // dropped it before answering) sends it again to the next one, within the request's time.
  // (`index` names the request's record: records move as others are added meanwhile.)
  net::awaitable<ChatOutcome> SendToReplicas(ChatCall call, double timeout_s, size_t index) {
    const size_t n = options_.replicas.size();
    const size_t first = next_replica_++ % n;
    const auto start = std::chrono::steady_clock::now();
    ChatOutcome out;
    for (size_t k = 0; k < n; ++k) {
      const double left =
          timeout_s -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (left <= 0) {
        out.error = "client timeout while failing over between replicas";
        out.timed_out = true;
        break;
      }
      ChatCall attempt = call;
      const size_t replica = (first + k) % n;
      attempt.endpoint = options_.replicas[replica];
      attempt.timeout = std::chrono::milliseconds(static_cast<int64_t>(left * 1000));
      out = co_await StreamChat(std::move(attempt));
      RequestRecord& record = result_.requests[index];
      record.replica = static_cast<int>(replica);
      if (!out.connection_failed) break;
      ++record.failovers;
    }
    // Times count from the first attempt, as the client sees them.
    const double lost =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
        std::max(0.0, out.e2e);
    if (result_.requests[index].failovers > 0 && out.e2e >= 0) {
      if (out.ttft >= 0) out.ttft += lost;
      out.e2e += lost;
    }
    co_return out;
  }

  // Keeps a stream's largest gap on its record and every gap in the run's histogram of its
  // class; the gaps themselves are not kept.
  void RecordGaps(RequestRecord& r, const std::vector<double>& gaps) {
    r.gaps = static_cast<int64_t>(gaps.size());
    if (gaps.empty()) return;
    r.max_gap = *std::max_element(gaps.begin(), gaps.end());
    if (!r.ok()) return;
    LogHistogram& h = result_.itl_by_class[r.klass.empty() ? "unlabelled" : r.klass];
    for (double g : gaps) h.Add(g);
  }

  // ---- agentic ----
  net::awaitable<void> AgenticArrivals() {
    const AgenticOptions& a = workload_.agentic;
    system_prompt_ = AgenticSystemPrompt(a);
    for (const AgenticJob& job : PlanAgenticJobs(a)) {
      co_await WaitUntil(job.arrival_s);
      const auto planned = static_cast<int64_t>(PlanAgenticTurns(a, job.id).size());
      if (active_ >= options_.max_inflight) {
        ++result_.dropped;
        result_.dropped_turns += planned;
        continue;
      }
      const size_t index = result_.jobs.size();
      JobRecord rec;
      rec.job = job.id;
      rec.t_arrival = Seconds();
      rec.planned_turns = planned;
      result_.jobs.push_back(rec);
      UnitStarted();
      if (a.client.open_loop()) {
        net::co_spawn(io_, RunOpenLoopJob(job, index), net::detached);
      } else {
        net::co_spawn(io_, RunJob(job, index), net::detached);
      }
    }
  }

  net::awaitable<void> RunJob(AgenticJob job, size_t job_index) {
    const AgenticOptions& a = workload_.agentic;
    std::vector<ChatMessage> messages = {{"system", system_prompt_},
                                         {"user", AgenticTask(a, job.id)}};
    net::steady_timer tool_timer(io_);
    int64_t prev_prompt = -1, prev_completion = -1;
    bool ok = true;
    const auto turns = static_cast<int>(result_.jobs[job_index].planned_turns);
    for (int turn = 1; turn <= turns; ++turn) {
      RequestRecord rec;
      rec.job = job.id;
      rec.turn = turn;
      if (turn == 1) {
        rec.bound_cached_tokens = first_turns_sent_ > 0 ? a.system_tokens : 0;
        ++first_turns_sent_;
      } else if (prev_prompt >= 0 && prev_completion >= 0) {
        rec.bound_cached_tokens = prev_prompt + prev_completion;
      }
      auto [i, content] =
          co_await Send(messages, AgenticCompletionTokens(a, job.id, turn), job.session_id, rec);
      // Shed: again after the wait it advises, as agent SDKs do; the turn's latency counts from
      // its first attempt.
      const double first_start = result_.requests[i].t_start;
      for (int retry = 0;
           retry < options_.shed_retries && result_.requests[i].outcome() == RequestOutcome::kShed;
           ++retry) {
        const double wait_s = std::max(result_.requests[i].retry_after_s, 0.0);
        tool_timer.expires_after(WallFromSeconds(wait_s));
        co_await tool_timer.async_wait(kAsTuple);
        std::tie(i, content) =
            co_await Send(messages, AgenticCompletionTokens(a, job.id, turn), job.session_id, rec);
        RequestRecord& again = result_.requests[i];
        const double waited = again.t_start - first_start;
        if (again.ttft >= 0) again.ttft += waited;
        if (again.e2e >= 0) again.e2e += waited;
      }
      const RequestRecord& r = result_.requests[i];
      result_.jobs[job_index].turn_e2e.push_back(r.ok() ? r.e2e : -1);
      if (!r.ok()) {
        ok = false;
        break;
      }
      prev_prompt = r.prompt_tokens;
      prev_completion = r.completion_tokens;
      messages.push_back({"assistant", std::move(content)});
      if (turn < turns) {
        tool_timer.expires_after(
            WallFromSeconds(AgenticToolTime(a, job.id, turn) * result_.time_scale));
        co_await tool_timer.async_wait(kAsTuple);
        messages.push_back({"user", AgenticToolOutput(a, job.id, turn)});
      }
    }
    JobRecord& j = result_.jobs[job_index];
    j.ok = ok;
    j.t_done = Seconds();
    UnitDone();
  }

  // An open-loop job: its turns go out at their planned times (AgenticOpenLoopSendTimes)
  // with the planned answers in the conversation, whatever became of the earlier turns. The
  // job, one unit of in-flight work, ends when its last turn has finished.
  struct OpenLoopJob {
    size_t job_index = 0;
    int64_t outstanding = 0;  // turns sent and not yet finished
    bool all_sent = false;
    bool ok = true;
  };

  net::awaitable<void> RunOpenLoopJob(AgenticJob job, size_t job_index) {
    const AgenticOptions& a = workload_.agentic;
    const std::vector<PlannedTurn> turns = PlanAgenticTurns(a, job.id);
    const std::vector<double> send_at = AgenticOpenLoopSendTimes(a, job);
    auto state = std::make_shared<OpenLoopJob>();
    state->job_index = job_index;
    result_.jobs[job_index].turn_e2e.assign(turns.size(), -1);
    std::vector<ChatMessage> messages = {{"system", system_prompt_},
                                         {"user", AgenticTask(a, job.id)}};
    net::steady_timer turn_timer(io_);
    for (size_t k = 0; k < turns.size(); ++k) {
      const PlannedTurn& p = turns[k];
      if (k > 0) {
        messages.push_back({"assistant", AgenticPlannedAnswer(a, job.id, turns[k - 1].turn)});
        messages.push_back({"user", AgenticToolOutput(a, job.id, turns[k - 1].turn)});
      }
      turn_timer.expires_at(epoch_ + WallFromSeconds(send_at[k] * result_.time_scale));
      co_await turn_timer.async_wait(kAsTuple);
      RequestRecord rec;
      rec.job = job.id;
      rec.turn = p.turn;
      if (k == 0) {
        rec.bound_cached_tokens = first_turns_sent_ > 0 ? a.system_tokens : 0;
        ++first_turns_sent_;
      } else {
        // The previous prompt (planned: its answer need not have arrived); the planned answer
        // that follows it is not the text the engine generated and cached.
        rec.bound_cached_tokens = turns[k - 1].prompt_tokens;
      }
      ++state->outstanding;
      net::co_spawn(io_, SendOpenLoopTurn(messages, p, job.session_id, rec, state), net::detached);
    }
    state->all_sent = true;
    if (state->outstanding == 0) FinishOpenLoopJob(*state);
  }

  net::awaitable<void> SendOpenLoopTurn(std::vector<ChatMessage> messages, PlannedTurn turn,
                                        std::string session, RequestRecord rec,
                                        std::shared_ptr<OpenLoopJob> state) {
    auto [i, content] = co_await Send(messages, turn.completion_tokens, session, rec);
    const RequestRecord& r = result_.requests[i];
    result_.jobs[state->job_index].turn_e2e[static_cast<size_t>(turn.turn - 1)] =
        r.ok() ? r.e2e : -1;
    state->ok = state->ok && r.ok();
    if (--state->outstanding == 0 && state->all_sent) FinishOpenLoopJob(*state);
  }

  void FinishOpenLoopJob(const OpenLoopJob& state) {
    JobRecord& j = result_.jobs[state.job_index];
    j.ok = state.ok;
    j.t_done = Seconds();
    UnitDone();
  }

  // ---- trace ----
  net::awaitable<void> TraceArrivals() {
    const std::vector<TraceRecord>& records = *workload_.trace_records;
    trace_bound_ = InfiniteCacheHitTokens(records);
    result_.bound_hit_ratio = InfiniteCacheHitRatio(records);
    // Turns whose parent is in the slice start after the parent completes.
    absl::flat_hash_map<int64_t, size_t> by_chat;
    for (const TraceRecord& r : records) {
      if (r.chat_id) by_chat[*r.chat_id] = static_cast<size_t>(r.index);
    }
    std::vector<bool> follows_parent(records.size(), false);
    for (const TraceRecord& r : records) {
      if (r.parent_chat_id) {
        auto it = by_chat.find(*r.parent_chat_id);
        if (it != by_chat.end() && it->second < static_cast<size_t>(r.index)) {
          children_[it->second].push_back(static_cast<size_t>(r.index));
          follows_parent[static_cast<size_t>(r.index)] = true;
        }
      }
    }
    const double speedup = workload_.trace.speedup > 0 ? workload_.trace.speedup : 1.0;
    for (const TraceRecord& r : records) {
      if (follows_parent[static_cast<size_t>(r.index)]) continue;
      co_await WaitUntil(r.timestamp_ms / 1000.0 / speedup);
      if (active_ >= options_.max_inflight) {
        ++result_.dropped;
        continue;
      }
      UnitStarted();
      net::co_spawn(io_, RunTraceRequest(static_cast<size_t>(r.index), 0.0), net::detached);
    }
  }

  std::string SessionOf(const TraceRecord& r) {
    if (!r.chat_id) return {};
    int64_t root = *r.chat_id;
    // Walk to the session root through parents (bounded by the slice's size).
    const std::vector<TraceRecord>& records = *workload_.trace_records;
    size_t i = static_cast<size_t>(r.index);
    for (size_t steps = 0; steps < records.size(); ++steps) {
      if (!records[i].parent_chat_id) break;
      auto it = parent_index_.find(i);
      if (it == parent_index_.end()) {
        root = *records[i].parent_chat_id;
        break;
      }
      i = it->second;
      root = *records[i].chat_id;
    }
    return absl::StrCat("chat-", root);
  }

  net::awaitable<void> RunTraceRequest(size_t index, double delay_s) {
    const std::vector<TraceRecord>& records = *workload_.trace_records;
    const TraceRecord& tr = records[index];
    if (delay_s > 0) {
      net::steady_timer t(io_);
      t.expires_after(WallFromSeconds(delay_s * result_.time_scale));
      co_await t.async_wait(kAsTuple);
    }
    RequestRecord rec;
    rec.trace_index = tr.index;
    rec.bound_cached_tokens = trace_bound_[index];
    std::vector<ChatMessage> messages = {{"user", ExpandTracePrompt(tr, workload_.trace.seed)}};
    co_await Send(messages, tr.output_length, SessionOf(tr), rec);
    if (auto it = children_.find(index); it != children_.end()) {
      const double speedup = workload_.trace.speedup > 0 ? workload_.trace.speedup : 1.0;
      for (size_t child : it->second) {
        parent_index_[child] = index;
        double think = workload_.trace.think_time_s;
        if (think < 0) think = (records[child].timestamp_ms - tr.timestamp_ms) / 1000.0 / speedup;
        UnitStarted();
        net::co_spawn(io_, RunTraceRequest(child, std::max(think, 0.0)), net::detached);
      }
    }
    UnitDone();
  }

  net::io_context& io_;
  const RunOptions& options_;
  const WorkloadSpec& workload_;
  RunResult result_;
  std::string model_;
  Clock::time_point epoch_ = Clock::now();
  net::steady_timer timer_, progress_timer_, drain_timer_;
  SamplerControl sampler_;
  bool arrivals_done_ = false;
  bool stopped_ = false;
  int64_t active_ = 0;
  int64_t sent_ = 0, done_ = 0, errors_ = 0, shed_ = 0, gave_up_ = 0, next_request_ = 0;
  size_t next_replica_ = 0;
  int64_t first_turns_sent_ = 0;
  size_t fed_samples_ = 0;
  std::string system_prompt_;
  std::vector<int64_t> trace_bound_;
  absl::flat_hash_map<size_t, std::vector<size_t>> children_;
  absl::flat_hash_map<size_t, size_t> parent_index_;
};

}  // namespace

std::string_view WorkloadName(WorkloadKind kind) {
  return kind == WorkloadKind::kAgentic ? "agentic" : "trace";
}

absl::Status PrepareWorkload(WorkloadSpec& spec) {
  if (spec.kind != WorkloadKind::kTrace || spec.trace_records) return absl::OkStatus();
  absl::StatusOr<std::vector<TraceRecord>> records = LoadTrace(spec.trace);
  if (!records.ok()) return records.status();
  if (records->empty()) return absl::InvalidArgumentError("the trace slice is empty");
  spec.trace_records = std::make_shared<const std::vector<TraceRecord>>(*std::move(records));
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunWorkload(const RunOptions& options, const WorkloadSpec& workload) {
  if (workload.kind == WorkloadKind::kTrace && !workload.trace_records) {
    return absl::FailedPreconditionError("call PrepareWorkload before RunWorkload");
  }
  if (options.target.host.empty()) return absl::InvalidArgumentError("no target");
  net::io_context io;
  Run run(io, options, workload);
  std::exception_ptr failure;
  net::co_spawn(io, run.Main(), [&](std::exception_ptr e) { failure = e; });
  io.run();
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("run failed: ", e.what()));
    }
  }
  RunResult result = run.TakeResult();
  ComputeRunBounds(workload, result);
  return result;
}

void ComputeRunBounds(const WorkloadSpec& workload, RunResult& run) {
  std::vector<BoundRequest> requests;
  requests.reserve(run.requests.size());
  int64_t block_tokens = 16;
  for (const RequestRecord& r : run.requests) {
    if (!r.ok() || r.prompt_tokens <= 0) continue;
    BoundRequest b;
    b.arrival_s = r.t_start;
    b.prompt_tokens = r.prompt_tokens;
    if (r.trace_index >= 0 && workload.trace_records &&
        r.trace_index < static_cast<int64_t>(workload.trace_records->size())) {
      const TraceRecord& t = (*workload.trace_records)[static_cast<size_t>(r.trace_index)];
      b.blocks = t.hash_ids;
      b.block_tokens = t.block_size;
      block_tokens = t.block_size;
    } else {
      b.stream = r.job;
      b.shared_prefix_tokens = workload.agentic.system_tokens;
      // An open-loop conversation goes on with the planned answer, not the generated one the
      // engine cached: only the prompt continues the stream.
      b.completion_tokens =
          workload.agentic.client.open_loop() ? 0 : std::max<int64_t>(0, r.completion_tokens);
    }
    requests.push_back(std::move(b));
  }
  const CacheBounds bounds =
      ComputeCacheBounds(std::move(requests), run.fleet_kv_tokens,
                         workload.kind == WorkloadKind::kTrace ? block_tokens : 16);
  if (run.bound_hit_ratio < 0) run.bound_hit_ratio = bounds.infinite_hit_ratio();
  run.pooled_bound_hit_ratio = run.fleet_kv_tokens > 0 ? bounds.pooled_lru_hit_ratio() : -1;
}

std::string RunClientDescription(const AgenticClientOptions& client, const RunOptions& run) {
  std::string out = AgenticClientDescription(client);
  if (run.client_timeout_s > 0)
    absl::StrAppend(&out, ", client timeout ", run.client_timeout_s, " s");
  if (run.shed_retries > 0) {
    absl::StrAppend(&out, ", a shed turn sent again up to ", run.shed_retries,
                    " times after the wait it advises (retry-after-ms, else Retry-After)");
  }
  return out;
}

}  // namespace kvroute::bench
