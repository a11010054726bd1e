// sim::Instance's completion endpoints, POST /v1/completions and /v1/chat/completions (and,
// through a ChatOutputFormat, /v1/messages and /v1/responses): validation as vLLM's processor
// does it, the request's part in a P/D handoff, the wait of a decode leg for its prefill leg,
// and the answer, whole or streamed one SSE event per decode step.
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <xxhash.h>

#include <boost/json.hpp>

#include "sim/instance.h"
#include "sim/instance_internal.h"
#include "sim/tokenizer.h"
#include "wire/sse.h"

namespace sim {

using internal::kNoThrow;
using internal::Log;
using internal::UnixSeconds;

namespace net = boost::asio;
namespace http = boost::beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;
using net::awaitable;

// One completion request from validation to its last byte; lives in HandleCompletion's frame.
struct Instance::Completion {
  Stream& stream;
  Request& req;
  Endpoint endpoint;
  ChatOutputFormat* format;  // null: the OpenAI shapes of `endpoint`
  CompletionRequest parsed = {};
  std::string base_id = {};  // X-Request-Id, or random
  std::string response_id = {};
  int64_t created = 0;
  uint64_t output_seed = 0;
  int prompt_tokens = 0;
  bool prefill_leg = false;  // P/D: prefill only, KV held for a remote decode
  std::optional<std::string> transfer_id = {};
  std::shared_ptr<Pending> pending = {};
  int die_after = -1;  // the die_after_events fault as the request arrived
};

namespace {

bool GetBool(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() && v->as_bool();
}

std::optional<std::string> GetString(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_int64() || v->is_uint64()) return json::serialize(*v);
  return std::nullopt;
}

// The request's part in a P/D handoff, from kv_transfer_params (NIXL, Mooncake) or SGLang's
// bootstrap fields; a plain request has none of it.
struct HandoffRole {
  bool prefill_leg = false;
  std::optional<std::string> transfer_id;  // Mooncake's pairing id
  // A decode leg whose prefill leg may still be running (Mooncake, SGLang): waits for the KV
  // published under this key.
  std::optional<std::string> wait_key;
  // A NIXL decode leg: claims the KV its prefill leg already holds under this key.
  std::optional<std::string> claim_key;
  // A prefill leg: the keys its held KV is published under.
  std::vector<std::string> publish_keys;
};

// `port` is this instance's (SGLang's bootstrap port), `engine_id` and `request_id` name a
// NIXL prefill leg's held KV.
HandoffRole ReadHandoffRole(const CompletionRequest& parsed, uint16_t port,
                            const std::string& engine_id, const std::string& request_id) {
  HandoffRole role;
  const json::object* kv = parsed.kv_transfer_params ? &*parsed.kv_transfer_params : nullptr;
  role.transfer_id = kv ? GetString(*kv, "transfer_id") : std::nullopt;
  role.prefill_leg = kv != nullptr && GetBool(*kv, "do_remote_decode");
  if (kv != nullptr && GetBool(*kv, "do_remote_prefill")) {
    if (role.transfer_id) {
      role.wait_key = absl::StrCat("mooncake:", *role.transfer_id);
    } else if (auto eid = GetString(*kv, "remote_engine_id"),
               rid = GetString(*kv, "remote_request_id");
               eid && rid) {
      role.claim_key = absl::StrCat("nixl:", *eid, ":", *rid);
    }
  } else if (parsed.bootstrap_room) {
    const std::string key = absl::StrCat("sglang:", *parsed.bootstrap_room);
    if (parsed.bootstrap_port && *parsed.bootstrap_port == port) {
      role.prefill_leg = true;
      role.publish_keys.push_back(key);
    } else {
      role.wait_key = key;
    }
  }
  if (role.prefill_leg) {
    if (role.transfer_id) {
      role.publish_keys.push_back(absl::StrCat("mooncake:", *role.transfer_id));
    } else if (kv != nullptr) {
      role.publish_keys.push_back(absl::StrCat("nixl:", engine_id, ":", request_id));
    }
  }
  return role;
}

}  // namespace

