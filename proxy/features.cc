#include "proxy/features.h"

#include <boost/json.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "proxy/absl_compat.h"
#include "proxy/agent_prefix.h"
#include "proxy/features_scan.h"

namespace kvroute::proxy {
namespace {

namespace json = boost::json;

absl::Status Bad(std::string_view msg) { return absl::InvalidArgumentError(ToAbsl(msg)); }

// Chat messages are rendered role by role so that a conversation's bytes are
// a prefix of its next turn's bytes (as the engine's chat template makes its
// tokens a prefix).
absl::Status AppendContent(const json::value& content, size_t index, std::string* out) {
  if (content.is_null()) return absl::OkStatus();
  if (content.is_string()) {
    out->append(content.get_string().data(), content.get_string().size());
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return Bad(absl::StrCat("messages[", index, "].content must be a string or a list of parts"));
  }
  for (const json::value& part : content.get_array()) {
    if (!part.is_object()) {
      return Bad(absl::StrCat("messages[", index, "].content parts must be objects"));
    }
    const json::object& p = part.get_object();
    const json::value* type = p.if_contains("type");
    if (type == nullptr || !type->is_string()) {
      return Bad(absl::StrCat("messages[", index, "].content part needs a string 'type'"));
    }
    if (const json::value* text = p.if_contains("text"); text != nullptr && text->is_string()) {
      out->append(text->get_string().data(), text->get_string().size());
    } else {
      // Non-text parts (images, audio) identify themselves by their
      // serialised form: the same image gives the same bytes.
      out->append(json::serialize(part));
    }
  }
  return absl::OkStatus();
}

absl::Status RenderChat(const json::object& body, const FeatureLimits& limits, std::string* out) {
  if (absl::Status st = AppendTools(body, out); !st.ok()) return st;
  absl::StatusOr<const json::array*> messages = RequiredMessages(body, limits);
  if (!messages.ok()) return messages.status();
  const json::array& arr = **messages;
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) return Bad(absl::StrCat("messages[", i, "] must be an object"));
    const json::object& m = arr[i].get_object();
    const json::value* role = m.if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return Bad(absl::StrCat("messages[", i, "].role must be a string"));
    }
    out->append("<|");
    out->append(role->get_string().data(), role->get_string().size());
    out->append("|>");
    if (const json::value* content = m.if_contains("content")) {
      if (absl::Status st = AppendContent(*content, i, out); !st.ok()) return st;
    }
    if (const json::value* calls = m.if_contains("tool_calls"); calls != nullptr) {
      out->append(json::serialize(*calls));
    }
    out->push_back('\n');
  }
  return absl::OkStatus();
}

absl::Status AppendTokenIds(const json::array& ids, std::string* out) {
  for (const json::value& id : ids) {
    if (!id.is_int64() && !id.is_uint64()) {
      return Bad("'prompt' token ids must be integers");
    }
    if (id.is_int64()) {
      absl::StrAppend(out, id.get_int64(), " ");
    } else {
      absl::StrAppend(out, id.get_uint64(), " ");
    }
  }
  return absl::OkStatus();
}

absl::Status RenderPrompt(const json::object& body, std::string* out) {
  const json::value* prompt = body.if_contains("prompt");
  if (prompt == nullptr) return Bad("'prompt' is a required property");
  if (prompt->is_string()) {
    out->append(prompt->get_string().data(), prompt->get_string().size());
    return absl::OkStatus();
  }
  if (!prompt->is_array()) {
    return Bad("'prompt' must be a string, a list of strings or a list of token ids");
  }
  const json::array& arr = prompt->get_array();
  if (arr.empty()) return Bad("'prompt' must not be empty");
  if (arr[0].is_string() || arr[0].is_array()) {
    // A batch: the prompts are rendered one after another; the first one
    // decides the prefix the router sees.
    for (const json::value& p : arr) {
      if (p.is_string()) {
        out->append(p.get_string().data(), p.get_string().size());
      } else if (p.is_array()) {
        if (absl::Status st = AppendTokenIds(p.get_array(), out); !st.ok()) return st;
      } else {
        return Bad("'prompt' list entries must all be strings or all be token id lists");
      }
      out->push_back('\x1e');
    }
    return absl::OkStatus();
  }
  return AppendTokenIds(arr, out);
}

// ---------------------------------------------------------------------------
// Anthropic Messages. vLLM turns the body into a chat request (system first,
// then the messages, tools passed to the template) and keeps only the fields
// its content block model knows: `cache_control`, which clients move to the
// newest block every turn, never reaches the engine, so it never reaches the
// canonical prompt either.
// ---------------------------------------------------------------------------

absl::Status ReadTokenLimit(const json::object& body, const char* key,
                            const FeatureLimits& limits, int64_t* max_tokens) {
  const json::value* v = body.if_contains(key);
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (v->is_uint64()) return Bad(absl::StrCat("'", key, "' is too large"));
  if (!v->is_int64()) return Bad(absl::StrCat("'", key, "' must be an integer"));
  const int64_t n = v->get_int64();
  if (n < 0) return Bad(absl::StrCat("'", key, "' must be at least 0"));
  if (n > limits.max_tokens_limit) {
    return Bad(absl::StrCat("'", key, "' = ", n, " exceeds the limit of ",
                            limits.max_tokens_limit));
  }
  *max_tokens = n;
  return absl::OkStatus();
}

absl::Status ReadOptionalString(const json::object& body, const char* key, std::string* out) {
  const json::value* v = body.if_contains(key);
  if (v == nullptr || v->is_null()) return absl::OkStatus();
  if (!v->is_string()) return Bad(absl::StrCat("'", key, "' must be a string"));
  *out = std::string(v->get_string());
  return absl::OkStatus();
}

