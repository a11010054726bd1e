// transfer::Connector: how one KV connector protocol wants the two legs of a
// prefill/decode handoff to look (PROTOCOLS.md §3). A connector only shapes
// request bodies; the proxy sends them, the engines move the KV bytes.
//
//   auto c = transfer::MakeConnector("nixl");           // or mooncake, sglang
//   HandoffPlan plan = ...;                              // ids, hosts, ports
//   absl::StatusOr<std::string> p = (*c)->PrefillBody(client_body, plan);
//   ... send p to A; A's JSON response carries kv_transfer_params ...
//   absl::StatusOr<std::string> d = (*c)->DecodeBody(client_body, plan, params);
//
// Sequential connectors (NIXL) need the prefill response before the decode
// leg; concurrent ones (Mooncake, SGLang) send both legs at once.
// Thread-safety: connectors are immutable after construction; all methods
// are const and safe from any thread.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvroute::transfer {

// Everything a connector needs to know about one handoff.
struct HandoffPlan {
  std::string request_id;      // X-Request-Id of both legs
  std::string prefill_host;    // instance A
  uint16_t prefill_port = 0;
  uint16_t bootstrap_port = 8998;  // A's Mooncake/SGLang bootstrap server
  std::string engine_id;       // Mooncake: A's engine_id from its bootstrap /query
  uint64_t bootstrap_room = 0; // SGLang: random 63-bit pairing id
};

class Connector {
 public:
  virtual ~Connector() = default;
  virtual std::string_view name() const = 0;
  // True when the decode leg is built from the prefill leg's response.
  virtual bool sequential() const = 0;
  // True when the proxy must learn A's engine_id from its bootstrap /query.
  virtual bool needs_engine_id() const { return false; }

  // The prefill leg's body, from the client's parsed body.
  virtual absl::StatusOr<std::string> PrefillBody(const boost::json::object& client,
                                                  const HandoffPlan& plan) const = 0;
  // The decode leg's body. `prefill_params` is the prefill response's
  // top-level kv_transfer_params (sequential connectors only; nullopt when A
  // returned none, in which case B prefills by itself).
  virtual absl::StatusOr<std::string> DecodeBody(
      const boost::json::object& client, const HandoffPlan& plan,
      const std::optional<boost::json::object>& prefill_params) const = 0;
};

// Builds a connector by name: nixl, mooncake or sglang. InvalidArgument for
// any other name (a config error at start-up).
absl::StatusOr<std::unique_ptr<Connector>> MakeConnector(std::string_view name);

// Parses A's bootstrap /query answer ({"<dp_rank>": {"engine_id", ...}}) and
// returns rank 0's engine_id (or the lowest rank's).
absl::StatusOr<std::string> EngineIdFromQuery(std::string_view body);

// Turns a client request body into the prefill leg's shape every connector
// shares: stream off, one output token, no stream_options or min_tokens.
void MakePrefillOnly(boost::json::object* body);

}  // namespace kvroute::transfer
