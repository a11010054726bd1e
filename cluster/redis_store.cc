#include "cluster/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cluster/redis_connection.h"
#include "cluster/redis_scripts.h"
#include "cluster/store_format.h"

namespace kvroute::cluster {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("cluster");
    return l ? l : spdlog::default_logger()->clone("cluster");
  }();
  return logger;
}

// Field/value pairs of an HGETALL reply.
template <typename Fn>
void ForEachField(const redisReply* r, Fn fn) {
  if (r->type != REDIS_REPLY_ARRAY) return;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    const redisReply* k = r->element[i];
    const redisReply* v = r->element[i + 1];
    if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING) {
      fn(ReplyText(k), absl::string_view(v->str, v->len));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(const ClusterOptions& options) {
  if (absl::Status st = ValidateClusterOptions(options); !st.ok()) return st;
  absl::StatusOr<StoreAddress> address = ParseStoreUrl(options.store);
  if (!address.ok()) return address.status();
  if (address->none) {
    return absl::InvalidArgumentError("cluster.store: 'none' names no store to connect to");
  }
  std::unique_ptr<RedisStore> store(new RedisStore(options, *std::move(address)));
  // The logger (and spdlog's registry, on first use) is made before the I/O
  // thread that logs through it, not raced for by it.
  Log();
  store->io_thread_ = std::thread([s = store.get()] { s->RunIoThread(); });
  return store;
}

RedisStore::RedisStore(ClusterOptions options, StoreAddress address)
    : options_(std::move(options)),
      address_(std::move(address)),
      lease_(absl::Seconds(options_.lease_s)),
      sync_interval_(absl::Seconds(options_.sync_interval_s)),
      op_timeout_(absl::Seconds(options_.op_timeout_s)),
      backoff_(sync_interval_),
      view_(std::make_shared<PeerView>()) {}

RedisStore::~RedisStore() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  Wake();
  if (io_thread_.joinable()) io_thread_.join();
  std::vector<redisContext*> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_admission_);
  }
  for (redisContext* c : idle) redisFree(c);
}

std::string RedisStore::Key(absl::string_view kind, absl::string_view name) const {
  return absl::StrCat(options_.key_prefix, ":", kind, ":", name);
}

void RedisStore::PublishLoad(LoadByInstance load) {
  absl::MutexLock lock(&mu_);
  if (load.size() > options_.max_pending_writes) {
    stats_.writes_dropped += load.size() - options_.max_pending_writes;
    while (load.size() > options_.max_pending_writes) load.erase(load.begin());
  }
  load_ = std::move(load);
  load_dirty_ = true;
}

void RedisStore::PublishRates(RateByInstance rates) {
  absl::MutexLock lock(&mu_);
  if (rates.size() > options_.max_pending_writes) {
    stats_.writes_dropped += rates.size() - options_.max_pending_writes;
    while (rates.size() > options_.max_pending_writes) rates.erase(rates.begin());
  }
  rates_ = std::move(rates);
  rates_dirty_ = true;
}

void RedisStore::PublishHome(std::string session_id, std::string instance) {
  absl::MutexLock lock(&mu_);
  if (auto it = pending_homes_.find(session_id); it != pending_homes_.end()) {
    it->second = std::move(instance);
    return;
  }
  if (pending_homes_.size() + pending_releases_.size() >= options_.max_pending_writes) {
    ++stats_.writes_dropped;
    return;
  }
  pending_homes_.emplace(std::move(session_id), std::move(instance));
}

void RedisStore::Release(std::string instance, std::string reservation_id) {
  absl::MutexLock lock(&mu_);
  std::pair<std::string, std::string> key(std::move(instance), std::move(reservation_id));
  const auto held = held_.find(key);
  if (held == held_.end()) return;  // never admitted here, or released already
  const uint64_t serial = held->second;
  held_.erase(held);
  if (pending_homes_.size() + pending_releases_.size() >= options_.max_pending_writes) {
    ++stats_.writes_dropped;
    return;
  }
  pending_releases_[std::move(key)] = serial;
}