absl::Status ReadMaxTokens(const json::object& body, const FeatureLimits& limits,
                           int64_t* max_tokens) {
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const json::value* v = body.if_contains(key);
    if (v == nullptr || v->is_null()) continue;
    int64_t n = 0;
    if (v->is_int64()) {
      n = v->get_int64();
    } else if (v->is_uint64()) {
      return Bad(absl::StrCat("'", key, "' is too large"));
    } else {
      return Bad(absl::StrCat("'", key, "' must be an integer"));
    }
    if (n < 0) return Bad(absl::StrCat("'", key, "' must be at least 0"));
    if (n > limits.max_tokens_limit) {
      return Bad(absl::StrCat("'", key, "' = ", n, " exceeds the limit of ",
                              limits.max_tokens_limit));
    }
    *max_tokens = n;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
absl::StatusOr<router::RequestFeatures> ExtractAnthropic(const json::object& obj,
                                                         std::string_view session_header,
                                                         const FeatureLimits& limits,
                                                         router::RequestFeatures f) {
  if (absl::Status st = ReadTokenLimit(obj, "max_tokens", limits, &f.max_tokens); !st.ok()) {
    return st;
  }
  if (!session_header.empty()) {
    f.session_id = std::string(session_header);
  } else if (const json::value* meta = obj.if_contains("metadata");
             meta != nullptr && !meta->is_null()) {
    if (!meta->is_object()) return Bad("'metadata' must be an object");
    const json::value* user = meta->get_object().if_contains("user_id");
    if (user != nullptr && !user->is_null()) {
      if (!user->is_string()) return Bad("'metadata.user_id' must be a string");
      f.session_id = std::string(user->get_string());
    }
  }
  if (absl::Status st = RenderAnthropic(obj, limits, &f.prompt_bytes); !st.ok()) return st;
  return f;
}

absl::StatusOr<router::RequestFeatures> ExtractResponses(const json::object& obj,
                                                         std::string_view session_header,
                                                         const FeatureLimits& limits,
                                                         router::RequestFeatures f) {
  if (absl::Status st = ReadTokenLimit(obj, "max_output_tokens", limits, &f.max_tokens);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          ReadOptionalString(obj, "previous_response_id", &f.previous_response_id);
      !st.ok()) {
    return st;
  }
  if (!session_header.empty()) {
    f.session_id = std::string(session_header);
  } else if (absl::Status st = ReadOptionalString(obj, "prompt_cache_key", &f.session_id);
             !st.ok()) {
    return st;
  }
  if (absl::Status st = RenderResponses(obj, limits, &f.prompt_bytes); !st.ok()) return st;
  return f;
}

absl::StatusOr<router::RequestFeatures> ExtractFeaturesDom(Endpoint endpoint,
                                                           std::string_view body,
                                                           std::string_view session_header,
                                                           const FeatureLimits& limits) {
  if (body.empty()) return Bad("request body is empty; expected a JSON object");
  json::parse_options opts;
  opts.max_depth = static_cast<size_t>(limits.max_json_depth);
  boost::system::error_code ec;
  json::monotonic_resource mr;
  json::value root = json::parse(json::string_view(body.data(), body.size()), ec, &mr, opts);
  if (ec) {
    if (ec == json::error::too_deep) {
      return Bad(absl::StrCat("request body nests deeper than ", limits.max_json_depth,
                              " levels"));
    }
    return Bad(absl::StrCat("request body is not valid JSON: ", ec.message()));
  }
  if (!root.is_object()) return Bad("request body must be a JSON object");
  const json::object& obj = root.get_object();

  router::RequestFeatures f;
  if (const json::value* model = obj.if_contains("model"); model != nullptr) {
    if (!model->is_string()) return Bad("'model' must be a string");
    f.model = std::string(model->get_string());
  }
  if (const json::value* stream = obj.if_contains("stream"); stream != nullptr) {
    if (stream->is_bool()) {
      f.stream = stream->get_bool();
    } else if (!stream->is_null()) {
      return Bad("'stream' must be a boolean");
    }
  }
  if (endpoint == Endpoint::kMessages) {
    return ExtractAnthropic(obj, session_header, limits, std::move(f));
  }
  if (endpoint == Endpoint::kResponses) {
    return ExtractResponses(obj, session_header, limits, std::move(f));
  }
  if (absl::Status st = ReadMaxTokens(obj, limits, &f.max_tokens); !st.ok()) return st;

  if (!session_header.empty()) {
    f.session_id = std::string(session_header);
  } else if (const json::value* sid = obj.if_contains("session_id"); sid != nullptr) {
    if (sid->is_string()) {
      f.session_id = std::string(sid->get_string());
    } else if (!sid->is_null()) {
      return Bad("'session_id' must be a string");
    }
  }

  absl::Status st = endpoint == Endpoint::kChat ? RenderChat(obj, limits, &f.prompt_bytes)
                                                : RenderPrompt(obj, &f.prompt_bytes);
  if (!st.ok()) return st;
  return f;
}

}  // namespace

absl::StatusOr<router::RequestFeatures> ExtractFeatures(Endpoint endpoint, std::string_view body,
                                                        std::string_view session_header,
                                                        const FeatureLimits& limits) {
  if (std::optional<router::RequestFeatures> f =
          ExtractFeaturesFast(endpoint, body, session_header, limits)) {
    return *std::move(f);
  }
  return ExtractFeaturesDom(endpoint, body, session_header, limits);
}

absl::StatusOr<router::RequestFeatures> ExtractFeaturesWithDomForTest(
    Endpoint endpoint, std::string_view body, std::string_view session_header,
    const FeatureLimits& limits) {
  return ExtractFeaturesDom(endpoint, body, session_header, limits);
}

}  // namespace kvroute::proxy
