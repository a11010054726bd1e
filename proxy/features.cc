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

// Tool definitions, first in the prompt as the chat template puts them:
// "<|tools|>" and their compact serialisation. Absent, null or empty: nothing.
absl::Status AppendTools(const json::object& body, std::string* out) {
  const json::value* tools = body.if_contains("tools");
  if (tools == nullptr || tools->is_null()) return absl::OkStatus();
  if (!tools->is_array()) return Bad("'tools' must be a list");
  if (tools->get_array().empty()) return absl::OkStatus();
  out->append("<|tools|>");
  out->append(json::serialize(*tools));
  out->push_back('\n');
  return absl::OkStatus();
}

absl::Status RenderChat(const json::object& body, const FeatureLimits& limits, std::string* out) {
  if (absl::Status st = AppendTools(body, out); !st.ok()) return st;
  const json::value* messages = body.if_contains("messages");
  if (messages == nullptr) return Bad("'messages' is a required property");
  if (!messages->is_array()) return Bad("'messages' must be a list");
  const json::array& arr = messages->get_array();
  if (arr.empty()) return Bad("'messages' must not be empty");
  if (arr.size() > limits.max_messages) {
    return Bad(absl::StrCat("'messages' has ", arr.size(), " entries; at most ",
                            limits.max_messages, " are accepted"));
  }
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

void AppendString(const json::value& v, std::string* out) {
  out->append(v.get_string().data(), v.get_string().size());
}

// A block of a type without a rendering of its own: its fields but
// `cache_control`, serialised.
void AppendOpaqueBlock(const json::object& block, std::string* out) {
  if (!block.contains("cache_control")) {
    out->append(json::serialize(block));
    return;
  }
  json::object copy = block;
  copy.erase("cache_control");
  out->append(json::serialize(copy));
}

absl::Status AppendAnthropicTools(const json::object& body, std::string* out) {
  const json::value* tools = body.if_contains("tools");
  if (tools == nullptr || tools->is_null()) return absl::OkStatus();
  if (!tools->is_array()) return Bad("'tools' must be a list");
  const json::array& arr = tools->get_array();
  if (arr.empty()) return absl::OkStatus();
  out->append("<|tools|>");
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) return Bad(absl::StrCat("tools[", i, "] must be an object"));
    const json::object& tool = arr[i].get_object();
    const json::value* name = tool.if_contains("name");
    if (name == nullptr || !name->is_string()) {
      return Bad(absl::StrCat("tools[", i, "].name must be a string"));
    }
    out->append("<|tool|>");
    AppendString(*name, out);
    if (const json::value* d = tool.if_contains("description"); d != nullptr && d->is_string()) {
      out->push_back('\x1f');
      AppendString(*d, out);
    }
    if (const json::value* schema = tool.if_contains("input_schema"); schema != nullptr) {
      out->push_back('\x1f');
      out->append(json::serialize(*schema));
    }
  }
  out->push_back('\n');
  return absl::OkStatus();
}

// Claude Code's attribution block carries a per-request hash; vLLM drops it
// from the system prompt so that it does not defeat prefix caching.
bool IsBillingHeader(std::string_view text) {
  return text.substr(0, 26) == "x-anthropic-billing-header";
}

absl::Status AppendAnthropicSystem(const json::object& body, std::string* out) {
  const json::value* system = body.if_contains("system");
  if (system == nullptr || system->is_null()) return absl::OkStatus();
  if (system->is_string()) {
    if (system->get_string().empty()) return absl::OkStatus();
    out->append("<|system|>");
    AppendString(*system, out);
    out->push_back('\n');
    return absl::OkStatus();
  }
  if (!system->is_array()) return Bad("'system' must be a string or a list of text blocks");
  const size_t start = out->size();
  out->append("<|system|>");
  bool any = false;
  const json::array& blocks = system->get_array();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!blocks[i].is_object()) return Bad(absl::StrCat("system[", i, "] must be an object"));
    const json::object& b = blocks[i].get_object();
    const json::value* type = b.if_contains("type");
    if (type == nullptr || !type->is_string()) {
      return Bad(absl::StrCat("system[", i, "] needs a string 'type'"));
    }
    if (type->get_string() != "text") continue;  // the engine sees only text blocks
    const json::value* text = b.if_contains("text");
    if (text == nullptr || !text->is_string()) {
      return Bad(absl::StrCat("system[", i, "].text must be a string"));
    }
    if (IsBillingHeader(text->get_string())) continue;
    AppendString(*text, out);
    any = true;
  }
  if (!any) {
    out->resize(start);
    return absl::OkStatus();
  }
  out->push_back('\n');
  return absl::OkStatus();
}

