#include "transfer/connector.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvroute::transfer {
namespace {

namespace json = boost::json;

// The client's body with `kv_transfer_params` set, as a prefill-only leg
// (MakePrefillOnly) or as-is for a decode leg.
std::string WithTransferParams(const json::object& client, json::object params,
                               bool prefill_only) {
  json::object body = client;
  if (prefill_only) MakePrefillOnly(&body);
  body["kv_transfer_params"] = std::move(params);
  return json::serialize(body);
}

// vLLM NixlConnector: sequential; A returns the handle the decode leg needs.
class NixlConnector : public Connector {
 public:
  std::string_view name() const override { return "nixl"; }
  bool sequential() const override { return true; }

  absl::StatusOr<std::string> PrefillBody(const json::object& client,
                                          const HandoffPlan& plan) const override {
    json::object params;
    params["do_remote_decode"] = true;
    params["do_remote_prefill"] = false;
    params["remote_engine_id"] = nullptr;
    params["remote_block_ids"] = nullptr;
    params["remote_host"] = nullptr;
    params["remote_port"] = nullptr;
    return WithTransferParams(client, std::move(params), /*prefill_only=*/true);
  }

  absl::StatusOr<std::string> DecodeBody(
      const json::object& client, const HandoffPlan& plan,
      const std::optional<json::object>& prefill_params) const override {
    if (!prefill_params) return json::serialize(client);  // B prefills itself
    // Verbatim, opaque: newer engines add fields kvroute need not know.
    return WithTransferParams(client, *prefill_params, /*prefill_only=*/false);
  }
};

// vLLM MooncakeConnector: concurrent legs paired by a proxy-made transfer_id.
class MooncakeConnector : public Connector {
 public:
  std::string_view name() const override { return "mooncake"; }
  bool sequential() const override { return false; }
  bool needs_engine_id() const override { return true; }

  absl::StatusOr<std::string> PrefillBody(const json::object& client,
                                          const HandoffPlan& plan) const override {
    json::object params;
    params["do_remote_decode"] = true;
    params["do_remote_prefill"] = false;
    params["transfer_id"] = TransferId(plan);
    return WithTransferParams(client, std::move(params), /*prefill_only=*/true);
  }

  absl::StatusOr<std::string> DecodeBody(const json::object& client, const HandoffPlan& plan,
                                         const std::optional<json::object>&) const override {
    if (plan.engine_id.empty()) {
      return absl::FailedPreconditionError("mooncake: prefill instance's engine_id is unknown");
    }
    json::object params;
    params["do_remote_decode"] = false;
    params["do_remote_prefill"] = true;
    params["remote_bootstrap_addr"] =
        absl::StrCat("http://", plan.prefill_host, ":", plan.bootstrap_port);
    params["remote_engine_id"] = plan.engine_id;
    params["transfer_id"] = TransferId(plan);
    return WithTransferParams(client, std::move(params), /*prefill_only=*/false);
  }

 private:
  static std::string TransferId(const HandoffPlan& plan) {
    return absl::StrCat("xfer-", plan.request_id);
  }
};

// SGLang PD: one body, sent to both servers at once.
class SglangConnector : public Connector {
 public:
  std::string_view name() const override { return "sglang"; }
  bool sequential() const override { return false; }

  absl::StatusOr<std::string> PrefillBody(const json::object& client,
                                          const HandoffPlan& plan) const override {
    return Body(client, plan);
  }
  absl::StatusOr<std::string> DecodeBody(const json::object& client, const HandoffPlan& plan,
                                         const std::optional<json::object>&) const override {
    return Body(client, plan);
  }

 private:
  static std::string Body(const json::object& client, const HandoffPlan& plan) {
    json::object body = client;
    body["bootstrap_host"] = plan.prefill_host;
    body["bootstrap_port"] = plan.bootstrap_port;
    body["bootstrap_room"] = plan.bootstrap_room & 0x7fffffffffffffffULL;
    return json::serialize(body);
  }
};

}  // namespace

void MakePrefillOnly(json::object* body) {
  (*body)["stream"] = false;
  (*body)["max_tokens"] = 1;
  if (body->contains("max_completion_tokens")) (*body)["max_completion_tokens"] = 1;
  body->erase("stream_options");
  body->erase("min_tokens");
}

absl::StatusOr<std::unique_ptr<Connector>> MakeConnector(std::string_view name) {
  if (name == "nixl") return std::make_unique<NixlConnector>();
  if (name == "mooncake") return std::make_unique<MooncakeConnector>();
  if (name == "sglang") return std::make_unique<SglangConnector>();
  return absl::InvalidArgumentError(absl::StrCat(
      "transfer.connector: unknown connector '", std::string(name),
      "' (expected nixl, mooncake or sglang)"));
}

absl::StatusOr<std::string> EngineIdFromQuery(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) {
    return absl::InvalidArgumentError("bootstrap /query: not a JSON object");
  }
  const json::object* best = nullptr;
  int64_t best_rank = std::numeric_limits<int64_t>::max();
  for (const auto& [key, value] : v.get_object()) {
    int64_t rank = 0;
    if (!absl::SimpleAtoi(absl::string_view(key.data(), key.size()), &rank) ||
        !value.is_object()) {
      continue;
    }
    if (rank < best_rank) {
      best_rank = rank;
      best = &value.get_object();
    }
  }
  if (best == nullptr) return absl::NotFoundError("bootstrap /query: no dp rank entry");
  const json::value* id = best->if_contains("engine_id");
  if (id == nullptr) return absl::NotFoundError("bootstrap /query: no engine_id");
  if (id->is_string()) return std::string(id->get_string());
  return json::serialize(*id);
}

}  // namespace kvroute::transfer
