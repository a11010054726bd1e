// How RedisStore writes its values (docs/design.md, "Several replicas: the
// cluster store", has the keys): a replica's load per instance, the sessions
// its residency gate holds there, and its rate factors. Pure functions.
//
//   std::string v = FormatLoad({.requests = 3, .tokens = 41000});   // "3:0:41000:0"
//   InstanceLoad l;
//   if (ParseLoad(v, &l)) ...
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "cluster/store.h"

namespace kvroute::cluster {

// "requests:prefill_tokens:tokens:decoding_requests:waiting"; ParseLoad is false on
// anything else.
std::string FormatLoad(const InstanceLoad& l);
bool ParseLoad(absl::string_view text, InstanceLoad* l);

// The load hash's field for an instance's residents: a prefix no instance
// name carries (backend names are printable), then the instance.
inline constexpr absl::string_view kResidentsField = "\x1eresidents:";

// One "<tokens> <session>" line per resident (a session id with a newline
// is left out). ParseResidents merges lines into `into`, a session's
// largest footprint winning, and skips malformed ones.
std::string FormatResidents(const std::vector<std::pair<std::string, int64_t>>& residents);
void ParseResidents(absl::string_view text, absl::flat_hash_map<std::string, int64_t>* into);

// Pins taken, as one binary value (little-endian): per pin its id (u64),
// footprint chunks (i64), instance name (u32 length, bytes) and chain (u32
// count, u64 hashes). ParsePins appends to `into` and is false on a value
// cut short or malformed (`into` then holds the pins before the fault).
std::string FormatPins(const std::vector<RequestPin>& pins);
bool ParsePins(absl::string_view bytes, std::vector<RequestPin>* into);
// Pin ids given back: u64 each, little-endian; false on a ragged length.
std::string FormatPinIds(const std::vector<uint64_t>& ids);
bool ParsePinIds(absl::string_view bytes, std::vector<uint64_t>* into);

// A rate factor, exactly ("%.17g").
std::string FormatRate(double r);

}  // namespace kvroute::cluster
