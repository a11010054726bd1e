#include "sim/instance.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <boost/json.hpp>
#include <deque>

#include "sim/instance_internal.h"
#include "sim/metrics.h"
#include "sim/oracle.h"
#include "sim/tokenizer.h"
#include "wire/prometheus_text.h"
#include "wire/sse.h"

namespace sim {

using internal::Log;
using internal::UnixSeconds;

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
constexpr auto kNoThrow = net::as_tuple(use_awaitable);

// A request in flight, shared between its session coroutine and the engine loop (same strand).
struct Instance::Pending {
  explicit Pending(const net::any_io_executor& ex) : notify(ex) {}
  net::steady_timer notify;
  std::deque<TokenEvent> events;
  bool done = false;
  bool aborted = false;  // instance stopping or killed
  RequestInfo info;
  // Decode leg: where its KV comes from, released once pulled.
  std::optional<KvHandle> kv_source;
  bool kv_released = false;
  // Mooncake/SGLang decode leg waiting for its prefill leg.
  bool pair_done = false;
  bool pair_abandoned = false;
  // Prefill leg: keys under which its held KV is published.
  std::vector<std::string> publish_keys;
  std::string hold_id;

  void Notify() { notify.cancel(); }
  void ReleaseSource() {
    if (kv_source && !kv_released) {
      kv_released = true;
      kv_source->holder->ReleaseHeldKv(kv_source->hold_id);
    }
  }
};

namespace {

std::string_view Target(const beast::http::request<http::string_body>& req) {
  std::string_view t = req.target();
  const size_t q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

bool GetBool(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::optional<std::string> GetString(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_int64() || v->is_uint64()) return json::serialize(*v);
  return std::nullopt;
}

}  // namespace

Instance::Instance(net::io_context& io, InstanceOptions options, KvFabric& fabric, PeerLookup peers)
    : options_(std::move(options)),
      fabric_(fabric),
      peers_(std::move(peers)),
      strand_(net::make_strand(io)),
      acceptor_(strand_),
      wake_timer_(strand_),
      step_timer_(strand_),
      hang_timer_(strand_, std::chrono::steady_clock::time_point::max()),
      engine_(EngineConfig::FromProfile(options_.profile)),
      rng_(options_.seed * 0x9E3779B97F4A7C15ull + options_.index + 1),
      responses_(options_.responses_store_capacity),
      faults_(options_.faults) {
  engine_id_ = absl::StrFormat("kvroute-sim-%d-%016x", options_.index, rng_());
  engine_.set_slowdown(options_.faults.slowdown);
}

Instance::~Instance() { fabric_.ForgetHolder(this); }

absl::Status Instance::Listen() {
  boost::system::error_code ec;
  const net::ip::address addr = net::ip::make_address(options_.host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad bind address ", options_.host));
  const tcp::endpoint ep(addr, options_.port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
  }
  port_ = acceptor_.local_endpoint().port();
  if (options_.kv_events && !kv_events_) {
    absl::StatusOr<std::unique_ptr<KvEventPublisher>> pub =
        KvEventPublisher::Create(*options_.kv_events);
    if (!pub.ok()) return pub.status();
    kv_events_ = *std::move(pub);
    engine_.EnableKvEvents(true);
  }
  return absl::OkStatus();
}

std::string Instance::kv_events_endpoint() const {
  return kv_events_ ? kv_events_->endpoint() : std::string();
}

std::string Instance::kv_events_replay_endpoint() const {
  return kv_events_ ? kv_events_->replay_endpoint() : std::string();
}

void Instance::PublishKvEvents() {
  if (!kv_events_) return;
  std::vector<KvCacheEvent> events = engine_.TakeKvEvents();
  if (events.empty()) return;
  const std::chrono::duration<double> unix_now =
      std::chrono::system_clock::now().time_since_epoch();
  kv_events_->Publish(unix_now.count(), std::move(events));
  absl::MutexLock lock(&mu_);
  gauges_.num_cached_blocks = engine_.blocks().num_cached();
  gauges_.kv_event_batches = kv_events_->accepted();
}

void Instance::Start() {
  wall_origin_ = std::chrono::steady_clock::now();
  net::dispatch(strand_, [this] {
    accepting_ = true;
    net::co_spawn(strand_, AcceptLoop(), net::detached);
    net::co_spawn(strand_, EngineLoop(), net::detached);
    ApplyFaultEffects();
  });
}

// Wakes every request waiting on the engine or on a KV handoff pairing, aborted.
void Instance::AbortWaitingRequests() {
  for (auto& [handle, p] : pendings_) {
    p->aborted = true;
    p->Notify();
  }
  for (Pending* p : pairing_) {
    p->aborted = true;
    p->Notify();
  }
}

void Instance::Stop() {
  net::dispatch(strand_, [this] {
    if (stopping_) return;
    stopping_ = true;
    boost::system::error_code ec;
    acceptor_.close(ec);
    wake_timer_.cancel();
    step_timer_.cancel();
    hang_timer_.cancel();
    for (Stream* s : streams_) s->socket().close(ec);
    AbortWaitingRequests();
  });
}

InstanceGauges Instance::gauges() const {
  absl::MutexLock lock(&mu_);
  return gauges_;
}

void Instance::ReleaseHeldKv(const std::string& hold_id) {
  fabric_.EndPull(this);  // only a claimed hold is released by its puller
  net::post(strand_, [this, hold_id] { engine_.ReleaseHold(hold_id); });
}

double Instance::VirtualNow() const {
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_origin_;
  return wall.count() / options_.time_scale;
}

std::chrono::steady_clock::time_point Instance::WallOf(double virtual_time) const {
  return wall_origin_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(virtual_time * options_.time_scale));
}

void Instance::Wake() {
  if (idle_) wake_timer_.cancel();
}

void Instance::UpdateGauges(double lag_s) {
  absl::MutexLock lock(&mu_);
  gauges_.scheduler_lag_s = lag_s;
  gauges_.max_scheduler_lag_s = std::max(gauges_.max_scheduler_lag_s, lag_s);
  gauges_.gpu_busy_fraction = engine_.BusyFraction();
  gauges_.kv_usage = engine_.KvUsage();
  gauges_.num_running = engine_.num_running();
  gauges_.num_waiting = engine_.num_waiting();
  gauges_.steps = engine_.counters().steps;
  gauges_.virtual_now = engine_.now();
}

awaitable<void> Instance::EngineLoop() {
  const bool real_time = options_.time_scale > 0;
  while (!stopping_) {
    if (engine_.HasRunnableWork()) {
      // While busy the virtual clock is never pulled forward to the wall clock: if steps
      // take longer to compute than they model, the lag shows and grows here.
      double lag = 0;
      if (real_time) {
        const std::chrono::duration<double> behind =
            std::chrono::steady_clock::now() - WallOf(engine_.now());
        lag = std::max(0.0, behind.count());
      }
      const StepResult step = engine_.Step();
      if (real_time) {
        step_timer_.expires_at(WallOf(engine_.now()));
        co_await step_timer_.async_wait(kNoThrow);
      } else {
        co_await net::post(strand_, use_awaitable);  // let sessions run between steps
      }
      // As vLLM's scheduler, when the step's output is processed: before its tokens go out.
      PublishKvEvents();
      if (stopping_) break;
      Deliver(step);
      UpdateGauges(lag);
      continue;
    }
    UpdateGauges(0);
    const std::optional<double> next = engine_.NextTimedEvent();
    if (next && !real_time) {
      engine_.AdvanceTo(*next);
      continue;
    }
    idle_ = true;
    wake_timer_.expires_at(next ? WallOf(*next) : std::chrono::steady_clock::time_point::max());
    co_await wake_timer_.async_wait(kNoThrow);
    idle_ = false;
    // Idle time passed in real time.
    if (real_time) engine_.AdvanceTo(VirtualNow());
  }
}

void Instance::Deliver(const StepResult& step) {
  for (RequestHandle h : step.transfers_done) {
    auto it = pendings_.find(h);
    if (it != pendings_.end()) it->second->ReleaseSource();
  }
  for (const TokenEvent& ev : step.tokens) {
    auto it = pendings_.find(ev.handle);
    if (it == pendings_.end()) continue;
    Pending& p = *it->second;
    p.events.push_back(ev);
    if (ev.finish != FinishReason::kNone) {
      if (const RequestInfo* info = engine_.Info(ev.handle)) p.info = *info;
      engine_.Forget(ev.handle);
      p.done = true;
      if (!p.info.held_blocks.empty()) {
        for (const std::string& key : p.publish_keys) {
          fabric_.Publish(key, KvHandle{this, p.hold_id});
        }
      }
    }
    p.Notify();
  }
}

awaitable<void> Instance::AcceptLoop() {
  while (!stopping_ && accepting_) {
    auto [ec, socket] = co_await acceptor_.async_accept(kNoThrow);
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
      continue;
    }
    if (stopping_) co_return;
    net::co_spawn(strand_, Session(std::move(socket)), net::detached);
  }
}

awaitable<void> Instance::Session(tcp::socket socket) {
  Stream stream(std::move(socket));
  streams_.insert(&stream);
  beast::flat_buffer buffer;
  while (!stopping_) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options_.max_body_bytes);
    stream.expires_after(options_.keep_alive_timeout);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kNoThrow);
    if (ec) {
      if (ec == http::error::body_limit) {
        const Request dummy;
        const ApiError too_large = MakeApiError(413, "request body too large");
        co_await ReplyError(stream, dummy, too_large);
      }
      break;
    }
    stream.expires_never();
    Request req = parser.release();
    const bool keep_alive = co_await Handle(stream, req);
    if (!keep_alive) break;
  }
  streams_.erase(&stream);
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.socket().close(ec);
}