std::string RedisStore::PinStreamKey() const { return absl::StrCat(options_.key_prefix, ":pins"); }

void RedisStore::PublishPins(std::vector<RequestPin> pinned, std::vector<uint64_t> unpinned) {
  absl::MutexLock lock(&mu_);
  for (RequestPin& p : pinned) {
    if (pending_pins_.size() + pending_unpins_.size() >= options_.max_pending_writes) {
      ++stats_.writes_dropped;
      continue;
    }
    pending_pins_.push_back(std::move(p));
  }
  for (uint64_t id : unpinned) {
    // A pin not written yet is withdrawn instead: the peers never see it.
    auto it = std::find_if(pending_pins_.begin(), pending_pins_.end(),
                           [id](const RequestPin& p) { return p.id == id; });
    if (it != pending_pins_.end()) {
      pending_pins_.erase(it);
      continue;
    }
    if (pending_pins_.size() + pending_unpins_.size() >= options_.max_pending_writes) {
      ++stats_.writes_dropped;
      continue;
    }
    pending_unpins_.push_back(id);
  }
}

PeerPinChanges RedisStore::TakePeerPins() {
  absl::MutexLock lock(&mu_);
  PeerPinChanges out = std::exchange(peer_pins_, {});
  out.view = view_;
  return out;
}

std::shared_ptr<const PeerView> RedisStore::View() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

bool RedisStore::connected() const { return connected_.load(std::memory_order_acquire); }

ClusterStoreStats RedisStore::stats() const {
  absl::MutexLock lock(&mu_);
  ClusterStoreStats s = stats_;
  s.connected = connected();
  return s;
}

bool RedisStore::WaitUntil(absl::FunctionRef<bool()> done, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  auto check = [&] {
    absl::MutexLock state(&mu_);
    return done();
  };
  if (deadline == absl::InfiniteFuture()) {
    wake_.wait(lock, check);
    return true;
  }
  return wake_.wait_for(lock, absl::ToChronoNanoseconds(deadline - absl::Now()), check);
}

void RedisStore::Wake() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  wake_.notify_all();
}

absl::Status RedisStore::SyncNow() {
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    ticket = ++cycles_requested_;
  }
  Wake();
  WaitUntil(
      [&] {
        mu_.AssertHeld();
        return cycles_done_ >= ticket;
      },
      absl::InfiniteFuture());
  absl::MutexLock lock(&mu_);
  return last_cycle_;
}

void RedisStore::RunIoThread() {
  absl::Time next_cycle = absl::Now();
  while (true) {
    bool forced = false;
    uint64_t serving = 0;
    WaitUntil(
        [this] {
          mu_.AssertHeld();
          return stop_ || cycles_requested_ > cycles_done_;
        },
        options_.periodic ? next_cycle : absl::InfiniteFuture());
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      forced = cycles_requested_ > cycles_done_;
      serving = cycles_requested_;
    }
    const absl::Status st = RunCycle(forced);
    next_cycle = absl::Now() + sync_interval_;
    if (forced) {
      {
        absl::MutexLock lock(&mu_);
        cycles_done_ = serving;
        last_cycle_ = st;
      }
      Wake();
    }
  }
  Leave();
  {
    absl::MutexLock lock(&mu_);
    cycles_done_ = cycles_requested_;
    last_cycle_ = absl::CancelledError("cluster store: stopped");
  }
  Wake();
}

absl::Status RedisStore::RunCycle(bool forced) {
  if (context_ == nullptr) {
    if (!forced && absl::Now() < next_connect_) {
      return absl::UnavailableError("cluster store: waiting to reconnect");
    }
    if (absl::Status st = Connect(); !st.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++stats_.sync_failures;
      }
      Disconnect(std::string(st.message()));
      return st;
    }
  }
  WriteBatch batch = TakeWrites(forced);
  absl::Status flushed = Flush(batch);
  if (!flushed.ok()) {
    ReturnWrites(std::move(batch));
    absl::MutexLock lock(&mu_);
    ++stats_.sync_failures;
  }
  if (context_ == nullptr) return flushed;  // the connection broke
  absl::Status pulled = Pull();
  if (!pulled.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.sync_failures;
  }
  if (flushed.ok() && pulled.ok()) last_error_reply_.clear();
  return flushed.ok() ? pulled : flushed;
}