// The content blocks of one message (or of a tool result).
absl::Status AppendAnthropicBlocks(const json::array& blocks, const std::string& where,
                                   std::string* out) {
  for (size_t j = 0; j < blocks.size(); ++j) {
    if (!blocks[j].is_object()) {
      return Bad(absl::StrCat(where, ".content[", j, "] must be an object"));
    }
    const json::object& b = blocks[j].get_object();
    const json::value* type = b.if_contains("type");
    if (type == nullptr || !type->is_string()) {
      return Bad(absl::StrCat(where, ".content[", j, "] needs a string 'type'"));
    }
    const json::string& t = type->get_string();
    if (t == "text") {
      const json::value* text = b.if_contains("text");
      if (text == nullptr || !text->is_string()) {
        return Bad(absl::StrCat(where, ".content[", j, "].text must be a string"));
      }
      AppendString(*text, out);
    } else if (t == "image" || t == "document") {
      // Opaque: the same image gives the same bytes.
      out->append(t == "image" ? "<|image|>" : "<|document|>");
      const json::value* source = b.if_contains("source");
      out->append(source != nullptr ? json::serialize(*source) : std::string());
    } else if (t == "tool_use") {
      out->append("<|tool_use|>");
      if (const json::value* name = b.if_contains("name"); name != nullptr && name->is_string()) {
        AppendString(*name, out);
      }
      const json::value* input = b.if_contains("input");
      out->append(input != nullptr ? json::serialize(*input) : std::string("{}"));
    } else if (t == "tool_result") {
      out->append("<|tool_result|>");
      if (const json::value* id = b.if_contains("tool_use_id"); id != nullptr && id->is_string()) {
        AppendString(*id, out);
      }
      out->push_back('\x1f');
      const json::value* content = b.if_contains("content");
      if (content == nullptr || content->is_null()) {
        // An empty result.
      } else if (content->is_string()) {
        AppendString(*content, out);
      } else if (content->is_array()) {
        const std::string inner = absl::StrCat(where, ".content[", j, "]");
        if (absl::Status st = AppendAnthropicBlocks(content->get_array(), inner, out); !st.ok()) {
          return st;
        }
      } else {
        return Bad(absl::StrCat(where, ".content[", j,
                                "].content must be a string or a list of blocks"));
      }
    } else if (t == "thinking") {
      out->append("<|thinking|>");
      if (const json::value* th = b.if_contains("thinking"); th != nullptr && th->is_string()) {
        AppendString(*th, out);
      }
    } else if (t == "redacted_thinking") {
      // vLLM accepts and drops it: the engine never sees it.
    } else {
      out->append("<|");
      out->append(t.data(), t.size());
      out->append("|>");
      AppendOpaqueBlock(b, out);
    }
  }
  return absl::OkStatus();
}

