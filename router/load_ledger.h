// LoadLedger: the load each backend carries as the router reserved it, by
// request: what is in flight, what is still to prefill, what decodes, and the
// tokens of requests without a session (sessions' memory demand is the
// residency model's, router/residency_gate.h).
//
//   LoadLedger ledger(n);
//   LoadLedger::Claim c = ledger.Reserve({.prefill = 2, .decode = 2, ...});
//   ... first token:   ledger.FirstToken(c);
//   ... it ended:      ledger.Release(c, /*first_token=*/true);
//   ... ejected:       ledger.Reset(2);
//
// Reset is the one place a backend's counters restart at zero: it bumps the
// backend's epoch, and a claim taken in an older epoch no longer touches the
// counters when its request moves on or ends.
//
// Not thread-safe: the Router owns it under its mutex.
#pragma once

#include <cstdint>
#include <vector>

namespace kvroute::router {

class LoadLedger {
 public:
  // One backend's counters.
  struct Load {
    int64_t inflight_requests = 0;
    int64_t inflight_prefill_tokens = 0;
    int64_t decoding_requests = 0;
    int64_t inflight_tokens = 0;
    int64_t sessionless_tokens = 0;  // inflight_tokens of requests without a session
  };

  // What one request adds, and where.
  struct Request {
    int prefill = -1;
    int decode = -1;
    bool offload = false;             // a prefill leg on `prefill`, the decode on `decode`
    int64_t prefill_new_tokens = 0;   // to compute on `prefill`
    int64_t prompt_tokens = 0;        // an offload's prompt, held on `prefill` until its first token
    int64_t total_tokens = 0;         // prompt + expected output, on `decode`
    bool sessionless = false;
  };

  // A reservation: the request and the epochs it was taken in.
  struct Claim {
    Request request;
    uint64_t prefill_epoch = 0;
    uint64_t decode_epoch = 0;
  };

  explicit LoadLedger(int backends) : load_(backends), epoch_(backends, 0) {}

  // Slots only grow (router/router.h: indices stay valid).
  void Resize(int backends);
  const Load& at(int backend) const { return load_[backend]; }
  uint64_t epoch(int backend) const { return epoch_[backend]; }
  // Whether `backend`'s counters still hold what `claim` reserved there.
  bool Live(const Claim& claim, int backend) const;

  Claim Reserve(const Request& r);
  // The first token: the prefill is done (an offload's prefill backend only
  // serves the KV pull now) and the request decodes.
  void FirstToken(const Claim& c);
  // The request ended (or moves elsewhere); `first_token` as it stands.
  void Release(const Claim& c, bool first_token);
  // The backend's counters restart at zero, in a new epoch.
  void Reset(int backend);

 private:
  std::vector<Load> load_;
  std::vector<uint64_t> epoch_;
};

}  // namespace kvroute::router