awaitable<bool> Instance::Reply(Stream& stream, const Request& req, http::status status,
                                const std::string& body, const std::string& content_type) {
  http::response<http::string_body> res{status, req.version() ? req.version() : 11};
  res.set(http::field::server, "kvroute-sim");
  if (!body.empty() || status != http::status::ok) res.set(http::field::content_type, content_type);
  if (auto id = req.find("x-request-id"); id != req.end()) res.set("x-request-id", id->value());
  res.keep_alive(req.keep_alive());
  res.body() = body;
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(stream, res, kNoThrow);
  co_return !ec && req.keep_alive();
}

awaitable<bool> Instance::ReplyError(Stream& stream, const Request& req, const ApiError& error,
                                     const ChatOutputFormat* format) {
  const std::string body = format != nullptr ? format->ErrorBody(error) : ErrorJson(error);
  const std::string content_type = "application/json";
  co_return co_await Reply(stream, req, static_cast<http::status>(error.status), body,
                           content_type);
}

awaitable<int64_t> Instance::CachedPrefixTokens(
    std::shared_ptr<const std::vector<int32_t>> tokens) {
  // GCC 12 mishandles temporaries (a lambda here) inside co_await expressions: the coroutine
  // run on the strand is a named local taking its argument by value.
  awaitable<int64_t> count = CountCachedPrefix(std::move(tokens));
  const int64_t cached = co_await net::co_spawn(strand_, std::move(count), use_awaitable);
  co_return cached;
}

