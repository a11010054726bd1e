// The request log: one JSON object per line per finished request
// (DESIGN.md §4). Completions are never written; a prompt is written only
// when the caller fills RequestRecord::prompt (config `request_log_prompts`).
//
//   RequestLog log;  absl::Status st = log.Open("/var/log/kvroute/requests.jsonl");
//   log.Write(record);
//
// Thread-safety: Write() may be called from any thread; lines never
// interleave. A closed (never opened) log drops records.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::proxy {

// Times are wall-clock seconds since the epoch with microseconds; a
// negative time or count means "did not happen / unknown" and is logged as
// null.
struct RequestRecord {
  std::string id;
  std::string session;
  std::string mode;
  std::string route;  // "/v1/chat/completions" ...
  std::string request_class;
  bool stream = false;
  int64_t prompt_tokens_est = -1;
  int64_t cached_tokens_est = -1;
  int64_t new_tokens_est = -1;
  std::string prefill_backend;
  std::string decode_backend;
  double t_arrival = -1;
  double t_routed = -1;
  double t_prefill_done = -1;
  double t_first_token = -1;
  double t_done = -1;
  double transfer_s = -1;
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;
  int64_t completion_tokens = -1;
  int status = 0;
  std::string error;  // empty: none
  int attempts = 0;   // upstream attempts made
  // The routing decision's prediction (router::Decision), wall seconds: time
  // to first token, to set next to t_first_token - t_routed; for an executed
  // offload, the prefill's end to the first token (the KV transfer and the
  // decode backend's wait), to set next to transfer_s.
  double predicted_ttft_s = -1;
  double predicted_transfer_s = -1;
  // Seconds the residency gate held the request back (router/residency_gate.h);
  // -1: not gated (no session, an offload, or the gate is off).
  double residency_wait_s = -1;
  // Several replicas: the turn's reservation in the cluster store
  // (proxy/residency_hold.h ClusterAdmission: "resident", "admitted",
  // "waited", "forced", "unavailable"; empty: not asked), the tokens it reserved, its
  // instance's reserved tokens after it (every replica's) and fill; -1: not
  // asked.
  std::string cluster_admission;
  int64_t cluster_footprint_tokens = -1;
  int64_t cluster_reserved_tokens = -1;
  int64_t cluster_fill_tokens = -1;
  // How the request ended: "ok" (served), "shed" (429 at admission: its
  // predicted TTFT was past its deadline, router/shed.h), "rejected" (refused
  // before routing: bad request, kvroute at its limits or draining, no
  // backend), "failed" (an engine took it and it did not complete), or
  // "client_gone". Set by ServeCompletion.
  std::string outcome;
  // The prompt text (features' prompt bytes); empty: not logged, and the
  // line has no `prompt` field.
  std::string prompt;
};

std::string RequestRecordToJson(const RequestRecord& r);

class RequestLog {
 public:
  RequestLog() = default;
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  absl::Status Open(const std::string& path);
  bool is_open() const;
  void Write(const RequestRecord& record);

 private:
  mutable absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace kvroute::proxy
