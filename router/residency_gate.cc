#include "router/residency_gate.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvroute::router {

namespace {

// The weight of each new sample in ResidencyGate::expected_wait() and
// reuse_gap().
constexpr double kWaitWeight = 0.1;

}  // namespace

ResidencyGate::ResidencyGate(Options options)
    : options_(options), expected_wait_(options.grace), reuse_gap_(options.grace) {}

ResidencyGate::Instance& ResidencyGate::At(int backend) {
  if (backend >= static_cast<int>(instances_.size())) instances_.resize(backend + 1);
  return instances_[backend];
}

int64_t ResidencyGate::PeerTokens(const Instance& in) const {
  if (in.peer_residents.empty()) return 0;
  int64_t tokens = in.peer_tokens;
  // A session resident both here and at a peer counts once, here.
  for (const auto& [session, r] : in.residents) {
    if (auto p = in.peer_residents.find(session); p != in.peer_residents.end()) {
      tokens -= p->second;
    }
  }
  return std::max<int64_t>(0, tokens);
}

bool ResidencyGate::FitsBesideOwn(const Instance& in, int64_t footprint) const {
  if (in.residents.empty()) return true;
  return static_cast<double>(in.resident_tokens + footprint) <=
         options_.fill * static_cast<double>(in.capacity_tokens);
}

bool ResidencyGate::Fits(const Instance& in, int64_t footprint, int64_t capacity) const {
  const int64_t peers = PeerTokens(in);
  if (in.residents.empty() && peers == 0) return true;  // one session always gets in
  return static_cast<double>(in.resident_tokens + peers + footprint) <=
         options_.fill * static_cast<double>(capacity);
}

void ResidencyGate::Admit(int backend, Instance& in, const std::string& session,
                          int64_t footprint) {
  Resident& r = in.residents[session];
  r.footprint = std::max<int64_t>(1, footprint);
  r.active = 1;
  in.resident_tokens += r.footprint;
  home_[session] = backend;
}

void ResidencyGate::Activate(int backend, const std::string& session, Resident& r) {
  if (r.active++ == 0) idle_.erase({r.last_done, backend, session});
}

void ResidencyGate::Deactivate(int backend, const std::string& session, Resident& r,
                               absl::Time now) {
  if (r.active == 0) idle_.erase({r.last_done, backend, session});
  r.active = std::max(0, r.active - 1);
  r.last_done = now;
  if (r.active == 0) idle_.insert({r.last_done, backend, session});
}

void ResidencyGate::Evict(Instance& in, const std::string& session) {
  if (auto it = in.residents.find(session); it != in.residents.end()) Evict(in, it);
}

void ResidencyGate::Evict(Instance& in, absl::flat_hash_map<std::string, Resident>::iterator it) {
  const int backend = static_cast<int>(&in - instances_.data());
  const std::string& session = it->first;
  if (it->second.active == 0) idle_.erase({it->second.last_done, backend, session});
  in.resident_tokens -= it->second.footprint;
  if (track_departures_) departed_.emplace_back(backend, session);
  home_.erase(session);
  in.residents.erase(it);  // last: `session` is the map's own key
}

std::vector<std::pair<int, std::string>> ResidencyGate::TakeDepartures() {
  track_departures_ = true;
  std::vector<std::pair<int, std::string>> out;
  out.swap(departed_);
  return out;
}

void ResidencyGate::SetTurns(int backend, std::string_view session, int64_t turns) {
  if (backend < 0 || backend >= static_cast<int>(instances_.size()) || turns < 0) return;
  Instance& in = instances_[backend];
  auto it = in.residents.find(absl::string_view(session.data(), session.size()));
  if (it == in.residents.end()) return;
  it->second.turns = static_cast<int>(std::min<int64_t>(turns, std::numeric_limits<int>::max()));
}

bool ResidencyGate::IsResident(int backend, std::string_view session) const {
  const auto it = home_.find(absl::string_view(session.data(), session.size()));
  return it != home_.end() && it->second == backend;
}

bool ResidencyGate::MovableWaiting() const {
  for (const Instance& in : instances_) {
    for (const Waiter& w : in.waiting) {
      if (w.movable) return true;
    }
  }
  return false;
}

void ResidencyGate::ExpireIdle(Instance& in, absl::Time now) {
  if (!Contended(in) && !MovableWaiting()) return;
  std::vector<std::string> gone;
  for (const auto& [session, r] : in.residents) {
    if (r.active == 0 && r.last_done + IdleLimit(in) <= now) gone.push_back(session);
  }
  for (const std::string& s : gone) {
    const bool early = in.residents[s].last_done + options_.grace > now;
    Evict(in, s);
    ++(early ? counters_.swapped_out : counters_.expired);
  }
}