awaitable<int64_t> Instance::CountCachedPrefix(std::shared_ptr<const std::vector<int32_t>> tokens) {
  const int block = engine_.config().block_size;
  const std::vector<BlockHash> hashes = HashFullBlocks(*tokens, block);
  const int64_t max_hit = std::min<int64_t>(static_cast<int64_t>(hashes.size()),
                                            (static_cast<int64_t>(tokens->size()) - 1) / block);
  if (max_hit <= 0) co_return 0;
  co_return engine_.blocks().CountCachedPrefix(
      std::span<const BlockHash>(hashes.data(), static_cast<size_t>(max_hit))) *
      block;
}

awaitable<bool> Instance::Handle(Stream& stream, Request& req) {
  // Every branch fills status/body and falls through to one Reply: GCC 12 mishandles
  // temporaries inside co_await expressions, so co_await only sees named locals.
  const std::string_view path = Target(req);
  const http::verb method = req.method();
  http::status status = http::status::ok;
  std::string body;
  std::string content_type = "application/json";
  const std::string kMethodNotAllowed = R"({"detail":"Method Not Allowed"})";
  auto allowed = [&](std::initializer_list<http::verb> verbs) {
    for (http::verb v : verbs) {
      if (method == v) return true;
    }
    status = http::status::method_not_allowed;
    body = kMethodNotAllowed;
    return false;
  };
  if (path == "/sim/faults") {
    if (allowed({http::verb::get, http::verb::post})) {
      int code = 200;
      HandleFaultsRequest(req, &body, &code);
      status = static_cast<http::status>(code);
    }
    co_return co_await Reply(stream, req, status, body, content_type);
  }
  if (path == kOracleCachedTokensPath) {
    if (allowed({http::verb::post})) {
      awaitable<OracleAnswer> ask = AnswerCachedTokens(req.body(), this);
      OracleAnswer answer = co_await std::move(ask);
      status = static_cast<http::status>(answer.status);
      body = std::move(answer.body);
    }
    co_return co_await Reply(stream, req, status, body, content_type);
  }
  if (faults().hang) {
    // Read, never answered; the timer is cancelled when the fault is cleared or on Stop.
    {
      absl::MutexLock lock(&mu_);
      ++gauges_.num_hung;
    }
    co_await hang_timer_.async_wait(kNoThrow);
    {
      absl::MutexLock lock(&mu_);
      --gauges_.num_hung;
    }
    co_return false;
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (allowed({http::verb::post})) {
      const Endpoint endpoint =
          path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions;
      co_return co_await HandleCompletion(stream, req, endpoint);
    }
  } else if (path == "/v1/messages") {
    if (allowed({http::verb::post})) co_return co_await HandleMessages(stream, req);
  } else if (path == "/v1/responses") {
    if (allowed({http::verb::post})) co_return co_await HandleResponses(stream, req);
  } else if (path.starts_with("/v1/responses/")) {
    if (allowed({http::verb::get})) {
      const std::string_view id = path.substr(std::string_view("/v1/responses/").size());
      if (const StoredResponse* stored = responses_.Find(id)) {
        body = json::serialize(stored->response);
      } else {
        const ApiError error = ResponseNotFound(id);
        status = static_cast<http::status>(error.status);
        body = ErrorJson(error);
      }
    }
  } else if (path == "/health") {
    if (allowed({http::verb::get})) {
      if (faults().unhealthy) status = http::status::service_unavailable;
    }
  } else if (path == "/reset_prefix_cache") {
    // vLLM answers 200 whether or not the engine could reset (it refuses while requests hold
    // blocks, and logs it).
    if (allowed({http::verb::post})) {
      if (!engine_.ResetPrefixCache()) {
        Log()->warn("instance {}: prefix cache not reset: requests hold blocks", options_.index);
      }
      PublishKvEvents();
    }
  } else if (path == "/version") {
    if (allowed({http::verb::get})) body = R"({"version":"kvroute-sim"})";
  } else if (path == "/v1/models") {
    if (allowed({http::verb::get})) body = ModelsJson();
  } else if (path == "/metrics") {
    if (allowed({http::verb::get})) {
      body = RenderMetrics();
      content_type = "text/plain; version=0.0.4; charset=utf-8";
    }
  } else if (path == "/query") {
    // Mooncake bootstrap: {"<dp_rank>": {"engine_id", "worker_addr"}}.
    if (allowed({http::verb::get})) {
      json::object rank;
      rank["engine_id"] = engine_id_;
      rank["worker_addr"] = absl::StrCat(options_.host, ":", port_);
      json::object o;
      o["0"] = std::move(rank);
      body = json::serialize(o);
    }
  } else if (path == "/tokenize") {
    if (allowed({http::verb::post})) {
      boost::system::error_code ec;
      json::value v = json::parse(req.body(), ec);
      const bool chat = !ec && v.is_object() && v.as_object().contains("messages");
      CompletionRequest parsed;
      if (auto err = ParseCompletionRequest(
              req.body(), chat ? Endpoint::kChatCompletions : Endpoint::kCompletions, &parsed)) {
        status = static_cast<http::status>(err->status);
        body = ErrorJson(*err);
      } else {
        const std::vector<int32_t> tokens =
            parsed.prompt_is_ids ? parsed.prompt_ids : StandInTokenizer::Encode(parsed.prompt_text);
        json::object o;
        o["count"] = tokens.size();
        o["max_model_len"] = options_.profile.max_model_len;
        json::array arr;
        arr.reserve(tokens.size());
        for (int32_t t : tokens) arr.push_back(t);
        o["tokens"] = std::move(arr);
        o["token_strs"] = nullptr;
        body = json::serialize(o);
      }
    }
  } else {
    status = http::status::not_found;
    body = R"({"detail":"Not Found"})";
  }
  co_return co_await Reply(stream, req, status, body, content_type);
}

