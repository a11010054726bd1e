// RedisStore's request path (cluster/redis_store.h): Reserve and ReadHomes,
// on the caller's thread, over the pool of admission connections that the
// I/O thread's state gates (never opened while it says the store is away).
#include <hiredis/hiredis.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/redis_connection.h"
#include "cluster/redis_scripts.h"
#include "cluster/redis_store.h"

namespace kvroute::cluster {

absl::StatusOr<RedisStore::AdmissionConnection> RedisStore::AcquireAdmission(absl::Time deadline) {
  auto unreachable = [] {
    return absl::UnavailableError("cluster store unreachable: deciding on local state");
  };
  uint64_t generation = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!connected()) return unreachable();
      if (!idle_admission_.empty()) {
        redisContext* c = idle_admission_.back();
        idle_admission_.pop_back();
        return AdmissionConnection{c, admission_generation_};
      }
      if (admission_open_ < options_.max_admission_connections) {
        ++admission_open_;
        generation = admission_generation_;
        break;
      }
    }
    const bool ready = WaitUntil(
        [this] {
          mu_.AssertHeld();
          return !idle_admission_.empty() || admission_open_ < options_.max_admission_connections ||
                 !connected();
        },
        deadline);
    if (!ready) return absl::UnavailableError("cluster store: every admission connection is busy");
  }
  absl::StatusOr<redisContext*> c = OpenConnection(address_, deadline - absl::Now());
  if (!c.ok()) {
    {
      absl::MutexLock lock(&mu_);
      --admission_open_;
    }
    Wake();
    return c.status();
  }
  return AdmissionConnection{*c, generation};
}

void RedisStore::ReturnAdmission(AdmissionConnection c, bool healthy) {
  {
    absl::MutexLock lock(&mu_);
    if (healthy && c.generation == admission_generation_) {
      idle_admission_.push_back(c.context);
      c.context = nullptr;
    } else {
      --admission_open_;
    }
  }
  Wake();
  if (c.context != nullptr) redisFree(c.context);
}

