// Fault injection settings of one simulated instance, set at start (CLI flags) or at run time
// through `POST /sim/faults`. Plain value type.
//
// JSON (every field optional; absent fields keep their value, "clear": true resets first):
//   {"instance": 1,               // target another instance of the same fleet
//    "clear": true,
//    "unhealthy": true,           // GET /health answers 503
//    "refuse_connections": true,  // the listening socket is closed: connections are refused
//    "killed": true,              // as if the process died: the listening socket is closed,
//                                 // every open connection is reset (RST) and requests in
//                                 // flight are dropped; clearing it is a restart on the
//                                 // same port (the engine's prefix cache is kept)
//    "error_rate": 0.5,           // completion requests answer 500 with this probability
//    "hang": true,                // requests are read but never answered (until cleared)
//    "die_after_events": 3,       // streams are cut after 3 SSE events (no [DONE]);
//                                 // non-streaming requests are cut before the response
//    "slowdown": 4.0}             // every engine step takes 4x longer
#pragma once

#include <absl/status/statusor.h>

#include <boost/json.hpp>
#include <string_view>

namespace sim {

struct Faults {
  bool unhealthy = false;
  bool refuse_connections = false;
  bool killed = false;
  double error_rate = 0;
  bool hang = false;
  int die_after_events = -1;  // < 0: off
  double slowdown = 1;

  bool operator==(const Faults&) const = default;
};

// Applies the JSON fields present in `body` on top of `base` (or defaults if "clear").
// The "instance" field is not interpreted here.
absl::StatusOr<Faults> ApplyFaultsJson(const Faults& base, const boost::json::object& body);
boost::json::object FaultsToJson(const Faults& faults);

}  // namespace sim
