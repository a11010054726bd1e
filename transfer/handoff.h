// transfer::Handoff: the sequencing of a prefill/decode handoff and every
// fallback when it cannot run. Instance A prefills the prompt, the engines
// move its KV, instance B decodes and streams to the client. Sequential
// connectors (NIXL) run the decode leg after the prefill leg, with A's
// kv_transfer_params; concurrent ones (Mooncake, SGLang) send both legs at
// once. Whatever fails, the request is still served:
//
//   what fails                      result                          outcome
//   max_offload_inflight reached    co-located on B                 over_bound
//   Mooncake bootstrap /query       co-located on B                 bootstrap_failed
//   prefill leg (error, timeout)    co-located on B                 prefill_failed
//   decode leg before a byte        co-located on A (holds the KV)  decode_failed
//   decode leg after a byte         the client saw a broken stream  stream_error
//   the client disconnects          nothing more to serve           client_gone
//
// The handoff sends nothing itself: the caller implements LegRunner, which
// runs one leg (the proxy relays it over HTTP; tests script it), and serves
// the co-located fallback the result names.
//
//   Handoff handoff(std::move(connector), config.transfer.max_offload_inflight);
//   handoff.bootstrap().SetPorts(ports_by_backend_name, default_port);
//   MyLegRunner legs(...);
//   HandoffResult r = co_await handoff.Run(request, legs, random);
//   if (r.fallback != HandoffResult::Fallback::kNone) ... serve co-located
//
// Thread-safety: a Handoff is shared by every connection of a server; Run
// may be called from any thread concurrently (the bound is atomic, the
// bootstrap directory locks). One Run's legs all run on the executor Run is
// awaited on.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/bit_gen_ref.h"
#include "absl/synchronization/mutex.h"
#include "transfer/connector.h"

namespace kvroute::transfer {

// The bound on handoffs in flight (transfer.max_offload_inflight). A slot is
// taken with one compare-and-swap, so concurrent takers never exceed the
// limit, and given back when its Slot is destroyed.
//
//   InflightBound bound(4);
//   if (InflightBound::Slot slot = bound.TryAcquire()) { ... }  // released here
//
// Thread-safety: thread-safe; must outlive its slots.
class InflightBound {
 public:
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept : bound_(std::exchange(other.bound_, nullptr)) {}
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        Release();
        bound_ = std::exchange(other.bound_, nullptr);
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { Release(); }
    explicit operator bool() const { return bound_ != nullptr; }
    void Release() {
      if (bound_ != nullptr) std::exchange(bound_, nullptr)->inflight_.fetch_sub(1);
    }

   private:
    friend class InflightBound;
    explicit Slot(InflightBound* bound) : bound_(bound) {}
    InflightBound* bound_ = nullptr;
  };

  explicit InflightBound(int64_t limit) : limit_(limit) {}
  // A held slot, or an empty one when `limit` slots are held.
  Slot TryAcquire();
  int64_t inflight() const { return inflight_.load(); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> inflight_{0};
};

// Where each prefill instance's bootstrap server listens (Mooncake,
// SGLang), by backend name, and the Mooncake engine id learned from each
// backend slot's bootstrap /query (cached until a handoff to it fails).
// Thread-safety: thread-safe.
class BootstrapDirectory {
 public:
  // Replaces the ports (a reload): `ports` by backend name; any other name
  // gets `fallback`.
  void SetPorts(absl::flat_hash_map<std::string, uint16_t> ports, uint16_t fallback);
  uint16_t Port(std::string_view backend) const;