absl::Status RenderAnthropic(const json::object& body, const FeatureLimits& limits,
                             std::string* out) {
  if (absl::Status st = AppendAnthropicTools(body, out); !st.ok()) return st;
  if (absl::Status st = AppendAnthropicSystem(body, out); !st.ok()) return st;
  const json::value* messages = body.if_contains("messages");
  if (messages == nullptr) return Bad("'messages' is a required property");
  if (!messages->is_array()) return Bad("'messages' must be a list");
  const json::array& arr = messages->get_array();
  if (arr.empty()) return Bad("'messages' must not be empty");
  if (arr.size() > limits.max_messages) {
    return Bad(absl::StrCat("'messages' has ", arr.size(), " entries; at most ",
                            limits.max_messages, " are accepted"));
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) return Bad(absl::StrCat("messages[", i, "] must be an object"));
    const json::object& m = arr[i].get_object();
    const json::value* role = m.if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return Bad(absl::StrCat("messages[", i, "].role must be a string"));
    }
    const json::value* content = m.if_contains("content");
    if (content == nullptr) return Bad(absl::StrCat("messages[", i, "].content is required"));
    out->append("<|");
    AppendString(*role, out);
    out->append("|>");
    if (content->is_string()) {
      AppendString(*content, out);
    } else if (content->is_array()) {
      const std::string where = absl::StrCat("messages[", i, "]");
      if (absl::Status st = AppendAnthropicBlocks(content->get_array(), where, out); !st.ok()) {
        return st;
      }
    } else {
      return Bad(absl::StrCat("messages[", i, "].content must be a string or a list of blocks"));
    }
    out->push_back('\n');
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// OpenAI Responses. vLLM builds the chat messages as: `instructions` as the
// system message, the stored conversation of `previous_response_id` (not in
// the body), then `input`; `tools` go to the chat template.
// ---------------------------------------------------------------------------

// A message's content: a string, or parts (input_text/output_text are text;
// images, files and the rest are opaque).
absl::Status AppendResponsesContent(const json::value& content, size_t index, std::string* out) {
  if (content.is_null()) return absl::OkStatus();
  if (content.is_string()) {
    AppendString(content, out);
    return absl::OkStatus();
  }
  if (!content.is_array()) {
    return Bad(absl::StrCat("input[", index, "].content must be a string or a list of parts"));
  }
  for (const json::value& part : content.get_array()) {
    if (!part.is_object()) {
      return Bad(absl::StrCat("input[", index, "].content parts must be objects"));
    }
    const json::object& p = part.get_object();
    const json::value* type = p.if_contains("type");
    if (type == nullptr || !type->is_string()) {
      return Bad(absl::StrCat("input[", index, "].content part needs a string 'type'"));
    }
    const json::value* text = p.if_contains("text");
    if (text != nullptr && text->is_string()) {
      AppendString(*text, out);
    } else {
      out->append(json::serialize(part));
    }
  }
  return absl::OkStatus();
}

absl::Status AppendResponsesItem(const json::object& item, size_t index, std::string* out) {
  const json::value* type = item.if_contains("type");
  if (type != nullptr && !type->is_string()) {
    return Bad(absl::StrCat("input[", index, "].type must be a string"));
  }
  const std::string_view t = type != nullptr ? std::string_view(type->get_string()) : "message";
  if (t == "message") {
    const json::value* role = item.if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return Bad(absl::StrCat("input[", index, "].role must be a string"));
    }
    out->append("<|");
    AppendString(*role, out);
    out->append("|>");
    if (const json::value* content = item.if_contains("content")) {
      if (absl::Status st = AppendResponsesContent(*content, index, out); !st.ok()) return st;
    }
  } else if (t == "function_call") {
    out->append("<|function_call|>");
    for (const char* key : {"call_id", "name", "arguments"}) {
      if (const json::value* v = item.if_contains(key); v != nullptr && v->is_string()) {
        AppendString(*v, out);
      }
      out->push_back('\x1f');
    }
  } else if (t == "function_call_output") {
    out->append("<|function_call_output|>");
    if (const json::value* id = item.if_contains("call_id"); id != nullptr && id->is_string()) {
      AppendString(*id, out);
    }
    out->push_back('\x1f');
    if (const json::value* output = item.if_contains("output"); output != nullptr) {
      if (output->is_string()) {
        AppendString(*output, out);
      } else {
        out->append(json::serialize(*output));
      }
    }
  } else {
    // reasoning, item_reference, built-in tool calls: opaque.
    out->append("<|");
    out->append(t);
    out->append("|>");
    out->append(json::serialize(item));
  }
  out->push_back('\n');
  return absl::OkStatus();
}