absl::Status RedisStore::Connect() {
  absl::StatusOr<redisContext*> c = OpenConnection(address_, op_timeout_);
  if (!c.ok()) return c.status();
  std::string shas[3];
  const char* scripts[3] = {kReserveScript, kReleaseScript, kPullScript};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Reply> r = Command(*c, {"SCRIPT", "LOAD", scripts[i]});
    if (!r.ok() || (*r)->type != REDIS_REPLY_STRING) {
      const std::string why = r.ok() ? ReplyText(r->get()) : std::string(r.status().message());
      redisFree(*c);
      return absl::UnavailableError(absl::StrCat("cluster store: SCRIPT LOAD: ", why));
    }
    shas[i] = ReplyText(r->get());
  }
  // Pins are read from the stream's end on: changes from before this
  // connection are not replayed (the caller is told to reset).
  absl::StatusOr<Reply> last = Command(*c, {"XREVRANGE", PinStreamKey(), "+", "-", "COUNT", "1"});
  if (!last.ok()) {
    redisFree(*c);
    return last.status();
  }
  pins_read_through_ = "0-0";
  if (const redisReply* l = last->get(); l->type == REDIS_REPLY_ARRAY && l->elements > 0 &&
                                         l->element[0]->type == REDIS_REPLY_ARRAY &&
                                         l->element[0]->elements > 0) {
    pins_read_through_ = ReplyText(l->element[0]->element[0]);
  }
  context_ = *c;
  next_lease_ = absl::InfinitePast();  // renew at once
  backoff_ = sync_interval_;
  const bool rejoined = ever_connected_;
  ever_connected_ = true;
  {
    absl::MutexLock lock(&mu_);
    reserve_sha_ = shas[0];
    release_sha_ = shas[1];
    // What this replica holds goes back into the store (it may have
    // restarted empty, or our keys expired while we were away).
    load_dirty_ = true;
    rates_dirty_ = true;
    peer_pins_ = {.reset = true};
    if (rejoined) ++stats_.reconnects;
    connected_.store(true, std::memory_order_release);
  }
  pull_sha_ = shas[2];
  if (reachability_ != Reachability::kConnected) {
    Log()->info("cluster store {}: {}:{} as replica '{}'",
                reachability_ == Reachability::kUnreachable ? "rejoined" : "joined", address_.host,
                address_.port, options_.replica_id);
    reachability_ = Reachability::kConnected;
  }
  return absl::OkStatus();
}

void RedisStore::Disconnect(const std::string& why) {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  next_connect_ = absl::Now() + backoff_;
  backoff_ = std::min(backoff_ * 2, std::max(sync_interval_, lease_ / 3));
  std::vector<redisContext*> idle;
  {
    absl::MutexLock lock(&mu_);
    ++admission_generation_;
    idle.swap(idle_admission_);
    admission_open_ -= idle.size();
    if (!view_->stale) {
      auto stale = std::make_shared<PeerView>(*view_);
      stale->stale = true;
      view_ = std::move(stale);
    }
    // Under the lock: admission callers waiting for a connection wake to it.
    connected_.store(false, std::memory_order_release);
  }
  Wake();
  for (redisContext* c : idle) redisFree(c);
  if (reachability_ != Reachability::kUnreachable) {
    Log()->warn("cluster store unreachable: routing on local state ({}:{}: {})", address_.host,
                address_.port, why);
    reachability_ = Reachability::kUnreachable;
  }
}

