// sim::Instance's life cycle: the listener and its sessions, the engine loop that maps the
// virtual clock to wall time and hands each step's tokens to the waiting requests, the gauges,
// and the one place responses are written whole (Reply). What each endpoint does is in
// instance_routes.cc and the files it names.
#include "sim/instance.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "sim/instance_internal.h"

namespace sim {


namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using internal::kNoThrow;

namespace {

EngineConfig EngineConfigOf(const InstanceOptions& options) {
  EngineConfig config = EngineConfig::FromProfile(options.profile);
  config.kv_pool = options.kv_pool;
  return config;
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
      engine_(EngineConfigOf(options_)),
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
  const std::chrono::duration<double> unix_now =
      std::chrono::system_clock::now().time_since_epoch();
  // The pool's puts land in this instance's steps: what they recorded goes out now.
  if (options_.kv_pool != nullptr) options_.kv_pool->PublishKvEvents(unix_now.count());
  if (!kv_events_) return;
  std::vector<KvCacheEvent> events = engine_.TakeKvEvents();
  if (events.empty()) return;
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
  co_return engine_.CachedPromptTokens(*tokens);
}

}  // namespace sim