absl::Status RenderResponses(const json::object& body, const FeatureLimits& limits,
                             std::string* out) {
  if (absl::Status st = AppendTools(body, out); !st.ok()) return st;
  if (const json::value* instr = body.if_contains("instructions");
      instr != nullptr && !instr->is_null()) {
    if (!instr->is_string()) return Bad("'instructions' must be a string");
    if (!instr->get_string().empty()) {
      out->append("<|system|>");
      AppendString(*instr, out);
      out->push_back('\n');
    }
  }
  const json::value* input = body.if_contains("input");
  if (input == nullptr) return Bad("'input' is a required property");
  if (input->is_string()) {
    out->append("<|user|>");
    AppendString(*input, out);
    out->push_back('\n');
    return absl::OkStatus();
  }
  if (!input->is_array()) return Bad("'input' must be a string or a list of items");
  const json::array& arr = input->get_array();
  if (arr.size() > limits.max_messages) {
    return Bad(absl::StrCat("'input' has ", arr.size(), " items; at most ", limits.max_messages,
                            " are accepted"));
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_object()) return Bad(absl::StrCat("input[", i, "] must be an object"));
    if (absl::Status st = AppendResponsesItem(arr[i].get_object(), i, out); !st.ok()) return st;
  }
  return absl::OkStatus();
}

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
// Fast path: one pass over the body, no DOM.
//
// The DOM path above copies every string of the body into a tree (Boost.JSON
// decodes a string with escapes byte by byte), then copies the prompt again;
// at 128k tokens that was 70% of kvroute's CPU per request. The fast path
// validates the body as strict JSON (RFC 8259 grammar, UTF-8 per RFC 3629,
// the same depth bound), remembers where the few fields it needs are, and
// decodes only those, straight into the features.
//
// It handles the common shapes only: a string `prompt`, or `messages` whose
// entries have a string `role` and a string or null `content`, with or
// without `tools` (whose value alone goes through the DOM parse: it is small
// next to the conversation). Anthropic and Responses bodies take the DOM path.
// Anything else
// (an error of any kind, content parts, tool calls, token-id or batch
// prompts, a repeated field, an escaped key, an escaped surrogate, a huge
// number) makes it give up and the DOM path decide, so results and error
// messages stay exactly the DOM path's.
// ---------------------------------------------------------------------------

// A JSON string's raw bytes between its quotes.
struct RawString {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool escaped = false;  // contains a backslash escape
};

// Appends the UTF-8 encoding of scalar value `u` (< 0x10000, no surrogate).
void AppendUtf8(unsigned u, std::string* out) {
  if (u < 0x80) {
    out->push_back(static_cast<char>(u));
  } else if (u < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (u >> 6)));
    out->push_back(static_cast<char>(0x80 | (u & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (u >> 12)));
    out->push_back(static_cast<char>(0x80 | ((u >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (u & 0x3F)));
  }
}

// Appends the decoded value of a string the scanner validated (for strings
// the scanner did not decode as it went: see BodyScanner::StringInto).
void AppendDecoded(const RawString& s, std::string* out) {
  if (!s.escaped) {
    out->append(s.begin, static_cast<size_t>(s.end - s.begin));
    return;
  }
  const char* p = s.begin;
  while (p < s.end) {
    const char* bs = static_cast<const char*>(std::memchr(p, '\\', static_cast<size_t>(s.end - p)));
    if (bs == nullptr) {
      out->append(p, static_cast<size_t>(s.end - p));
      return;
    }
    out->append(p, static_cast<size_t>(bs - p));
    const char e = bs[1];
    p = bs + 2;
    switch (e) {
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        unsigned u = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = p[i];
          u = u * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        p += 4;
        // The scanner let no surrogate through: u is one scalar value.
        AppendUtf8(u, out);
        break;
      }
      default: out->push_back(e); break;  // '"', '\\', '/'
    }
  }
}

size_t DecodedSizeBound(const RawString& s) { return static_cast<size_t>(s.end - s.begin); }

class BodyScanner {
 public:
  BodyScanner(std::string_view body, int max_depth)
      : p_(body.data()), end_(body.data() + body.size()), max_depth_(max_depth) {}

