// One simulated vLLM instance: an HTTP server (Boost.Beast, C++20 coroutines) in front of an
// Engine, plus the real-time driver that maps the engine's virtual clock to wall time.
// One file per role: instance.cc (life cycle, engine loop), instance_routes.cc (the HTTP
// dispatch table), completion_endpoint.cc (the completion endpoints), agent_endpoints.cc
// (/v1/messages, /v1/responses), instance_ops.cc (faults, /v1/models, /metrics).
//
// Everything of an instance (acceptor, sessions, engine loop) runs on one strand, so the
// Engine needs no lock; instances run in parallel on the fleet's io_context threads. The
// public methods marked thread-safe may be called from anywhere.
//
// Time: virtual time v maps to wall time origin + v * time_scale. With time_scale > 0 each
// step's results are released when the wall clock reaches the step's end; the lag of the
// step start behind its wall time is exported as kvroute_sim_scheduler_lag_seconds. With
// time_scale == 0 steps run back to back (virtual time still advances, metrics use it).
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <absl/status/status.h>
#include <absl/synchronization/mutex.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "sim/api.h"
#include "sim/engine.h"
#include "sim/faults.h"
#include "sim/kv_events.h"
#include "sim/kv_fabric.h"
#include "sim/output_format.h"
#include "sim/profile.h"
#include "sim/responses_api.h"

namespace sim {

struct InstanceOptions {
  int index = 0;
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: an ephemeral port
  Profile profile;
  double time_scale = 1;
  uint64_t seed = 0;
  Faults faults;
  size_t max_body_bytes = 64 * 1024 * 1024;
  std::chrono::seconds keep_alive_timeout{300};
  // KV cache events in vLLM's format (sim/kv_events.h); none unless set.
  std::optional<KvEventPublisherOptions> kv_events;
  // The fleet-shared KV pool (sim/kv_pool.h), owned by the fleet; none unless set. The
  // instance flushes the pool's events after each of its steps.
  KvPool* kv_pool = nullptr;
  // Responses kept for GET /v1/responses/{id} and previous_response_id, oldest forgotten
  // first. 0: none, as vLLM without VLLM_ENABLE_RESPONSES_API_STORE=1.
  size_t responses_store_capacity = 1024;
};

// A thread-safe snapshot of the driver's gauges.
struct InstanceGauges {
  double scheduler_lag_s = 0;
  double max_scheduler_lag_s = 0;
  double gpu_busy_fraction = 0;
  double kv_usage = 0;
  int num_running = 0;
  int num_waiting = 0;
  uint64_t steps = 0;
  double virtual_now = 0;
  int num_hung = 0;  // requests read and parked by the `hang` fault right now
  // With KV events on: blocks in the prefix cache and event batches queued so far, both as
  // of the last batch (a response's events are queued before the response is delivered).
  int64_t num_cached_blocks = 0;
  uint64_t kv_event_batches = 0;
};

class Instance : public KvHolder {
 public:
  // Finds another instance of the same fleet (for /sim/faults {"instance": k}); may be empty.
  using PeerLookup = std::function<Instance*(int index)>;

  Instance(boost::asio::io_context& io, InstanceOptions options, KvFabric& fabric,
           PeerLookup peers);
  ~Instance() override;
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  // Binds the listening socket (synchronously); port() is valid afterwards.
  absl::Status Listen();
  // Starts accepting and the engine loop.
  void Start();
  // Thread-safe. Closes the listener and every connection, stops the engine loop.
  void Stop();

  uint16_t port() const { return port_; }
  int index() const { return options_.index; }
  const std::string& engine_id() const { return engine_id_; }
  const std::string& host() const { return options_.host; }
  // The KV event endpoints as bound by Listen(); empty when events are off.
  std::string kv_events_endpoint() const;
  std::string kv_events_replay_endpoint() const;

  // Thread-safe.
  Faults faults() const;
  void SetFaults(const Faults& faults);
  InstanceGauges gauges() const;

  // Thread-safe (runs on this instance's strand): the prompt tokens the engine would reuse if
  // `tokens` were admitted now (sim/oracle.h).
  boost::asio::awaitable<int64_t> CachedPrefixTokens(
      std::shared_ptr<const std::vector<int32_t>> tokens);
  // Instance `index` of the same fleet (this one included), nullptr beyond the fleet.
  Instance* Peer(int index) const { return peers_ ? peers_(index) : nullptr; }

  // KvHolder (thread-safe).
  void ReleaseHeldKv(const std::string& hold_id) override;
  int instance_index() const override { return options_.index; }