RedisStore::WriteBatch RedisStore::TakeWrites(bool forced) {
  WriteBatch b;
  const absl::Time now = absl::Now();
  if (forced || now >= next_lease_) {
    b.lease = true;
    next_lease_ = now + lease_ / 3;
  }
  absl::MutexLock lock(&mu_);
  if (load_dirty_) {
    b.load = load_;
    load_dirty_ = false;
  }
  if (rates_dirty_) {
    b.rates = rates_;
    rates_dirty_ = false;
  }
  b.homes.swap(pending_homes_);
  b.releases.swap(pending_releases_);
  b.pins.swap(pending_pins_);
  b.unpins.swap(pending_unpins_);
  return b;
}

void RedisStore::ReturnWrites(WriteBatch b) {
  if (b.lease) next_lease_ = absl::InfinitePast();
  absl::MutexLock lock(&mu_);
  // A newer PublishLoad/PublishRates already set the flag; the latest wins.
  if (b.load) load_dirty_ = true;
  if (b.rates) rates_dirty_ = true;
  for (auto& [session, instance] : b.homes) {
    if (pending_homes_.contains(session)) continue;  // superseded
    if (pending_homes_.size() + pending_releases_.size() >= options_.max_pending_writes) {
      ++stats_.writes_dropped;
      continue;
    }
    pending_homes_.emplace(session, std::move(instance));
  }
  for (auto& [key, serial] : b.releases) {
    if (pending_releases_.contains(key)) continue;
    if (pending_homes_.size() + pending_releases_.size() >= options_.max_pending_writes) {
      ++stats_.writes_dropped;
      continue;
    }
    pending_releases_.emplace(key, serial);
  }
  // Pin changes keep their order: the returned ones go first.
  b.pins.insert(b.pins.end(), std::make_move_iterator(pending_pins_.begin()),
                std::make_move_iterator(pending_pins_.end()));
  pending_pins_ = std::move(b.pins);
  b.unpins.insert(b.unpins.end(), pending_unpins_.begin(), pending_unpins_.end());
  pending_unpins_ = std::move(b.unpins);
}

absl::Status RedisStore::Flush(const WriteBatch& b) {
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease_));
  const std::string load_key = Key("load", options_.replica_id);
  const std::string rates_key = Key("rates", options_.replica_id);
  Pipeline p;
  if (b.lease) {
    p.Add({"SET", Key("replica", options_.replica_id), "1", "PX", lease_ms});
    p.Add({"SADD", absl::StrCat(options_.key_prefix, ":replicas"), options_.replica_id});
    p.Add({"PEXPIRE", load_key, lease_ms});
    p.Add({"PEXPIRE", rates_key, lease_ms});
  }
  // A hash replaced whole, atomically, with the lease's expiry.
  auto replace_hash = [&](const std::string& key, std::vector<std::string> fields) {
    p.Add({"MULTI"});
    p.Add({"DEL", key});
    if (!fields.empty()) {
      std::vector<std::string> hset = {"HSET", key};
      for (std::string& f : fields) hset.push_back(std::move(f));
      p.Add(std::move(hset));
      p.Add({"PEXPIRE", key, lease_ms});
    }
    p.Add({"EXEC"});
  };
  if (b.load) {
    std::vector<std::string> fields;
    for (const auto& [instance, load] : *b.load) {
      fields.push_back(instance);
      fields.push_back(FormatLoad(load));
      if (!load.residents.empty()) {
        fields.push_back(absl::StrCat(kResidentsField, instance));
        fields.push_back(FormatResidents(load.residents));
      }
    }
    replace_hash(load_key, std::move(fields));
  }
  if (b.rates) {
    std::vector<std::string> fields;
    for (const auto& [instance, rate] : *b.rates) {
      fields.push_back(instance);
      fields.push_back(FormatRate(rate));
    }
    replace_hash(rates_key, std::move(fields));
  }
  // After the load: a peer that reads this flush's pins has read its load.
  if (!b.pins.empty() || !b.unpins.empty()) {
    p.Add({"XADD", PinStreamKey(), "MAXLEN", "~", absl::StrCat(kPinStreamLength), "*", "r",
           options_.replica_id, "p", FormatPins(b.pins), "u", FormatPinIds(b.unpins)});
  }
  const std::string ttl_ms = absl::StrCat(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(absl::Seconds(options_.session_ttl_s))));
  for (const auto& [session, instance] : b.homes) {
    p.Add({"SET", Key("home", session), instance, "PX", ttl_ms});
  }
  std::string release_sha;
  {
    absl::MutexLock lock(&mu_);
    release_sha = release_sha_;
  }
  for (const auto& [key, serial] : b.releases) {
    p.Add({"EVALSHA", release_sha, "1", Key("resv", key.first), options_.replica_id, key.second,
           absl::StrCat(serial)});
  }
  if (p.empty()) return absl::OkStatus();
  std::vector<Reply> replies;
  if (absl::Status st = p.Run(context_, &replies); !st.ok()) {
    Disconnect(std::string(st.message()));
    return st;
  }
  for (const Reply& r : replies) {
    if (r->type != REDIS_REPLY_ERROR) continue;
    const std::string why = ReplyText(r.get());
    if (why.starts_with("NOSCRIPT")) {
      // Someone flushed the scripts: connecting again loads them.
      Disconnect(why);
      return absl::UnavailableError(absl::StrCat("cluster store: ", why));
    }
    LogErrorReply("a write", why);
    return absl::InternalError(absl::StrCat("cluster store: ", why));
  }
  return absl::OkStatus();
}