  // Each returns false when the input is invalid or unusual (give up).
  void SkipWs() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool AtEnd() const { return p_ == end_; }
  const char* pos() const { return p_; }
  bool Peek(char c) const { return p_ < end_ && *p_ == c; }
  bool Eat(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // A string; p_ at its opening quote.
  bool String(RawString* out) { return StringInto(out, nullptr); }

  // A string, as String(), whose decoded value is also appended to
  // `decoded` (when not null) in the same pass: each run of plain bytes is
  // appended when the scan stops at its end, each escape as it is checked.
  // On failure `decoded` holds part of the value; the caller gives up.
  bool StringInto(RawString* out, std::string* decoded) {
    if (!Eat('"')) return false;
    out->begin = p_;
    out->escaped = false;
    const char* run = p_;  // start of the plain bytes not yet appended
    for (;;) {
      SkipPlain();
      if (p_ >= end_) return false;
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        if (decoded != nullptr) decoded->append(run, static_cast<size_t>(p_ - run));
        out->end = p_++;
        return true;
      }
      if (c == '\\') {
        out->escaped = true;
        if (decoded != nullptr) decoded->append(run, static_cast<size_t>(p_ - run));
        if (!EscapeInto(decoded)) return false;
        run = p_;
      } else if (c >= 0x80) {
        if (!Utf8()) return false;  // valid UTF-8 stays in the run, verbatim
      } else {
        return false;  // a control character
      }
    }
  }

  // Makes room in `s` for `extra` bytes and then a string value starting
  // here: a value is at most the rest of the body, so a prompt decoded into
  // `s` needs one allocation and no regrowth (and a chat's later messages fit
  // in what the first content reserved: a message rendered as
  // "<|role|>content\n" is shorter than its JSON object).
  void ReserveRest(std::string* s, size_t extra = 0) const {
    const size_t bound = s->size() + extra + static_cast<size_t>(end_ - p_);
    if (s->capacity() < bound) s->reserve(bound);
  }

  // Any value, validated and skipped.
  bool SkipValue(int depth) {
    if (p_ >= end_) return false;
    switch (*p_) {
      case '"': {
        RawString ignored;
        return String(&ignored);
      }
      case '{': {
        if (depth + 1 >= max_depth_) return false;
        ++p_;
        SkipWs();
        if (Eat('}')) return true;
        for (;;) {
          RawString key;
          if (!String(&key)) return false;
          SkipWs();
          if (!Eat(':')) return false;
          SkipWs();
          if (!SkipValue(depth + 1)) return false;
          SkipWs();
          if (Eat('}')) return true;
          if (!Eat(',')) return false;
          SkipWs();
        }
      }
      case '[': {
        if (depth + 1 >= max_depth_) return false;
        ++p_;
        SkipWs();
        if (Eat(']')) return true;
        for (;;) {
          if (!SkipValue(depth + 1)) return false;
          SkipWs();
          if (Eat(']')) return true;
          if (!Eat(',')) return false;
          SkipWs();
        }
      }
      case 't': return Literal("true");
      case 'f': return Literal("false");
      case 'n': return Literal("null");
      default: return Number(nullptr);
    }
  }

  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0) {
      return false;
    }
    p_ += word.size();
    return true;
  }

  // A number. When `small_int` is not null, succeeds only for a plain
  // non-negative integer of at most 18 digits and stores it.
  bool Number(int64_t* small_int) {
    const char* start = p_;
    if (Eat('-') && small_int != nullptr) return false;
    if (p_ >= end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    } else {
      return false;
    }
    const char* int_end = p_;
    bool plain = true;
    if (Eat('.')) {
      plain = false;
      if (!Digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      plain = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      const char* exp_start = p_;
      if (!Digits() || p_ - exp_start > 2) return false;  // huge exponents: DOM path
    }
    if (p_ - start > 64) return false;  // very long numbers: DOM path
    if (small_int != nullptr) {
      if (!plain || int_end - start > 18) return false;
      int64_t v = 0;
      for (const char* q = start; q < int_end; ++q) v = v * 10 + (*q - '0');
      *small_int = v;
    }
    return true;
  }

 private:
  bool Digits() {
    const char* start = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ > start;
  }

  // Advances over bytes that need no attention inside a string: printable
  // ASCII other than '"' and '\\'.
  void SkipPlain() {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    // Signed compare: bytes >= 0x80 are negative, so "< 0x20" also flags
    // non-ASCII bytes for UTF-8 validation.
    auto special = [&](const char* at) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
      return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                          _mm_cmplt_epi8(v, space));
    };
    while (end_ - p_ >= 64) {  // four blocks per test while nothing is special
      const __m128i s0 = special(p_), s1 = special(p_ + 16);
      const __m128i s2 = special(p_ + 32), s3 = special(p_ + 48);
      const __m128i any = _mm_or_si128(_mm_or_si128(s0, s1), _mm_or_si128(s2, s3));
      if (_mm_movemask_epi8(any) != 0) {
        // The first special byte's offset from the four masks, without
        // scanning the block again.
        const uint64_t mask = static_cast<uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(s0))) |
                              static_cast<uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(s1)))
                                  << 16 |
                              static_cast<uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(s2)))
                                  << 32 |
                              static_cast<uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(s3)))
                                  << 48;
        p_ += __builtin_ctzll(mask);
        return;
      }
      p_ += 64;
    }
    while (end_ - p_ >= 16) {
      const int mask = _mm_movemask_epi8(special(p_));
      if (mask != 0) {
        p_ += __builtin_ctz(static_cast<unsigned>(mask));
        return;
      }
      p_ += 16;
    }
