#include "proxy/agent_prefix.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {

namespace json = boost::json;

namespace {
absl::Status Bad(std::string_view msg) { return absl::InvalidArgumentError(ToAbsl(msg)); }
}  // namespace

absl::StatusOr<const json::array*> RequiredMessages(const json::object& body,
                                                   const FeatureLimits& limits) {
  const json::value* messages = body.if_contains("messages");
  if (messages == nullptr) return Bad("'messages' is a required property");
  if (!messages->is_array()) return Bad("'messages' must be a list");
  const json::array& arr = messages->get_array();
  if (arr.empty()) return Bad("'messages' must not be empty");
  if (arr.size() > limits.max_messages) {
    return Bad(absl::StrCat("'messages' has ", arr.size(), " entries; at most ",
                            limits.max_messages, " are accepted"));
  }
  return &arr;
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

namespace {

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

}  // namespace

absl::Status RenderAnthropic(const json::object& body, const FeatureLimits& limits,
                             std::string* out) {
  if (absl::Status st = AppendAnthropicTools(body, out); !st.ok()) return st;
  if (absl::Status st = AppendAnthropicSystem(body, out); !st.ok()) return st;
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

namespace {

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

}  // namespace

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

}  // namespace kvroute::proxy