std::optional<ApiError> Instance::ValidateCompletion(const Request& req, Endpoint endpoint,
                                                     CompletionRequest* parsed,
                                                     std::vector<int32_t>* tokens,
                                                     int64_t* max_tokens) {
  if (auto err = ParseCompletionRequest(req.body(), endpoint, parsed)) return err;
  const Profile& profile = options_.profile;
  if (parsed->model && *parsed->model != profile.model_name) {
    return MakeApiError(404, absl::StrCat("The model `", *parsed->model, "` does not exist."),
                        "NotFoundError", "model");
  }
  *tokens = parsed->prompt_is_ids ? std::move(parsed->prompt_ids)
                                  : StandInTokenizer::Encode(parsed->prompt_text);
  const int64_t prompt_len = static_cast<int64_t>(tokens->size());
  *max_tokens = parsed->max_tokens.value_or(profile.max_model_len - prompt_len);
  if (prompt_len + *max_tokens > profile.max_model_len || *max_tokens < 1) {
    return MakeApiError(
        400,
        absl::StrCat("This model's maximum context length is ", profile.max_model_len,
                     " tokens. However, you requested ",
                     prompt_len + std::max<int64_t>(*max_tokens, 1), " tokens (", prompt_len,
                     " in the messages, ", *max_tokens,
                     " in the completion). Please reduce the length of the messages or "
                     "completion."),
        "BadRequestError", "input_tokens");
  }
  // vLLM's processor refuses a priority the scheduler would ignore.
  if (parsed->priority != 0 &&
      engine_.config().scheduling_policy != SchedulingPolicy::kPriority) {
    return MakeApiError(400, absl::StrCat("Got priority ", parsed->priority,
                                          " but Priority scheduling is not enabled."));
  }
  if (absl::Status s = engine_.Validate(prompt_len, *max_tokens); !s.ok()) {
    return MakeApiError(400, std::string(s.message()));
  }
  const double error_rate = faults().error_rate;
  if (error_rate > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < error_rate) {
    return MakeApiError(500, "kvroute-sim: injected internal server error", "InternalServerError");
  }
  return std::nullopt;
}