 private:
  // CachedPrefixTokens' work, run on the strand.
  boost::asio::awaitable<int64_t> CountCachedPrefix(
      std::shared_ptr<const std::vector<int32_t>> tokens);
  // Stop and the `killed` fault: wakes every waiting request, aborted.
  void AbortWaitingRequests();
  struct Pending;     // a request in flight (instance_internal.h)
  struct Routes;      // the HTTP dispatch table and the small endpoints (instance_routes.cc)
  struct Completion;  // one completion request (completion_endpoint.cc)
  // Where a streamed answer is between batches (completion_endpoint.cc).
  struct StreamProgress {
    int events_sent = 0;
    bool first = true;      // no event written yet
    bool die = false;       // the die_after_events fault cuts the stream after this batch
    bool finished = false;  // this batch ends the stream
  };
  using Stream = boost::beast::tcp_stream;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  // Life cycle (instance.cc).
  boost::asio::awaitable<void> AcceptLoop();
  boost::asio::awaitable<void> EngineLoop();
  boost::asio::awaitable<void> Session(boost::asio::ip::tcp::socket socket);
  // Dispatches by the table of instance_routes.cc. Returns whether the connection may be
  // kept alive.
  boost::asio::awaitable<bool> Handle(Stream& stream, Request& req);

  // Completion endpoints (completion_endpoint.cc). `format`, when not null, renders the
  // output (and errors) in another API's shapes.
  boost::asio::awaitable<bool> HandleCompletion(Stream& stream, Request& req, Endpoint endpoint,
                                                ChatOutputFormat* format = nullptr);
  std::optional<ApiError> ValidateCompletion(const Request& req, Endpoint endpoint,
                                             CompletionRequest* parsed,
                                             std::vector<int32_t>* tokens, int64_t* max_tokens);
  // A Mooncake/SGLang decode leg: waits for its prefill leg's KV, then pulls it, or prefills
  // locally after engine.pd_pair_timeout_s. false: the request was aborted.
  boost::asio::awaitable<bool> AwaitPrefillLeg(Completion& c, RequestHandle handle,
                                               const std::string& wait_key);
  // A prefill leg's kv_transfer_params for its decode leg; none for any other request.
  std::optional<boost::json::object> KvTransferParams(const Completion& c) const;
  boost::asio::awaitable<bool> ReplyWhole(Completion& c);
  boost::asio::awaitable<bool> ReplyStreamed(Completion& c);
  std::string NextStreamBatch(Completion& c, StreamProgress& progress);

  // /v1/messages and /v1/responses (agent_endpoints.cc): converted to a chat request.
  boost::asio::awaitable<bool> HandleMessages(Stream& stream, Request& req);
  boost::asio::awaitable<bool> HandleResponses(Stream& stream, Request& req);
  std::string RandomHex();
  boost::asio::awaitable<bool> Reply(Stream& stream, const Request& req,
                                     boost::beast::http::status status, const std::string& body,
                                     const std::string& content_type);
  boost::asio::awaitable<bool> ReplyError(Stream& stream, const Request& req,
                                          const ApiError& error,
                                          const ChatOutputFormat* format = nullptr);
  // Operations (instance_ops.cc).
  bool HandleFaultsRequest(const Request& req, std::string* body, int* status);
  std::string RenderMetrics();
  std::string ModelsJson() const;

  void ApplyFaultEffects();  // on the strand
  // The `killed` fault: resets every open connection and drops every request in flight.
  void ResetConnections();  // on the strand
  void Wake();
  void PublishKvEvents();  // on the strand: the engine's events since the last call
  void Deliver(const StepResult& step);
  void UpdateGauges(double lag_s);
  double VirtualNow() const;
  std::chrono::steady_clock::time_point WallOf(double virtual_time) const;

  InstanceOptions options_;
  KvFabric& fabric_;
  PeerLookup peers_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer wake_timer_;
  boost::asio::steady_timer step_timer_;
  boost::asio::steady_timer hang_timer_;
  uint16_t port_ = 0;
  std::string engine_id_;
  std::chrono::steady_clock::time_point wall_origin_;

  std::unique_ptr<KvEventPublisher> kv_events_;  // set by Listen() when configured

  // Strand-only state.
  Engine engine_;
  bool stopping_ = false;
  bool idle_ = false;
  bool accepting_ = false;
  bool killed_ = false;  // the `killed` fault has been applied (reset once per kill)
  std::mt19937_64 rng_;
  uint64_t next_request_seq_ = 0;
  absl::flat_hash_map<RequestHandle, std::shared_ptr<Pending>> pendings_;
  absl::flat_hash_set<Stream*> streams_;
  // Decode legs waiting for their prefill leg to publish (admitted, holding their blocks).
  absl::flat_hash_set<Pending*> pairing_;
  ResponseStore responses_;

  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  InstanceGauges gauges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sim