absl::StatusOr<Reservation> RedisStore::Reserve(absl::string_view instance,
                                                absl::string_view reservation_id, int64_t tokens,
                                                int64_t fill_tokens, bool force) {
  const absl::Time deadline = absl::Now() + op_timeout_;
  auto outcome = [this](absl::StatusOr<Reservation> r) {
    absl::MutexLock lock(&mu_);
    if (!r.ok()) {
      ++stats_.reserve_unavailable;
    } else if (r->admitted) {
      ++stats_.reserve_admitted;
      if (r->evicted > 0) ++stats_.reserve_forced;
      stats_.reserve_evicted += r->evicted;
    } else {
      ++stats_.reserve_refused;
    }
    return r;
  };
  absl::StatusOr<AdmissionConnection> conn = AcquireAdmission(deadline);
  if (!conn.ok()) return outcome(conn.status());
  std::string sha;
  uint64_t serial = 0;
  // This replica's releases queued for the instance go in the same script,
  // first: a session swapped out to make room for this one frees it now,
  // not at the next flush.
  ReleaseMap releases;
  {
    absl::MutexLock lock(&mu_);
    sha = reserve_sha_;
    serial = ++next_serial_;
    for (auto it = pending_releases_.begin(); it != pending_releases_.end();) {
      if (it->first.first == instance) {
        releases.insert(pending_releases_.extract(it++));
      } else {
        ++it;
      }
    }
  }
  redisSetTimeout(conn->context, TimevalOf(deadline - absl::Now()));
  std::vector<std::string> args = {"EVALSHA",
                                   sha,
                                   "2",
                                   Key("resv", instance),
                                   Key("wait", instance),
                                   absl::StrCat(options_.key_prefix, ":replica:"),
                                   options_.replica_id,
                                   std::string(reservation_id),
                                   absl::StrCat(std::max<int64_t>(0, tokens)),
                                   absl::StrCat(fill_tokens),
                                   absl::StrCat(serial),
                                   absl::StrCat(absl::ToUnixMillis(absl::Now())),
                                   force ? "1" : "0",
                                   absl::StrCat(absl::ToInt64Milliseconds(WaitingPlaceKept()))};
  for (const auto& [key, release_serial] : releases) {
    args.push_back(key.second);
    args.push_back(absl::StrCat(release_serial));
  }
  absl::StatusOr<Reply> r = Command(conn->context, args);
  if (r.ok() && (*r)->type == REDIS_REPLY_ERROR && ReplyText(r->get()).starts_with("NOSCRIPT")) {
    // The server restarted since SCRIPT LOAD; EVAL also caches it again.
    args[0] = "EVAL";
    args[1] = kReserveScript;
    r = Command(conn->context, args);
  }
  ReturnAdmission(*conn, r.ok());
  // The releases again for the next flush when the script may not have
  // run: made twice, a release is a no-op.
  auto requeue = [&] {
    if (releases.empty()) return;
    WriteBatch unwritten;
    unwritten.releases = std::move(releases);
    ReturnWrites(std::move(unwritten));
  };
  if (!r.ok()) {
    requeue();
    return outcome(r.status());
  }
  const redisReply* reply = r->get();
  const auto integers = [](const redisReply* a) {
    if (a->type != REDIS_REPLY_ARRAY || a->elements != 6) return false;
    for (size_t i = 0; i < a->elements; ++i) {
      if (a->element[i]->type != REDIS_REPLY_INTEGER) return false;
    }
    return true;
  };
  if (!integers(reply)) {
    const std::string why = reply->type == REDIS_REPLY_ERROR ? ReplyText(reply) : "malformed reply";
    requeue();
    return outcome(absl::UnavailableError(absl::StrCat("cluster store: reserve: ", why)));
  }
  if (reply->element[0]->integer < 0) {
    requeue();
    return outcome(absl::UnavailableError(
        "cluster store: this replica's lease is not in the store yet; deciding on local state"));
  }
  Reservation out;
  out.admitted = reply->element[0]->integer == 1;
  out.reserved_tokens = reply->element[1]->integer;
  out.evicted = reply->element[2]->integer;
  out.continued = reply->element[3]->integer == 1;
  out.waiting_ahead_tokens = reply->element[4]->integer;
  out.turns_before = reply->element[5]->integer;
  if (out.admitted) {
    absl::MutexLock lock(&mu_);
    std::pair<std::string, std::string> key{std::string(instance), std::string(reservation_id)};
    // A release queued before this reservation must not delete it: the
    // serial it names is older.
    held_[std::move(key)] = serial;
    if (!out.continued && out.reserved_tokens > fill_tokens && out.reserved_tokens > tokens) {
      ++stats_.reserve_over_fill;
    }
  }
  return outcome(out);
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> RedisStore::ReadHomes(
    absl::Span<const std::string> sessions) {
  absl::flat_hash_map<std::string, std::string> homes;
  if (sessions.empty()) return homes;
  const absl::Time deadline = absl::Now() + op_timeout_;
  absl::StatusOr<AdmissionConnection> conn = AcquireAdmission(deadline);
  if (!conn.ok()) return conn.status();
  redisSetTimeout(conn->context, TimevalOf(deadline - absl::Now()));
  std::vector<std::string> args = {"MGET"};
  for (const std::string& s : sessions) args.push_back(Key("home", s));
  absl::StatusOr<Reply> r = Command(conn->context, std::move(args));
  ReturnAdmission(*conn, r.ok());
  if (!r.ok()) return r.status();
  const redisReply* reply = r->get();
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != sessions.size()) {
    return absl::UnavailableError("cluster store: MGET: unexpected reply");
  }
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (reply->element[i]->type == REDIS_REPLY_STRING) {
      homes[sessions[i]] = ReplyText(reply->element[i]);
    }
  }
  return homes;
}

}  // namespace kvroute::cluster