#endif
    while (p_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) return;
      ++p_;
    }
  }

  // p_ at a backslash: checks the escape and, when `decoded` is not null,
  // appends its value.
  bool EscapeInto(std::string* decoded) {
    if (end_ - p_ < 2) return false;
    const char e = p_[1];
    p_ += 2;
    char value;
    switch (e) {
      case '"': case '\\': case '/': value = e; break;
      case 'b': value = '\b'; break;
      case 'f': value = '\f'; break;
      case 'n': value = '\n'; break;
      case 'r': value = '\r'; break;
      case 't': value = '\t'; break;
      case 'u': {
        if (end_ - p_ < 4) return false;
        unsigned u = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = p_[i];
          int d;
          if (h >= '0' && h <= '9') {
            d = h - '0';
          } else if ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') {
            d = (h | 0x20) - 'a' + 10;
          } else {
            return false;
          }
          u = u * 16 + static_cast<unsigned>(d);
        }
        p_ += 4;
        if (u >= 0xD800 && u <= 0xDFFF) return false;  // surrogates: the DOM path decides
        if (decoded != nullptr) AppendUtf8(u, decoded);
        return true;
      }
      default:
        return false;
    }
    if (decoded != nullptr) decoded->push_back(value);
    return true;
  }

  // One UTF-8 sequence (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
  bool Utf8() {
    const auto* u = reinterpret_cast<const unsigned char*>(p_);
    const ptrdiff_t left = end_ - p_;
    auto cont = [&](int i) { return i < left && (u[i] & 0xC0) == 0x80; };
    const unsigned char c = u[0];
    int n;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (left < 2) return false;
      if (c == 0xE0 && u[1] < 0xA0) return false;
      if (c == 0xED && u[1] > 0x9F) return false;
      n = 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (left < 2) return false;
      if (c == 0xF0 && u[1] < 0x90) return false;
      if (c == 0xF4 && u[1] > 0x8F) return false;
      n = 4;
    } else {
      return false;
    }
    for (int i = 1; i < n; ++i) {
      if (!cont(i)) return false;
    }
    p_ += n;
    return true;
  }

  const char* p_;
  const char* end_;
  int max_depth_;
};

bool KeyIs(const RawString& key, std::string_view name) {
  return static_cast<size_t>(key.end - key.begin) == name.size() &&
         std::memcmp(key.begin, name.data(), name.size()) == 0;
}

struct ChatMessage {
  RawString role;
  RawString content;
  bool has_content = false;  // false: absent or null
};

// A chat message as the DOM path renders it: "<|role|>content\n".
void AppendMessageHead(const RawString& role, std::string* out) {
  out->append("<|");
  AppendDecoded(role, out);
  out->append("|>");
}
void AppendMessage(const ChatMessage& m, std::string* out) {
  AppendMessageHead(m.role, out);
  if (m.has_content) AppendDecoded(m.content, out);
  out->push_back('\n');
}