std::optional<ApiError> Instance::ValidateCompletion(const Request& req, Endpoint endpoint,
                                                     CompletionRequest* parsed,
                                                     std::vector<int32_t>* tokens,
                                                     int64_t* max_tokens) {
  if (auto err = ParseCompletionRequest(req.body(), endpoint, parsed)) return err;
  const Profile& profile = options_.profile;
  if (parsed->model && *parsed->model != profile.model_name) {
    return MakeApiError(404, absl::StrCat("The model `", *parsed->model, "` does not exist."),
                        "NotFoundError", "model");
  }
  *tokens = parsed->prompt_is_ids ? std::move(parsed->prompt_ids)
                                  : StandInTokenizer::Encode(parsed->prompt_text);
  const int64_t prompt_len = static_cast<int64_t>(tokens->size());
  *max_tokens = parsed->max_tokens.value_or(profile.max_model_len - prompt_len);
  if (prompt_len + *max_tokens > profile.max_model_len || *max_tokens < 1) {
    return MakeApiError(
        400,
        absl::StrCat("This model's maximum context length is ", profile.max_model_len,
                     " tokens. However, you requested ",
                     prompt_len + std::max<int64_t>(*max_tokens, 1), " tokens (", prompt_len,
                     " in the messages, ", *max_tokens,
                     " in the completion). Please reduce the length of the messages or "
                     "completion."),
        "BadRequestError", "input_tokens");
  }
  // vLLM's processor refuses a priority the scheduler would ignore.
  if (parsed->priority != 0 &&
      engine_.config().scheduling_policy != SchedulingPolicy::kPriority) {
    return MakeApiError(400, absl::StrCat("Got priority ", parsed->priority,
                                          " but Priority scheduling is not enabled."));
  }
  if (absl::Status s = engine_.Validate(prompt_len, *max_tokens); !s.ok()) {
    return MakeApiError(400, std::string(s.message()));
  }
  const double error_rate = faults().error_rate;
  if (error_rate > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < error_rate) {
    return MakeApiError(500, "kvroute-sim: injected internal server error", "InternalServerError");
  }
  return std::nullopt;
}

awaitable<bool> Instance::HandleCompletion(Stream& stream, Request& req, Endpoint endpoint,
                                           ChatOutputFormat* format) {
  Completion c{.stream = stream, .req = req, .endpoint = endpoint, .format = format};
  std::vector<int32_t> tokens;
  int64_t max_tokens = 0;
  const std::optional<ApiError> error =
      ValidateCompletion(req, endpoint, &c.parsed, &tokens, &max_tokens);
  if (error) co_return co_await ReplyError(stream, req, *error, format);
  c.die_after = faults().die_after_events;

  // Request id: X-Request-Id when present (as vLLM), else random.
  if (auto it = req.find("x-request-id"); it != req.end() && !it->value().empty()) {
    c.base_id = std::string(it->value());
  } else {
    c.base_id = absl::StrFormat("%016x%016x", rng_(), rng_());
  }
  c.response_id = ResponseId(endpoint, c.base_id);
  c.created = UnixSeconds();

  c.pending = std::make_shared<Pending>(strand_);
  Pending& pending = *c.pending;
  RequestSpec spec;
  spec.request_id = absl::StrCat(c.response_id, "-", next_request_seq_++);
  spec.max_tokens = static_cast<int>(max_tokens);
  spec.min_tokens = static_cast<int>(c.parsed.min_tokens);
  spec.ignore_eos = c.parsed.ignore_eos;
  spec.priority = c.parsed.priority;
  spec.output_seed = XXH3_64bits_withSeed(c.base_id.data(), c.base_id.size(), options_.seed);
  c.output_seed = spec.output_seed;

  HandoffRole role = ReadHandoffRole(c.parsed, port_, engine_id_, spec.request_id);
  c.prefill_leg = role.prefill_leg;
  c.transfer_id = role.transfer_id;
  pending.publish_keys = std::move(role.publish_keys);
  if (role.prefill_leg) {
    spec.hold_for_remote_decode = true;
    spec.max_tokens = 1;
    pending.hold_id = spec.request_id;
  }
  if (role.claim_key) {
    pending.kv_source = fabric_.Claim(*role.claim_key);
    if (!pending.kv_source) {
      Log()->warn("instance {}: request {}: no KV held under {}, prefilling locally",
                  options_.index, c.base_id, *role.claim_key);
    }
  }
  // A decode leg whose prefill may still be running (Mooncake, SGLang) is admitted at once and
  // holds its blocks while it waits, as vLLM allocates them on arrival.
  spec.pull_remote_kv = pending.kv_source.has_value() || role.wait_key.has_value();
  spec.await_remote_kv = role.wait_key.has_value();
  if (pending.kv_source) spec.source_pulls = pending.kv_source->source_pulls;
  c.prompt_tokens = static_cast<int>(tokens.size());
  spec.prompt = std::move(tokens);

  // An idle engine's clock catches up with the wall clock before the arrival is stamped.
  if (options_.time_scale > 0 && idle_) engine_.AdvanceTo(VirtualNow());
  const RequestHandle handle = engine_.Submit(std::move(spec));
  pendings_[handle] = c.pending;
  Wake();

  // Cleans up whatever way the session leaves.
  struct Cleanup {
    Instance* self;
    RequestHandle handle;
    std::shared_ptr<Pending> p;
    ~Cleanup() {
      if (!p->done) self->engine_.Abort(handle);
      p->ReleaseSource();
      self->pendings_.erase(handle);
    }
  } cleanup{this, handle, c.pending};

  if (role.wait_key) {
    const bool paired_or_local = co_await AwaitPrefillLeg(c, handle, *role.wait_key);
    if (!paired_or_local) co_return false;
  }
  if (!c.parsed.stream) co_return co_await ReplyWhole(c);
  co_return co_await ReplyStreamed(c);
}