awaitable<bool> Instance::HandleCompletion(Stream& stream, Request& req, Endpoint endpoint,
                                           ChatOutputFormat* format) {
  CompletionRequest parsed;
  std::vector<int32_t> tokens;
  int64_t max_tokens = 0;
  const std::optional<ApiError> error =
      ValidateCompletion(req, endpoint, &parsed, &tokens, &max_tokens);
  if (error) co_return co_await ReplyError(stream, req, *error, format);
  const Profile& profile = options_.profile;
  const Faults f = faults();

  // Request id: X-Request-Id when present (as vLLM), else random.
  std::string base_id;
  if (auto it = req.find("x-request-id"); it != req.end() && !it->value().empty()) {
    base_id = std::string(it->value());
  } else {
    base_id = absl::StrFormat("%016x%016x", rng_(), rng_());
  }
  const std::string response_id = ResponseId(endpoint, base_id);
  const int64_t created = UnixSeconds();

  auto pending = std::make_shared<Pending>(strand_);
  RequestSpec spec;
  spec.request_id = absl::StrCat(response_id, "-", next_request_seq_++);
  spec.max_tokens = static_cast<int>(max_tokens);
  spec.min_tokens = static_cast<int>(parsed.min_tokens);
  spec.ignore_eos = parsed.ignore_eos;
  spec.priority = parsed.priority;
  spec.output_seed = XXH3_64bits_withSeed(base_id.data(), base_id.size(), options_.seed);
  const uint64_t output_seed = spec.output_seed;

  // P/D roles.
  const json::object* kv = parsed.kv_transfer_params ? &*parsed.kv_transfer_params : nullptr;
  std::optional<std::string> transfer_id = kv ? GetString(*kv, "transfer_id") : std::nullopt;
  bool prefill_leg = kv != nullptr && GetBool(*kv, "do_remote_decode");
  std::optional<std::string> wait_key;
  std::optional<std::string> claim_key;
  if (kv != nullptr && GetBool(*kv, "do_remote_prefill")) {
    if (transfer_id) {
      wait_key = absl::StrCat("mooncake:", *transfer_id);
    } else if (auto eid = GetString(*kv, "remote_engine_id"),
               rid = GetString(*kv, "remote_request_id");
               eid && rid) {
      claim_key = absl::StrCat("nixl:", *eid, ":", *rid);
    }
  } else if (parsed.bootstrap_room) {
    const std::string key = absl::StrCat("sglang:", *parsed.bootstrap_room);
    if (parsed.bootstrap_port && *parsed.bootstrap_port == port_) {
      prefill_leg = true;
      pending->publish_keys.push_back(key);
    } else {
      wait_key = key;
    }
  }
  if (prefill_leg) {
    spec.hold_for_remote_decode = true;
    spec.max_tokens = 1;
    pending->hold_id = spec.request_id;
    if (transfer_id) {
      pending->publish_keys.push_back(absl::StrCat("mooncake:", *transfer_id));
    } else if (kv != nullptr) {
      pending->publish_keys.push_back(absl::StrCat("nixl:", engine_id_, ":", spec.request_id));
    }
  }
  if (claim_key) {
    pending->kv_source = fabric_.Claim(*claim_key);
    if (!pending->kv_source) {
      Log()->warn("instance {}: request {}: no KV held under {}, prefilling locally",
                  options_.index, base_id, *claim_key);
    }
  }
  // A decode leg whose prefill may still be running (Mooncake, SGLang) is admitted at once and
  // holds its blocks while it waits, as vLLM allocates them on arrival.
  spec.pull_remote_kv = pending->kv_source.has_value() || wait_key.has_value();
  spec.await_remote_kv = wait_key.has_value();
  if (pending->kv_source) spec.source_pulls = pending->kv_source->source_pulls;
  const int prompt_tokens = static_cast<int>(tokens.size());
  spec.prompt = std::move(tokens);

  // An idle engine's clock catches up with the wall clock before the arrival is stamped.
  if (options_.time_scale > 0 && idle_) engine_.AdvanceTo(VirtualNow());
  const RequestHandle handle = engine_.Submit(std::move(spec));
  pendings_[handle] = pending;
  Wake();

  // Cleans up whatever way the session leaves.
  struct Cleanup {
    Instance* self;
    RequestHandle handle;
    std::shared_ptr<Pending> p;
    ~Cleanup() {
      if (!p->done) self->engine_.Abort(handle);
      p->ReleaseSource();
      self->pendings_.erase(handle);
    }
  } cleanup{this, handle, pending};

  if (wait_key) {
    std::weak_ptr<Pending> weak = pending;
    const uint64_t ticket = fabric_.ClaimOrWait(*wait_key, [this, weak](KvHandle h) {
      net::post(strand_, [weak, h] {
        std::shared_ptr<Pending> p = weak.lock();
        if (!p || p->pair_abandoned || p->aborted) {
          h.holder->ReleaseHeldKv(h.hold_id);
          return;
        }
        p->kv_source = h;
        p->pair_done = true;
        p->Notify();
      });
    });
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(profile.pd_pair_timeout_s));
    pairing_.insert(pending.get());
    while (!pending->pair_done && !pending->aborted && !stopping_ &&
           std::chrono::steady_clock::now() < deadline) {
      pending->notify.expires_at(deadline);
      co_await pending->notify.async_wait(kNoThrow);
    }
    pairing_.erase(pending.get());
    if (stopping_) pending->aborted = true;
    if (!pending->pair_done) {
      pending->pair_abandoned = true;
      fabric_.CancelWait(*wait_key, ticket);
      if (pending->aborted) co_return false;
      Log()->warn(
          "instance {}: request {}: no prefill leg for {} within {} s, prefilling "
          "locally",
          options_.index, base_id, *wait_key, profile.pd_pair_timeout_s);
    }
    if (options_.time_scale > 0 && idle_) engine_.AdvanceTo(VirtualNow());
    if (pending->pair_done) {
      engine_.StartPull(handle, pending->kv_source->source_pulls);
    } else {
      engine_.CancelPull(handle);
    }
    Wake();
  }

  const std::string& model = profile.model_name;
  const int die_after = f.die_after_events;
  if (!parsed.stream) {
    while (!pending->done && !pending->aborted) {
      pending->notify.expires_at(std::chrono::steady_clock::time_point::max());
      co_await pending->notify.async_wait(kNoThrow);
    }
    if (pending->aborted || die_after >= 0) co_return false;  // connection dropped, no answer
    std::string text;
    for (const TokenEvent& ev : pending->events) {
      if (ev.token != kNoToken) text += StandInTokenizer::GeneratedPiece(output_seed, ev.index);
    }
    const RequestInfo& info = pending->info;
    const Usage usage{.prompt_tokens = info.prompt_tokens,
                      .completion_tokens = info.completion_tokens,
                      .cached_tokens = info.cached_tokens,
                      .always_report_cached_tokens = options_.profile.always_report_cached_tokens};
    std::optional<json::object> kv_params;
    if (prefill_leg && !info.held_blocks.empty()) {
      json::object p;
      p["do_remote_prefill"] = true;
      p["do_remote_decode"] = false;
      json::array blocks;
      for (BlockId b : info.held_blocks) blocks.push_back(b);
      p["remote_block_ids"] = std::move(blocks);
      p["remote_engine_id"] = engine_id_;
      p["remote_request_id"] = pending->hold_id;
      p["remote_host"] = options_.host;
      p["remote_port"] = port_;
      p["tp_size"] = profile.deployment.tensor_parallel;
      if (transfer_id) p["transfer_id"] = *transfer_id;
      kv_params = std::move(p);
    }
    const std::string body =
        format != nullptr
            ? format->FullBody(ChatOutcome{.id = response_id,
                                           .created = created,
                                           .model = model,
                                           .text = text,
                                           .finish = std::string(FinishReasonName(info.finish)),
                                           .usage = usage,
                                           .kv_transfer_params = kv_params})
            : FullResponseJson(endpoint, response_id, created, model, text,
                               FinishReasonName(info.finish), usage, kv_params);
    const std::string content_type = "application/json";
    co_return co_await Reply(stream, req, http::status::ok, body, content_type);
  }

  http::response<http::empty_body> res{http::status::ok, req.version() ? req.version() : 11};
  res.set(http::field::server, "kvroute-sim");
  res.set(http::field::content_type, "text/event-stream; charset=utf-8");
  if (auto id = req.find("x-request-id"); id != req.end()) res.set("x-request-id", id->value());
  res.keep_alive(req.keep_alive());
  res.chunked(true);
  http::response_serializer<http::empty_body> serializer{res};
  if (auto [ec, n] = co_await http::async_write_header(stream, serializer, kNoThrow); ec) {
    co_return false;
  }
  int events_sent = 0;
  bool first = true;
  for (;;) {
    while (pending->events.empty() && !pending->done && !pending->aborted) {
      pending->notify.expires_at(std::chrono::steady_clock::time_point::max());
      co_await pending->notify.async_wait(kNoThrow);
    }
    if (pending->aborted) co_return false;
    std::string batch;
    bool die = die_after == 0;
    while (!die && !pending->events.empty()) {
      const TokenEvent ev = pending->events.front();
      pending->events.pop_front();
      if (first && (format != nullptr || endpoint == Endpoint::kChatCompletions)) {
        batch += format != nullptr
                     ? format->StreamStart(response_id, created, model, prompt_tokens)
                     : kvroute::wire::SseData(
                           StreamChunkJson(endpoint, response_id, created, model, "", "", true));
        die = die_after >= 0 && ++events_sent >= die_after;
        if (die) break;
      }
      first = false;
      const std::string_view piece = ev.token == kNoToken
                                         ? std::string_view()
                                         : StandInTokenizer::GeneratedPiece(output_seed, ev.index);
      batch += format != nullptr
                   ? format->StreamText(piece)
                   : kvroute::wire::SseData(StreamChunkJson(endpoint, response_id, created, model,
                                                            piece, FinishReasonName(ev.finish),
                                                            false));
      die = die_after >= 0 && ++events_sent >= die_after;
    }
    const bool finished = !die && pending->done && pending->events.empty();
    if (finished && format != nullptr) {
      const RequestInfo& info = pending->info;
      batch += format->StreamEnd(FinishReasonName(info.finish),
                                 Usage{.prompt_tokens = info.prompt_tokens,
                                       .completion_tokens = info.completion_tokens,
                                       .cached_tokens = info.cached_tokens});
    } else if (finished) {
      if (parsed.include_usage) {
        const RequestInfo& info = pending->info;
        batch += kvroute::wire::SseData(UsageChunkJson(
            endpoint, response_id, created, model,
            Usage{.prompt_tokens = info.prompt_tokens,
                  .completion_tokens = info.completion_tokens,
                  .cached_tokens = info.cached_tokens,
                  .always_report_cached_tokens = options_.profile.always_report_cached_tokens}));
      }
      batch += kvroute::wire::kSseDone;
    }
    if (!batch.empty()) {
      const auto chunk = http::make_chunk(net::buffer(batch));
      auto [ec, n] = co_await net::async_write(stream, chunk, kNoThrow);
      if (ec) co_return false;
    }
    if (die) {
      // Injected fault: the connection drops mid-stream, without the terminating chunk.
      boost::system::error_code ec;
      stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      co_return false;
    }
    if (finished) {
      const auto last = http::make_chunk_last();
      auto [ec, n] = co_await net::async_write(stream, last, kNoThrow);
      co_return !ec && req.keep_alive();
    }
  }
}

}  // namespace sim