void RedisStore::LogErrorReply(const char* what, const std::string& why) {
  if (why == last_error_reply_) return;
  Log()->warn("cluster store: {} failed: {}", what, why);
  last_error_reply_ = why;
}

void RedisStore::ReadPinEntries(const redisReply* xread, PeerPinChanges* into,
                                std::string* read_through) const {
  // [[stream, [[id, [field, value, ...]], ...]]], or nil when nothing is new.
  if (xread->type != REDIS_REPLY_ARRAY || xread->elements == 0) return;
  const redisReply* stream = xread->element[0];
  if (stream->type != REDIS_REPLY_ARRAY || stream->elements < 2 ||
      stream->element[1]->type != REDIS_REPLY_ARRAY) {
    return;
  }
  const redisReply* entries = stream->element[1];
  for (size_t e = 0; e < entries->elements; ++e) {
    const redisReply* entry = entries->element[e];
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 2 ||
        entry->element[0]->type != REDIS_REPLY_STRING) {
      continue;
    }
    *read_through = ReplyText(entry->element[0]);
    std::string replica;
    std::vector<RequestPin> pins;
    std::vector<uint64_t> unpins;
    bool whole = true;
    ForEachField(entry->element[1], [&](std::string field, absl::string_view value) {
      if (field == "r") replica = std::string(value);
      if (field == "p") whole = ParsePins(value, &pins) && whole;
      if (field == "u") whole = ParsePinIds(value, &unpins) && whole;
    });
    if (!whole) into->reset = true;  // a peer's changes lost: start afresh
    if (replica.empty() || replica == options_.replica_id) continue;
    for (RequestPin& p : pins) into->pinned.emplace_back(replica, std::move(p));
    for (uint64_t id : unpins) into->unpinned.emplace_back(replica, id);
  }
}