// A chat body's `tools` value, validated by the scanner, rendered as the DOM
// path renders it (its compact serialisation: the raw bytes may differ in
// spacing and escapes). False: not a list, the DOM path words the error.
bool RenderRawTools(std::string_view raw, const FeatureLimits& limits, std::string* out) {
  json::parse_options opts;
  opts.max_depth = static_cast<size_t>(limits.max_json_depth);
  boost::system::error_code ec;
  json::monotonic_resource mr;
  const json::value tools = json::parse(json::string_view(raw.data(), raw.size()), ec, &mr, opts);
  if (ec) return false;
  if (tools.is_null()) return true;
  if (!tools.is_array()) return false;
  if (tools.get_array().empty()) return true;
  out->append("<|tools|>");
  out->append(json::serialize(tools));
  out->push_back('\n');
  return true;
}

// The fast path; nullopt means "ask the DOM path".
std::optional<router::RequestFeatures> ExtractFeaturesFast(Endpoint endpoint,
                                                           std::string_view body,
                                                           std::string_view session_header,
                                                           const FeatureLimits& limits) {
  if (limits.max_json_depth < 8) return std::nullopt;
  if (endpoint != Endpoint::kChat && endpoint != Endpoint::kCompletions) return std::nullopt;
  BodyScanner sc(body, limits.max_json_depth);
  // The strings the features need are decoded into `f` as they are scanned
  // (one pass over the prompt); giving up discards `f`.
  router::RequestFeatures f;
  RawString model, session, prompt;
  bool has_model = false, has_session = false, has_prompt = false, has_messages = false;
  bool has_tools = false;
  std::string_view tools_raw;
  bool seen_stream = false, seen_max = false, seen_max_completion = false;
  bool stream = false;
  int64_t max_tokens = -1, max_completion_tokens = -1;
  std::vector<ChatMessage> messages;
  const bool chat = endpoint == Endpoint::kChat;
  // Chat: while every message so far had its role before its content, the
  // prompt is rendered into f.prompt_bytes during the scan; a content before
  // its role ends that, and the prompt is rendered from `messages` after.
  bool rendered_in_scan = true;

  sc.SkipWs();
  if (!sc.Eat('{')) return std::nullopt;
  sc.SkipWs();
  if (!sc.Eat('}')) {
    for (;;) {
      RawString key;
      if (!sc.String(&key) || key.escaped) return std::nullopt;
      sc.SkipWs();
      if (!sc.Eat(':')) return std::nullopt;
      sc.SkipWs();
      if (KeyIs(key, "model")) {
        if (has_model || !sc.Peek('"') || !sc.StringInto(&model, &f.model)) return std::nullopt;
        has_model = true;
      } else if (KeyIs(key, "stream")) {
        if (seen_stream) return std::nullopt;
        seen_stream = true;
        if (sc.Literal("true")) {
          stream = true;
        } else if (!sc.Literal("false") && !sc.Literal("null")) {
          return std::nullopt;
        }
      } else if (KeyIs(key, "max_tokens") || KeyIs(key, "max_completion_tokens")) {
        const bool completion = KeyIs(key, "max_completion_tokens");
        bool& seen = completion ? seen_max_completion : seen_max;
        int64_t& value = completion ? max_completion_tokens : max_tokens;
        if (seen) return std::nullopt;
        seen = true;
        if (!sc.Literal("null")) {
          if (!sc.Number(&value) || value > limits.max_tokens_limit) return std::nullopt;
        }
      } else if (KeyIs(key, "session_id")) {
        if (has_session) return std::nullopt;
        has_session = true;
        // The header, when given, wins: the body's value is only checked.
        std::string* into = session_header.empty() ? &f.session_id : nullptr;
        if (!sc.Literal("null") && (!sc.Peek('"') || !sc.StringInto(&session, into))) {
          return std::nullopt;
        }
      } else if (chat && KeyIs(key, "tools")) {
        // Rendered at the front of the prompt once the scan is done: chat
        // templates put the tool definitions before the first message.
        if (has_tools) return std::nullopt;
        has_tools = true;
        const char* start = sc.pos();
        if (!sc.SkipValue(1)) return std::nullopt;
        tools_raw = std::string_view(start, static_cast<size_t>(sc.pos() - start));
      } else if (!chat && KeyIs(key, "prompt")) {
        if (has_prompt || !sc.Peek('"')) return std::nullopt;
        sc.ReserveRest(&f.prompt_bytes);
        if (!sc.StringInto(&prompt, &f.prompt_bytes)) return std::nullopt;
        has_prompt = true;
      } else if (chat && KeyIs(key, "messages")) {
        if (has_messages || !sc.Eat('[')) return std::nullopt;
        has_messages = true;
        sc.SkipWs();
        if (sc.Eat(']')) return std::nullopt;  // empty: an error, the DOM path words it
        for (;;) {
          if (messages.size() >= limits.max_messages) return std::nullopt;
          if (!sc.Eat('{')) return std::nullopt;
          ChatMessage m;
          bool has_role = false, seen_content = false;
          sc.SkipWs();
          if (!sc.Eat('}')) {
            for (;;) {
              RawString mkey;
              if (!sc.String(&mkey) || mkey.escaped) return std::nullopt;
              sc.SkipWs();
              if (!sc.Eat(':')) return std::nullopt;
              sc.SkipWs();
              if (KeyIs(mkey, "role")) {
                if (has_role || !sc.Peek('"') || !sc.String(&m.role)) return std::nullopt;
                has_role = true;
              } else if (KeyIs(mkey, "content")) {
                if (seen_content) return std::nullopt;
                seen_content = true;
                if (sc.Peek('"')) {
                  std::string* into = nullptr;
                  if (rendered_in_scan && has_role) {
                    // "<|role|>" before the content, "\n" after it.
                    sc.ReserveRest(&f.prompt_bytes, DecodedSizeBound(m.role) + 5);
                    AppendMessageHead(m.role, &f.prompt_bytes);
                    into = &f.prompt_bytes;
                  } else {
                    rendered_in_scan = false;
                  }
                  if (!sc.StringInto(&m.content, into)) return std::nullopt;
                  m.has_content = true;
                } else if (!sc.Literal("null")) {
                  return std::nullopt;
                }
              } else if (KeyIs(mkey, "tool_calls")) {
                return std::nullopt;
              } else if (!sc.SkipValue(3)) {
                return std::nullopt;
              }
              sc.SkipWs();
              if (sc.Eat('}')) break;
              if (!sc.Eat(',')) return std::nullopt;
              sc.SkipWs();
            }
          }
          if (!has_role) return std::nullopt;
          if (rendered_in_scan) {
            if (m.has_content) {
              f.prompt_bytes.push_back('\n');  // its head and content are out already
            } else {
              AppendMessage(m, &f.prompt_bytes);
            }
          }
          messages.push_back(m);
          sc.SkipWs();
          if (sc.Eat(']')) break;
          if (!sc.Eat(',')) return std::nullopt;
          sc.SkipWs();
        }
      } else if (!sc.SkipValue(1)) {
        return std::nullopt;
      }
      sc.SkipWs();
      if (sc.Eat('}')) break;
      if (!sc.Eat(',')) return std::nullopt;
      sc.SkipWs();
    }
  }
  sc.SkipWs();
  if (!sc.AtEnd()) return std::nullopt;
  if (chat ? !has_messages : !has_prompt) return std::nullopt;

  f.stream = stream;
  if (max_completion_tokens >= 0) {
    f.max_tokens = max_completion_tokens;
  } else if (max_tokens >= 0) {
    f.max_tokens = max_tokens;
  }
  if (!session_header.empty()) f.session_id = std::string(session_header);
  if (chat && !rendered_in_scan) {
    size_t size = 0;
    for (const ChatMessage& m : messages) {
      size += DecodedSizeBound(m.role) + (m.has_content ? DecodedSizeBound(m.content) : 0) + 5;
    }
    f.prompt_bytes.clear();
    f.prompt_bytes.reserve(size);
    for (const ChatMessage& m : messages) AppendMessage(m, &f.prompt_bytes);
  }
  if (has_tools) {
    std::string head;
    if (!RenderRawTools(tools_raw, limits, &head)) return std::nullopt;
    if (!head.empty()) f.prompt_bytes.insert(0, head);
  }
  return f;
}

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
