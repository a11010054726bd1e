// The Lua scripts RedisStore (cluster/redis_store.h) runs in Redis: each runs
// to completion, so what it reads and writes is one atomic step across
// replicas. redis_scripts.cc documents each one's KEYS, ARGV and reply.
#pragma once

namespace kvroute::cluster {

// Residency admission: sums an instance's live reservations and admits
// within its fill (ClusterStore::Reserve).
extern const char kReserveScript[];
// Gives back one reservation if its owner and serial still match.
extern const char kReleaseScript[];
// Every live replica's id, load and rates; drops the ids whose lease expired.
extern const char kPullScript[];

}  // namespace kvroute::cluster