void ResidencyGate::AdmitWaiter(int backend, const Waiter& w, bool timed_out, absl::Time now,
                                std::vector<uint64_t>* woken) {
  Instance& in = instances_[backend];
  expected_wait_ += kWaitWeight * ((now - w.since) - expected_wait_);
  // Its session may have become resident elsewhere meanwhile (a parallel
  // request routed there): this request is the one that counts now.
  if (auto h = home_.find(w.session); h != home_.end() && h->second != backend) {
    Evict(instances_[h->second], w.session);
  }
  if (auto r = in.residents.find(w.session); r != in.residents.end()) {
    Activate(backend, r->first, r->second);
  } else {
    Admit(backend, in, w.session, w.footprint);
  }
  if (timed_out) {
    ++counters_.admitted_by_timeout;
  } else {
    ++counters_.admitted_after_wait;
  }
  woken->push_back(w.id);
}

void ResidencyGate::AdmitWaiters(int backend, absl::Time now, std::vector<uint64_t>* woken) {
  Instance& in = instances_[backend];
  ExpireIdle(in, now);
  for (auto w = in.waiting.begin(); w != in.waiting.end();) {
    const bool timed_out = w->due <= now;
    // Its wait ran out: the residents that have had the most turns yield
    // until it fits (a yielding session's turn in flight runs on).
    // (Only this gate's own residents yield, until it fits beside them:
    // other replicas' residents are theirs to move.)
    while (timed_out && !in.residents.empty() && !FitsBesideOwn(in, w->footprint)) {
      auto most = std::max_element(
          in.residents.begin(), in.residents.end(),
          [](const auto& x, const auto& y) { return x.second.turns < y.second.turns; });
      Evict(in, most);
      ++counters_.yielded_forced;
    }
    // One that does not fit lets those behind it that do go first
    // (backfilling keeps the pool full); its own wait stays bounded.
    // (Past its bound it goes even when other replicas' residents fill the
    // instance: this gate cannot make them yield.)
    if (!timed_out && !Fits(in, w->footprint)) {
      ++w;
      continue;
    }
    const Waiter taken = *w;
    w = in.waiting.erase(w);
    AdmitWaiter(backend, taken, timed_out, now, woken);
  }
  AdmitMovable(backend, now, woken);
}

void ResidencyGate::AdmitMovable(int backend, absl::Time now, std::vector<uint64_t>* woken) {
  Instance& in = instances_[backend];
  // Only an instance whose pool the gate knows, and whose own waiters have
  // all gone, lends its room.
  if (in.capacity_tokens <= 0 || !in.waiting.empty()) return;
  for (;;) {
    Instance* from = nullptr;
    std::deque<Waiter>::iterator best;
    for (int o = 0; o < static_cast<int>(instances_.size()); ++o) {
      if (o == backend) continue;
      std::deque<Waiter>& q = instances_[o].waiting;
      for (auto w = q.begin(); w != q.end(); ++w) {
        if (!w->movable || !Fits(in, w->footprint)) continue;
        if (from == nullptr || w->due < best->due) {
          from = &instances_[o];
          best = w;
        }
      }
    }
    if (from == nullptr) return;
    const Waiter taken = *best;
    from->waiting.erase(best);
    AdmitWaiter(backend, taken, /*timed_out=*/taken.due <= now, now, woken);
    moved_[taken.id] = backend;
    ++counters_.moved;
  }
}