awaitable<bool> Instance::AwaitPrefillLeg(Completion& c, RequestHandle handle,
                                          const std::string& wait_key) {
  const std::shared_ptr<Pending>& pending = c.pending;
  std::weak_ptr<Pending> weak = pending;
  const uint64_t ticket = fabric_.ClaimOrWait(wait_key, [this, weak](KvHandle h) {
    net::post(strand_, [weak, h] {
      std::shared_ptr<Pending> p = weak.lock();
      if (!p || p->pair_abandoned || p->aborted) {
        h.holder->ReleaseHeldKv(h.hold_id);
        return;
      }
      p->kv_source = h;
      p->pair_done = true;
      p->Notify();
    });
  });
  const double timeout_s = options_.profile.pd_pair_timeout_s;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  pairing_.insert(pending.get());
  while (!pending->pair_done && !pending->aborted && !stopping_ &&
         std::chrono::steady_clock::now() < deadline) {
    pending->notify.expires_at(deadline);
    co_await pending->notify.async_wait(kNoThrow);
  }
  pairing_.erase(pending.get());
  if (stopping_) pending->aborted = true;
  if (!pending->pair_done) {
    pending->pair_abandoned = true;
    fabric_.CancelWait(wait_key, ticket);
    if (pending->aborted) co_return false;
    Log()->warn("instance {}: request {}: no prefill leg for {} within {} s, prefilling locally",
                options_.index, c.base_id, wait_key, timeout_s);
  }
  if (options_.time_scale > 0 && idle_) engine_.AdvanceTo(VirtualNow());
  if (pending->pair_done) {
    engine_.StartPull(handle, pending->kv_source->source_pulls);
  } else {
    engine_.CancelPull(handle);
  }
  Wake();
  co_return true;
}

std::optional<json::object> Instance::KvTransferParams(const Completion& c) const {
  const RequestInfo& info = c.pending->info;
  if (!c.prefill_leg || info.held_blocks.empty()) return std::nullopt;
  json::object p;
  p["do_remote_prefill"] = true;
  p["do_remote_decode"] = false;
  json::array blocks;
  for (BlockId b : info.held_blocks) blocks.push_back(b);
  p["remote_block_ids"] = std::move(blocks);
  p["remote_engine_id"] = engine_id_;
  p["remote_request_id"] = c.pending->hold_id;
  p["remote_host"] = options_.host;
  p["remote_port"] = port_;
  p["tp_size"] = options_.profile.deployment.tensor_parallel;
  if (c.transfer_id) p["transfer_id"] = *c.transfer_id;
  return p;
}

awaitable<bool> Instance::ReplyWhole(Completion& c) {
  Pending& pending = *c.pending;
  while (!pending.done && !pending.aborted) {
    pending.notify.expires_at(std::chrono::steady_clock::time_point::max());
    co_await pending.notify.async_wait(kNoThrow);
  }
  if (pending.aborted || c.die_after >= 0) co_return false;  // connection dropped, no answer
  std::string text;
  for (const TokenEvent& ev : pending.events) {
    if (ev.token != kNoToken) text += StandInTokenizer::GeneratedPiece(c.output_seed, ev.index);
  }
  const RequestInfo& info = pending.info;
  const Usage usage{.prompt_tokens = info.prompt_tokens,
                    .completion_tokens = info.completion_tokens,
                    .cached_tokens = info.cached_tokens,
                    .always_report_cached_tokens = options_.profile.always_report_cached_tokens};
  std::optional<json::object> kv_params = KvTransferParams(c);
  const std::string& model = options_.profile.model_name;
  const std::string body =
      c.format != nullptr
          ? c.format->FullBody(ChatOutcome{.id = c.response_id,
                                           .created = c.created,
                                           .model = model,
                                           .text = text,
                                           .finish = std::string(FinishReasonName(info.finish)),
                                           .usage = usage,
                                           .kv_transfer_params = kv_params})
          : FullResponseJson(c.endpoint, c.response_id, c.created, model, text,
                             FinishReasonName(info.finish), usage, kv_params);
  const std::string content_type = "application/json";
  co_return co_await Reply(c.stream, c.req, http::status::ok, body, content_type);
}