  std::optional<std::string> EngineId(int backend) const;
  void RememberEngineId(int backend, std::string engine_id);
  void ForgetEngineId(int backend);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint16_t> ports_ ABSL_GUARDED_BY(mu_);
  uint16_t fallback_port_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int, std::string> engine_ids_ ABSL_GUARDED_BY(mu_);
};

// How one leg ended, as the handoff needs to know it.
struct LegReport {
  bool completed = false;        // the whole response arrived (and reached the client)
  int status = 0;                // the engine's HTTP status; 0 when none came
  bool headers_sent = false;     // a client-facing leg: the client has a response header
  bool client_gone = false;      // the client went away
  bool upstream_failed = false;  // failed before a response header, or answered 5xx
  double t_first_byte = -1;      // wall seconds of the first token (a stream's first body byte); -1 none
  double t_done = -1;            // wall seconds the leg ended (prefill legs)
  std::string body;              // a prefill leg's captured response body
};

// Runs the legs of one handoff for Handoff::Run. Implemented by the caller
// (the proxy relays each leg over HTTP). All calls of one Run come on the
// executor Run is awaited on, and the runner outlives the Run.
class LegRunner {
 public:
  virtual ~LegRunner() = default;
  // Wall seconds now (the caller's clock).
  virtual double Now() = 0;
  // GETs /query from A's bootstrap server: its body on HTTP 200, else nullopt.
  virtual boost::asio::awaitable<std::optional<std::string>> QueryBootstrap(const std::string& host,
                                                                            uint16_t port) = 0;
  // Sends the prefill leg to A and captures its response (never relayed).
  // `watch_client`: the leg ends with client_gone if the client disconnects.
  virtual boost::asio::awaitable<LegReport> RunPrefill(std::string body, bool watch_client) = 0;
  // Sends the decode leg to B and relays its response to the client; an
  // engine 5xx is upstream_failed, not relayed. `kv_transferred`: B gets the
  // prompt's KV from A (its cached_tokens are not its own cache's).
  virtual boost::asio::awaitable<LegReport> RunDecode(std::string body, bool kv_transferred) = 0;
  // Cut the running leg short (concurrent connectors): it ends soon after
  // with neither client_gone nor upstream_failed set.
  virtual void CancelPrefill() = 0;
  virtual void CancelDecode() = 0;
};

// One handoff to run.
struct HandoffRequest {
  std::string_view request_id;    // X-Request-Id of both legs
  std::string_view client_body;   // the client's JSON body
  int prefill_backend = -1;       // A's slot (the engine-id cache's key)
  std::string_view prefill_name;  // A's name (the bootstrap port's key)
  std::string_view prefill_host;
  uint16_t prefill_port = 0;
};

struct HandoffResult {
  enum class Fallback {
    kNone,       // the handoff ran; the decode leg (or the prefill leg, see below) is the answer
    kOnDecode,   // serve the request co-located on B
    kOnPrefill,  // serve it co-located on A, which holds the prompt's KV
  };
  Fallback fallback = Fallback::kNone;
  // kvroute_offloads_total's outcome: ok, failed, stream_error, client_gone,
  // over_bound, bootstrap_failed, bad_body, prefill_failed, decode_failed.
  std::string_view outcome;
  bool no_kv_params = false;    // A returned no kv_transfer_params: B prefilled by itself
  bool decode_ran = false;      // false: the client-facing result is the prefill leg's
  bool kv_transferred = false;  // B got the prompt's KV through the connector
  int attempts = 0;             // legs sent
  // The prefill leg's duration when it succeeded, whatever came after.
  double prefill_seconds = -1;
  // When the handoff ran to its end (not a fallback, the client stayed
  // while both legs ran): wall seconds the prefill leg succeeded, and from
  // then to the decode leg's first byte; else -1.
  double t_prefill_done = -1;
  double transfer_s = -1;
};

class Handoff {
 public:
  Handoff(std::unique_ptr<Connector> connector, int64_t max_inflight)
      : connector_(std::move(connector)), bound_(max_inflight) {}

  const Connector& connector() const { return *connector_; }
  BootstrapDirectory& bootstrap() { return bootstrap_; }
  const InflightBound& bound() const { return bound_; }

  // Runs one handoff through `legs`. `random` draws the SGLang bootstrap
  // room. Never fails: a handoff that cannot run names its fallback.
  boost::asio::awaitable<HandoffResult> Run(const HandoffRequest& request, LegRunner& legs,
                                            absl::BitGenRef random);

 private:
  boost::asio::awaitable<std::string> PrefillEngineId(const HandoffRequest& request,
                                                      uint16_t bootstrap_port, LegRunner& legs);

  const std::unique_ptr<Connector> connector_;
  InflightBound bound_;
  BootstrapDirectory bootstrap_;
};

}  // namespace kvroute::transfer