absl::Status RedisStore::Pull() {
  // The pins written since the last pull, then the peers' load: the load
  // is read after every pin this view comes with was written (and each
  // publisher writes its load before its pins), so an instance it shows
  // without a peer's request in flight holds none of those pins
  // (PeerPinChanges::view).
  Pipeline pipeline;
  pipeline.Add({"XREAD", "COUNT", absl::StrCat(kPinReadCount), "STREAMS", PinStreamKey(),
                pins_read_through_});
  pipeline.Add({"EVALSHA", pull_sha_, "1", absl::StrCat(options_.key_prefix, ":replicas"),
                absl::StrCat(options_.key_prefix, ":"), absl::StrCat(options_.max_replicas)});
  std::vector<Reply> replies;
  if (absl::Status st = pipeline.Run(context_, &replies); !st.ok()) {
    Disconnect(std::string(st.message()));
    return st;
  }
  PeerPinChanges pins;
  std::string read_through = pins_read_through_;
  if (replies[0]->type == REDIS_REPLY_ERROR) {
    LogErrorReply("reading the pins", ReplyText(replies[0].get()));
  } else {
    ReadPinEntries(replies[0].get(), &pins, &read_through);
  }
  const redisReply* out = replies[1].get();
  if (out->type != REDIS_REPLY_ARRAY || out->elements % 3 != 1) {
    const std::string why = out->type == REDIS_REPLY_ERROR ? ReplyText(out) : "malformed reply";
    if (why.starts_with("NOSCRIPT")) {
      Disconnect(why);
      return absl::UnavailableError(absl::StrCat("cluster store: ", why));
    }
    LogErrorReply("the pull", why);
    return absl::InternalError(absl::StrCat("cluster store: pull: ", why));
  }
  auto view = std::make_shared<PeerView>();
  absl::flat_hash_map<std::string, std::pair<double, int>> rate_sums;
  for (size_t i = 0; i + 2 < out->elements; i += 3) {
    if (out->element[i]->type != REDIS_REPLY_STRING) continue;
    std::string id = ReplyText(out->element[i]);
    if (id != options_.replica_id) {
      ForEachField(out->element[i + 1], [&](std::string instance, absl::string_view text) {
        if (absl::StartsWith(instance, kResidentsField)) {
          ParseResidents(text, &view->residents[instance.substr(kResidentsField.size())]);
          return;
        }
        InstanceLoad l;
        if (!ParseLoad(text, &l)) return;
        InstanceLoad& sum = view->load[instance];
        sum.requests += l.requests;
        sum.prefill_tokens += l.prefill_tokens;
        sum.tokens += l.tokens;
        sum.decoding_requests += l.decoding_requests;
        sum.waiting += l.waiting;
      });
    }
    ForEachField(out->element[i + 2], [&](std::string instance, absl::string_view text) {
      double rate = 0;
      if (!absl::SimpleAtod(text, &rate)) return;
      auto& [sum, n] = rate_sums[instance];
      sum += rate;
      ++n;
    });
    view->live_replicas.push_back(std::move(id));
  }
  for (const auto& [instance, sum_n] : rate_sums) {
    view->rate_factors[instance] = sum_n.first / sum_n.second;
  }
  std::sort(view->live_replicas.begin(), view->live_replicas.end());
  const long long live = out->element[out->elements - 1]->integer;
  if (live > static_cast<long long>(options_.max_replicas) && !warned_replicas_) {
    warned_replicas_ = true;
    Log()->warn("cluster store: {} live replicas, reading {} (cluster.max_replicas)", live,
                options_.max_replicas);
  }
  view->synced_at = absl::Now();
  view->stale = false;
  pins_read_through_ = std::move(read_through);
  absl::MutexLock lock(&mu_);
  // The changes and the view that goes with them, in one step.
  peer_pins_.reset = peer_pins_.reset || pins.reset;
  for (auto& p : pins.pinned) peer_pins_.pinned.push_back(std::move(p));
  for (auto& u : pins.unpinned) peer_pins_.unpinned.push_back(std::move(u));
  // Nobody takes them: rather than grow, start afresh.
  if (peer_pins_.pinned.size() + peer_pins_.unpinned.size() > options_.max_pending_writes) {
    peer_pins_ = {.reset = true};
  }
  view_ = std::move(view);
  ++stats_.syncs;
  return absl::OkStatus();
}

void RedisStore::Leave() {
  if (context_ == nullptr) return;
  WriteBatch batch = TakeWrites(/*forced=*/false);
  batch.lease = false;
  batch.load.reset();
  batch.rates.reset();
  if (Flush(batch).ok() && context_ != nullptr) {
    Pipeline p;
    p.Add({"DEL", Key("replica", options_.replica_id), Key("load", options_.replica_id),
           Key("rates", options_.replica_id)});
    p.Add({"SREM", absl::StrCat(options_.key_prefix, ":replicas"), options_.replica_id});
    std::vector<Reply> replies;
    (void)p.Run(context_, &replies);
  }
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  connected_.store(false, std::memory_order_release);
}

}  // namespace kvroute::cluster