uint64_t ResidencyGate::Enter(int backend, std::string_view session, const Turn& turn,
                              absl::Time now, std::vector<uint64_t>* woken) {
  Age(now);
  Instance& in = At(backend);
  in.capacity_tokens = turn.capacity_tokens;
  in.tiered = turn.reload_s >= 0;
  const int64_t footprint_tokens = turn.footprint_tokens;
  const std::string key(session);
  if (auto h = home_.find(key); h != home_.end() && h->second != backend) {
    // The session moved: its old instance's room is free for others.
    const int old = h->second;
    Evict(instances_[old], key);
    AdmitWaiters(old, now, woken);
  }
  // Turns not held pass by the counters: they are no turns through the gate.
  const bool held = turn.hold && options_.enabled;
  // Options::yield_grown: an idle resident whose turn outgrew its room
  // gives its place up, and the turn goes on below as a new session's.
  auto r = in.residents.find(key);
  if (r != in.residents.end() && held && options_.yield_grown) {
    const int64_t growth = footprint_tokens - r->second.footprint;
    if (r->second.active == 0 && in.residents.size() > 1 && growth > 0 && !Fits(in, growth)) {
      Evict(in, r);
      r = in.residents.end();
      ++counters_.yielded_grown;
    }
  }
  if (r != in.residents.end()) {
    // A resident's next turn: how long sessions take to come back.
    if (r->second.active == 0 && r->second.last_done != absl::InfinitePast()) {
      reuse_gap_ += kWaitWeight * ((now - r->second.last_done) - reuse_gap_);
    }
    Activate(backend, r->first, r->second);
    if (footprint_tokens > r->second.footprint) {
      in.resident_tokens += footprint_tokens - r->second.footprint;
      r->second.footprint = footprint_tokens;
    }
    if (held) ++counters_.admitted_at_once;
    return 0;
  }
  ExpireIdle(in, now);
  // A session another replica holds resident here: its next turn, which
  // that replica's footprint already counts.
  const bool resident_at_peer = in.peer_residents.contains(key);
  // A cold turn prefills its whole footprint into the GPU: at once only
  // within the GPU's room, even where a tier keeps the residents.
  const int64_t room = turn.movable && turn.gpu_capacity_tokens > 0
                           ? std::min(turn.capacity_tokens, turn.gpu_capacity_tokens)
                           : turn.capacity_tokens;
  if (!held || resident_at_peer || (in.waiting.empty() && Fits(in, footprint_tokens, room))) {
    Admit(backend, in, key, footprint_tokens);
    if (held) ++counters_.admitted_at_once;
    return 0;
  }
  if (held && Swappable(turn.reload_s) && SwapIn(backend, in, footprint_tokens, room, now)) {
    Admit(backend, in, key, footprint_tokens);
    ++counters_.swapped_in;
    return 0;
  }
  const uint64_t id = next_waiter_++;
  Waiter w{id, key, std::max<int64_t>(1, footprint_tokens), now, now + WaitBound(turn),
           turn.movable};
  // Queued by when its wait runs out; equal bounds keep arrival order.
  auto at = std::upper_bound(in.waiting.begin(), in.waiting.end(), w.due,
                             [](absl::Time due, const Waiter& x) { return due < x.due; });
  in.waiting.insert(at, std::move(w));
  ++counters_.waited;
  // A cold turn takes room wherever the gate knows some now: on the
  // instance with the least room free that fits it (best fit). Cold turns
  // then fill the instances already crowded and leave the others' sessions
  // within their pools, where their turns hit the GPU; spread evenly, every
  // instance's sessions would outgrow its GPU and each turn would wait for
  // the blocks of the others' (bench README, "Figures: KV beyond HBM").
  if (turn.movable) {
    std::vector<std::pair<int64_t, int>> lenders;  // (free room, instance)
    for (int b = 0; b < static_cast<int>(instances_.size()); ++b) {
      if (b == backend) continue;
      Instance& other = instances_[b];
      ExpireIdle(other, now);
      lenders.emplace_back(other.capacity_tokens - other.resident_tokens - PeerTokens(other), b);
    }
    std::sort(lenders.begin(), lenders.end());
    for (const auto& lender : lenders) AdmitMovable(lender.second, now, woken);
  }
  return id;
}

bool ResidencyGate::SwapIn(int backend, Instance& in, int64_t footprint, int64_t capacity,
                           absl::Time now) {
  const absl::Time idle_since = now - swap_after();
  int64_t kept_tokens = 0;
  for (const auto& [session, r] : in.residents) {
    if (r.active > 0 || r.last_done > idle_since) kept_tokens += r.footprint;
  }
  const bool room = kept_tokens == 0 || static_cast<double>(kept_tokens + footprint) <=
                                            options_.fill * static_cast<double>(capacity);
  if (!room) return false;
  // idle_ is ordered by when each went idle: the longest idle first.
  for (auto it = idle_.begin();
       it != idle_.end() && std::get<0>(*it) <= idle_since && !Fits(in, footprint, capacity);) {
    const auto [since, b, session] = *it++;
    if (b != backend) continue;
    Evict(in, session);
    ++counters_.swapped_out;
  }
  return true;
}

std::optional<int> ResidencyGate::TakeMove(uint64_t waiter) {
  auto it = moved_.find(waiter);
  if (it == moved_.end()) return std::nullopt;
  const int backend = it->second;
  moved_.erase(it);
  return backend;
}

