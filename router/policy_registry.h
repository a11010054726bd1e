// The table of routing policies: every `mode` kvroute accepts, in one place.
// Each row gives the user-facing name, a one-line description for --help,
// the check of the options and backend list the policy needs, its
// constructor, and the properties other tools ask about (threshold-sensitive,
// homes sessions, needs a KV connector). The router builds its policy from the
// row and the policy reports the row's name, the config loader validates
// `mode` and the backends with it, kvroute --help and --list-modes print it,
// kvroute-bench crosses its threshold-sensitive modes with the thresholds, and
// deploy/vllm/launch-fleet.sh reads `kvroute --list-modes`. Nobody else keeps a
// list of modes.
//
//   absl::Status st = router::ValidatePolicy(options, backends);  // at start-up
//   absl::StatusOr<std::unique_ptr<Policy>> p = router::MakePolicy(options, backends);
//   bool crossed = router::FindPolicy("v2")->threshold_sensitive;
//
// Adding a policy: its class in router/policies/ (one .h/.cc), one row in
// policy_registry.cc, and the .cc in router/CMakeLists.txt.
//
// An unknown name, or options and backends a policy cannot work with, is
// InvalidArgument at start-up, never a request-time surprise; the message
// opens with the key at fault ("mode: ...", "backends: ...",
// "offload_gate: ..."). Thread-safe (the table is immutable).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "router/policy.h"
#include "router/options.h"

namespace kvroute::router {

struct PolicyEntry {
  std::string_view name;         // the `mode` value that selects it
  std::string_view description;  // one line, for --help
  // OK when the policy can work with `options` and `backends`; nullptr when
  // it works with any non-empty fleet.
  absl::Status (*validate)(const Options& options, const std::vector<BackendSpec>& backends);
  // Called only after `validate` returned OK.
  std::unique_ptr<Policy> (*make)(const Options& options);
  // The policy keeps a session on its instance (session affinity): the
  // residency gate (residency_gate.h) holds its sessions' turns back.
  bool homes_sessions = false;
  // Its routing depends on the heavy threshold (the HEAVY class changes where
  // a request goes), so an ablation crosses it with several thresholds.
  bool threshold_sensitive = false;
  // It sends prefill and decode to different instances, so the engines need a
  // KV connector (NIXL, Mooncake, SGLang) between them.
  bool needs_connector = false;
};

// Every row, in the order --help lists them.
absl::Span<const PolicyEntry> Policies();

// The row named `name`, nullptr when there is none.
const PolicyEntry* FindPolicy(std::string_view name);

// Every name in Policies(), for tests and error messages.
const std::vector<std::string>& PolicyNames();

// The names of the rows whose `property` is true, in table order; e.g.
// PolicyNamesWith(&PolicyEntry::threshold_sensitive).
std::vector<std::string> PolicyNamesWith(bool PolicyEntry::*property);

// "mode: unknown mode 'x' (expected one of ...)" unless `name` has a row.
absl::Status CheckPolicyName(std::string_view name);

// CheckPolicyName(options.mode), then the row's own check.
absl::Status ValidatePolicy(const Options& options, const std::vector<BackendSpec>& backends);

// ValidatePolicy, then the row's constructor.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const Options& options,
                                                   const std::vector<BackendSpec>& backends);

// One "\n  name  description" line per row, for --help.
std::string PolicyHelp();

// kvroute --list-modes: one line per row, in table order, each the name and
// then every property as key=yes|no, separated by single spaces:
//   v2 threshold_sensitive=yes homes_sessions=yes needs_connector=yes
// Scripts match on the first field and on "key=yes"; new properties are
// appended at the end of the line, so the format stays stable for them.
std::string ModeList();

}  // namespace kvroute::router