// The SSE bytes of the events queued so far: a role chunk before the first token (chat and
// other formats), one event per token, and the end (usage, [DONE]) once the request finished.
// Sets *die when the die_after_events fault cuts the stream here, *finished at the end.
std::string Instance::NextStreamBatch(Completion& c, StreamProgress& progress) {
  Pending& pending = *c.pending;
  const std::string& model = options_.profile.model_name;
  std::string batch;
  progress.die = c.die_after == 0;
  while (!progress.die && !pending.events.empty()) {
    const TokenEvent ev = pending.events.front();
    pending.events.pop_front();
    if (progress.first && (c.format != nullptr || c.endpoint == Endpoint::kChatCompletions)) {
      batch += c.format != nullptr
                   ? c.format->StreamStart(c.response_id, c.created, model, c.prompt_tokens)
                   : kvroute::wire::SseData(StreamChunkJson(c.endpoint, c.response_id, c.created,
                                                            model, "", "", true));
      progress.die = c.die_after >= 0 && ++progress.events_sent >= c.die_after;
      if (progress.die) break;
    }
    progress.first = false;
    const std::string_view piece =
        ev.token == kNoToken ? std::string_view()
                             : StandInTokenizer::GeneratedPiece(c.output_seed, ev.index);
    batch += c.format != nullptr
                 ? c.format->StreamText(piece)
                 : kvroute::wire::SseData(StreamChunkJson(c.endpoint, c.response_id, c.created,
                                                          model, piece,
                                                          FinishReasonName(ev.finish), false));
    progress.die = c.die_after >= 0 && ++progress.events_sent >= c.die_after;
  }
  progress.finished = !progress.die && pending.done && pending.events.empty();
  if (!progress.finished) return batch;
  const RequestInfo& info = pending.info;
  if (c.format != nullptr) {
    batch += c.format->StreamEnd(FinishReasonName(info.finish),
                                 Usage{.prompt_tokens = info.prompt_tokens,
                                       .completion_tokens = info.completion_tokens,
                                       .cached_tokens = info.cached_tokens});
    return batch;
  }
  if (c.parsed.include_usage) {
    batch += kvroute::wire::SseData(UsageChunkJson(
        c.endpoint, c.response_id, c.created, model,
        Usage{.prompt_tokens = info.prompt_tokens,
              .completion_tokens = info.completion_tokens,
              .cached_tokens = info.cached_tokens,
              .always_report_cached_tokens = options_.profile.always_report_cached_tokens}));
  }
  batch += kvroute::wire::kSseDone;
  return batch;
}

awaitable<bool> Instance::ReplyStreamed(Completion& c) {
  const Request& req = c.req;
  http::response<http::empty_body> res{http::status::ok, req.version() ? req.version() : 11};
  res.set(http::field::server, "kvroute-sim");
  res.set(http::field::content_type, "text/event-stream; charset=utf-8");
  if (auto id = req.find("x-request-id"); id != req.end()) res.set("x-request-id", id->value());
  res.keep_alive(req.keep_alive());
  res.chunked(true);
  http::response_serializer<http::empty_body> serializer{res};
  if (auto [ec, n] = co_await http::async_write_header(c.stream, serializer, kNoThrow); ec) {
    co_return false;
  }
  Pending& pending = *c.pending;
  StreamProgress progress;
  for (;;) {
    while (pending.events.empty() && !pending.done && !pending.aborted) {
      pending.notify.expires_at(std::chrono::steady_clock::time_point::max());
      co_await pending.notify.async_wait(kNoThrow);
    }
    if (pending.aborted) co_return false;
    const std::string batch = NextStreamBatch(c, progress);
    if (!batch.empty()) {
      const auto chunk = http::make_chunk(net::buffer(batch));
      auto [ec, n] = co_await net::async_write(c.stream, chunk, kNoThrow);
      if (ec) co_return false;
    }
    if (progress.die) {
      // Injected fault: the connection drops mid-stream, without the terminating chunk.
      boost::system::error_code ec;
      c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      co_return false;
    }
    if (progress.finished) {
      const auto last = http::make_chunk_last();
      auto [ec, n] = co_await net::async_write(c.stream, last, kNoThrow);
      co_return !ec && req.keep_alive();
    }
  }
}

}  // namespace sim
