// Plain value types shared by the proxy, the router and the classifier.
//
// These are the only router types the proxy needs: the proxy fills a
// RequestFeatures once per request, hands it to router::Router::Route(), and
// gets back a Decision. Everything here is a copyable value with no
// behaviour and no synchronisation of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "classifier/request_class.h"

namespace kvroute::router {

// The classifier's WARM/MEDIUM/HEAVY verdict, carried in every Decision.
using RequestClass = classifier::RequestClass;
using classifier::ToString;

// COLOCATED: prefill and decode on one instance. OFFLOAD: prefill on
// `prefill_backend`, KV moved by the engines, decode on `decode_backend`.
enum class DecisionMode { kColocated, kOffload };

// What a backend may be used for. `kBoth` is a PD-combined instance; the
// prefill/decode pools only matter to the `pd_sep` policy.
enum class BackendRole { kBoth, kPrefill, kDecode };

std::string_view ToString(DecisionMode m);
std::string_view ToString(BackendRole r);

// Request features, extracted by the proxy from the body exactly once.
struct RequestFeatures {
  std::string request_id;
  std::string model;
  std::string session_id;  // empty when the client sent none
  // OpenAI Responses: the stored response this request continues (it lives
  // in the memory of the engine that produced it). Empty otherwise.
  std::string previous_response_id;
  bool stream = false;
  int64_t max_tokens = -1;  // -1 when the client did not say
  // Canonical prompt bytes: chat messages in order with their roles, or the
  // completion prompt (strings, or token ids rendered as text). Never logged.
  std::string prompt_bytes;
  // Chained chunk hashes of `prompt_bytes` (router/prefix_hash.h), computed
  // once by the proxy so the router never hashes on its lock.
  std::vector<uint64_t> chunk_hashes;
  // Backends this request must not be sent to (the proxy's retry after an
  // instance failed it before its first byte). Treated as unhealthy for
  // this one decision.
  std::vector<int> avoid_backends;
  // The caller calls Router::Dispatch before sending the request. Then a
  // co-located turn of a session may be held by the residency model
  // (RouteTicket::residency_wait, router/residency_gate.h) and takes no room
  // in the shadow's model of its instance's KV pool until it is dispatched,
  // as it takes none in the engine's.
  bool defer_kv_reservation = false;
  // The caller answers a shed ticket (RouteTicket::shed) with 429: the
  // router may refuse the request at admission (Options::shed).
  bool allow_shed = false;
  // Measurement only, never set by the proxy: the true cached tokens of this
  // prompt on every backend, in backend order (kvroute-bench's oracle
  // reference reads them from kvroute-sim's /sim/oracle/cached_tokens). When
  // it has one entry per backend the policy sees these instead of the shadow
  // index's estimates (and judges from them whether the session's instance
  // evicted its last prompt), so a run separates what estimation costs from
  // what the policy costs.
  std::vector<int64_t> reference_cached_tokens;
  // Several replicas: the session's last completed turn as another replica
  // recorded it (Router::SessionRecord, through the cluster store). When it
  // is newer than this replica's record and the prompt continues it, the
  // router takes it as its own: the session's instance, and that instance
  // holding the recorded prefix (the chain's first prompt_chunks chunks).
  struct PeerSession {
    int backend = -1;
    uint64_t last_chunk_hash = 0;
    int64_t prompt_chunks = 0;
    int64_t held_tokens = 0;
    absl::Time finished = absl::InfinitePast();
  };
  std::optional<PeerSession> peer_session;
};

// The router's answer for one request. Backend fields are indices into the
// router's backend list (Router::Backends()).
struct Decision {
  RequestClass request_class = RequestClass::kMedium;
  DecisionMode mode = DecisionMode::kColocated;
  int prefill_backend = -1;
  int decode_backend = -1;
  int64_t prompt_tokens_est = 0;
  int64_t cached_tokens_est = 0;  // on the chosen decode backend
  int64_t new_tokens_est = 0;     // prompt_tokens_est - best cached estimate
  bool affinity_hit = false;      // session stayed on its instance
  bool affinity_broken = false;   // session moved because of overload/health
                                  // (or a HEAVY rule moved it, see policies)
  // Placed off its session's instance and predicted past its deadline there,
  // it goes to that instance instead, in time there (router/shed.h).
  bool shed_averted_home = false;
  // The overload rule moved it, and it stays on its session's instance,
  // whose host tier holds its prefix, where its first token comes sooner
  // (router/router.h, RouterStats::kept_home).
  bool kept_home = false;
  // The estimates behind the choice.
  int64_t prefill_cached_tokens_est = 0;  // on the prefill backend
  int64_t best_cached_tokens_est = 0;     // best over healthy backends
  int session_backend = -1;               // session's instance before, -1 none
  // The placement cost model's prediction for the chosen plan, in wall
  // seconds (router/policies/placement_cost.h); -1 when none was made (the
  // router fills it for every policy when Options::offload_cost_known).
  double predicted_ttft_s = -1;
  // OFFLOAD only: from the prefill leg's end to the first token on the
  // decode backend (the KV transfer and the decode backend's wait), the
  // interval the handoff measures as its transfer time.
  double predicted_transfer_s = -1;
  // The request's KV on its decode backend (prompt + expected output) and
  // the KV that backend keeps its resident sessions in, in tokens, for the
  // residency gate (residency_gate.h): its pool, or its host tier or share
  // of the fleet-shared pool when the router prices the tiers and they are
  // larger (BackendSnapshot::resident_capacity_tokens).
  int64_t footprint_tokens_est = 0;
  int64_t decode_capacity_tokens = 0;
};

// What the proxy reports back when a response ends.
struct Outcome {
  bool ok = false;             // 2xx and the response completed
  int64_t prompt_tokens = -1;  // usage.prompt_tokens, -1 if unknown
  int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens
  // Which backend the usage came from (the decode backend normally; the
  // prefill backend when an offload fell back to it).
  int served_by = -1;
  // Whether the serving backend received the prompt's KV from another
  // backend through a KV connector (an executed OFFLOAD). Then its
  // cached_tokens count the transferred tokens and say nothing about its own
  // prefix cache, so the shadow is not corrected from them, and both the
  // prefill and the decode backend now hold the prompt. Set true for the
  // decode leg of a handoff that carried the prefill's KV params (and for a
  // fallback to the prefill backend after its prefill leg ran), false for
  // anything served co-located. Unset: the router assumes a transfer for an
  // OFFLOAD decision served by its decode backend, and then neither learns
  // from cached_tokens nor credits the prefill backend.
  std::optional<bool> kv_transferred = std::nullopt;
  // usage.completion_tokens, -1 if unknown. Lets the router credit a
  // session's next turn with the answer the engine now caches.
  int64_t completion_tokens = -1;
};

// One KV cache event of an engine, as much of it as the router uses
// (kvevents/ decodes the engine's messages; docs/kv-events.md): how many
// tokens' worth of blocks the engine stored or evicted, or that it dropped
// its whole prefix cache.
struct EngineKvEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  int64_t tokens = 0;  // kStored, kRemoved: blocks x block_size
  // The engine's host-memory tier (`medium: "CPU"`, vLLM's CPU offloading),
  // not its GPU prefix cache.
  bool host = false;
  // The engine's time for its batch (KVEventBatch `ts`); InfinitePast:
  // unknown.
  absl::Time at = absl::InfinitePast();
};

// The backend id of the fleet-shared KV pool's event feed (Mooncake Store,
// LMCache remote; docs/kv-events.md) in Router::ApplyEngineKvEvents: the
// pool publishes apart from the engines, and its blocks are every
// instance's to load.
inline constexpr int kPoolBackend = -1;

}  // namespace kvroute::router