void ResidencyGate::Leave(int backend, std::string_view session, int64_t footprint_tokens,
                          absl::Time now, std::vector<uint64_t>* woken) {
  if (backend < 0 || backend >= static_cast<int>(instances_.size())) return;
  Instance& in = instances_[backend];
  auto it = in.residents.find(std::string(session));
  if (it == in.residents.end()) return;
  Resident& r = it->second;
  Deactivate(backend, it->first, r, now);
  ++r.turns;
  if (footprint_tokens > 0) {
    in.resident_tokens += footprint_tokens - r.footprint;
    r.footprint = footprint_tokens;
  }
  if (r.active == 0 && Contended(in) && r.turns >= options_.quantum_turns) {
    Evict(in, it);
    ++counters_.yielded;
  }
  AdmitWaiters(backend, now, woken);
}

void ResidencyGate::Age(absl::Time now) {
  const absl::Duration idle_limit = std::max(options_.window, options_.grace);
  while (!idle_.empty() && std::get<0>(*idle_.begin()) + idle_limit <= now) {
    const auto [since, backend, session] = *idle_.begin();
    Evict(instances_[backend], session);
    ++counters_.expired;
  }
}

std::optional<ResidencyGate::Residence> ResidencyGate::Find(std::string_view session) const {
  const absl::string_view key(session.data(), session.size());
  auto h = home_.find(key);
  if (h == home_.end()) return std::nullopt;
  const Instance& in = instances_[h->second];
  auto r = in.residents.find(key);
  if (r == in.residents.end()) return std::nullopt;
  return Residence{h->second, r->second.footprint};
}

void ResidencyGate::Tick(absl::Time now, std::vector<uint64_t>* woken) {
  Age(now);
  // Room for the turns other replicas hold (they reserve it in the store).
  for (Instance& in : instances_) {
    if (in.peer_waiting > 0) ExpireIdle(in, now);
  }
  if (waiting() == 0) return;
  for (int b = 0; b < static_cast<int>(instances_.size()); ++b) AdmitWaiters(b, now, woken);
}

void ResidencyGate::Abandon(uint64_t waiter, absl::Time now, std::vector<uint64_t>* woken) {
  for (int b = 0; b < static_cast<int>(instances_.size()); ++b) {
    std::deque<Waiter>& q = instances_[b].waiting;
    auto it = std::find_if(q.begin(), q.end(), [&](const Waiter& w) { return w.id == waiter; });
    if (it == q.end()) continue;
    const bool head = it == q.begin();
    q.erase(it);
    if (head) AdmitWaiters(b, now, woken);  // the ones behind it may fit
    return;
  }
}

std::optional<absl::Time> ResidencyGate::NextEvent() const {
  std::optional<absl::Time> next;
  auto consider = [&](absl::Time t) {
    if (!next || t < *next) next = t;
  };
  const bool movable = MovableWaiting();
  for (const Instance& in : instances_) {
    if (!Contended(in) && !movable) continue;
    for (const Waiter& w : in.waiting) consider(w.due);
    for (const auto& [session, r] : in.residents) {
      if (r.active == 0) consider(r.last_done + IdleLimit(in));
    }
  }
  return next;
}

size_t ResidencyGate::waiting() const {
  size_t n = 0;
  for (const Instance& in : instances_) n += in.waiting.size();
  return n;
}

size_t ResidencyGate::resident_sessions(int backend) const {
  return backend < static_cast<int>(instances_.size()) ? instances_[backend].residents.size() : 0;
}

int64_t ResidencyGate::resident_tokens(int backend) const {
  return backend < static_cast<int>(instances_.size()) ? instances_[backend].resident_tokens : 0;
}

int64_t ResidencyGate::peer_resident_tokens(int backend) const {
  return backend < static_cast<int>(instances_.size()) ? PeerTokens(instances_[backend]) : 0;
}

std::vector<std::pair<std::string, int64_t>> ResidencyGate::Residents(int backend) const {
  std::vector<std::pair<std::string, int64_t>> out;
  if (backend >= static_cast<int>(instances_.size())) return out;
  out.reserve(instances_[backend].residents.size());
  for (const auto& [session, r] : instances_[backend].residents) {
    out.emplace_back(session, r.footprint);
  }
  return out;
}

void ResidencyGate::SetPeerResidents(int backend,
                                     absl::flat_hash_map<std::string, int64_t> sessions,
                                     int64_t waiting_turns, absl::Time now,
                                     std::vector<uint64_t>* woken) {
  if (backend < 0) return;
  Instance& in = At(backend);
  in.peer_waiting = std::max<int64_t>(0, waiting_turns);
  int64_t tokens = 0;
  for (auto& [session, footprint] : sessions) {
    footprint = std::max<int64_t>(0, footprint);
    tokens += footprint;
  }
  in.peer_residents = std::move(sessions);
  in.peer_tokens = tokens;
  if (!in.waiting.empty()) AdmitWaiters(backend, now, woken);
}

}  // namespace kvroute::router
