#include "proxy/response_observer.h"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstring>
#include <optional>

namespace kvroute::proxy {
namespace {
namespace json = boost::json;

int64_t IntOr(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return -1;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
  return -1;
}

bool UsageFromObject(const json::object& obj, Usage* out) {
  const json::value* usage = obj.if_contains("usage");
  if (usage == nullptr || !usage->is_object()) return false;
  const json::object& u = usage->get_object();
  out->reported = true;
  out->prompt_tokens = IntOr(u, "prompt_tokens");
  out->completion_tokens = IntOr(u, "completion_tokens");
  out->has_details = false;
  if (const json::value* d = u.if_contains("prompt_tokens_details"); d && d->is_object()) {
    out->has_details = true;
    out->cached_tokens = IntOr(d->get_object(), "cached_tokens");
  }
  return true;
}

// Anthropic and Responses usage objects, into the OpenAI-shaped Usage.
void AgentUsageFromObject(const json::object& u, Usage* out) {
  out->prompt_tokens = IntOr(u, "input_tokens");
  out->completion_tokens = IntOr(u, "output_tokens");
  out->cached_tokens = IntOr(u, "cache_read_input_tokens");
  if (const json::value* d = u.if_contains("input_tokens_details"); d && d->is_object()) {
    out->cached_tokens = IntOr(d->get_object(), "cached_tokens");
  }
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The usage of a body from its top-level "usage" member and the members
// after it (vLLM and SGLang write usage last, or followed only by
// kv_transfer_params): the completion's text before it is not parsed.
// Returns nullopt when the text is not of that shape, and the caller parses
// the whole body. Unlike the whole-body parse, this does not notice an
// invalid body before the usage member (an engine's own bug).
//
// `"usage"` followed by ':' can only be a key (inside a JSON string the
// quotes would be escaped). From its last occurrence, "{" + the rest of the
// text must parse as one object that ends the text: then that occurrence is
// a member of the root object (a nested one leaves its parents' closing
// brackets after the object), and, being the last, it is the one a
// whole-body parse keeps (Boost.JSON keeps the last of duplicate keys).
// The last `"usage"` in `text`: backwards over quotes with memrchr (the
// key is near the end; string_view::rfind compares at every position).
size_t RFindUsageKey(std::string_view text) {
  constexpr std::string_view kKey = "\"usage\"";
  for (size_t end = text.size(); end > 0;) {
    const void* q = memrchr(text.data(), '"', end);
    if (q == nullptr) break;
    const size_t pos = static_cast<size_t>(static_cast<const char*>(q) - text.data());
    if (text.substr(pos, kKey.size()) == kKey) return pos;
    end = pos;
  }
  return std::string_view::npos;
}

// A Boost.JSON SAX handler that keeps the usage members of the root object
// as UsageFromObject reads them from a DOM (the last of duplicate keys wins;
// a count that is not an integer is -1; a details member that is not an
// object leaves cached_tokens as it was), without building the DOM (a DOM
// of the ~180-byte tail cost ~4 k instructions per small completion).
class UsageHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using error_code = boost::system::error_code;
  using string_view = json::string_view;

  // Writes the usage into `out` as UsageFromObject would; false when the
  // root has no usage object.
  bool Result(Usage* out) const {
    if (!found_) return false;
    out->reported = true;
    out->prompt_tokens = prompt_;
    out->completion_tokens = completion_;
    out->has_details = details_;
    if (details_) out->cached_tokens = cached_;
    return true;
  }

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) { return Open(Value(-1, true)); }
  bool on_object_end(std::size_t, error_code&) { return Close(); }
  bool on_array_begin(error_code&) { return Open(Value(-1, false)); }
  bool on_array_end(std::size_t, error_code&) { return Close(); }
  bool on_key_part(string_view s, std::size_t, error_code&) { return AddKeyPart(s); }
  bool on_key(string_view s, std::size_t, error_code&) {
    AddKeyPart(s);
    key_ = Classify();
    key_len_ = 0;
    return true;
  }
  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return Scalar(-1); }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(int64_t v, string_view, error_code&) { return Scalar(v); }
  bool on_uint64(uint64_t v, string_view, error_code&) { return Scalar(static_cast<int64_t>(v)); }
  bool on_double(double, string_view, error_code&) { return Scalar(-1); }
  bool on_bool(bool, error_code&) { return Scalar(-1); }
  bool on_null(error_code&) { return Scalar(-1); }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  enum class Key { kOther, kUsage, kPromptTokens, kCompletionTokens, kDetails, kCachedTokens };
  enum class Opens { kNothing, kUsage, kDetails };

  bool AddKeyPart(string_view s) {
    if (key_len_ + s.size() <= sizeof(key_buf_)) {
      std::memcpy(key_buf_ + key_len_, s.data(), s.size());
    }
    key_len_ += s.size();
    return true;
  }
  Key Classify() const {
    if (key_len_ > sizeof(key_buf_)) return Key::kOther;
    const std::string_view k(key_buf_, key_len_);
    if (k == "usage") return Key::kUsage;
    if (k == "prompt_tokens") return Key::kPromptTokens;
    if (k == "completion_tokens") return Key::kCompletionTokens;
    if (k == "prompt_tokens_details") return Key::kDetails;
    if (k == "cached_tokens") return Key::kCachedTokens;
    return Key::kOther;
  }

  // A value (a scalar's integer or -1, or a container) at depth_ under
  // key_; returns what it opens, if a container.
  Opens Value(int64_t integer, bool is_object) {
    if (depth_ == 1 && key_ == Key::kUsage) {
      found_ = is_object;
      prompt_ = completion_ = -1;
      details_ = false;
      return is_object ? Opens::kUsage : Opens::kNothing;
    }
    if (depth_ == 2 && in_usage_) {
      if (key_ == Key::kPromptTokens) prompt_ = integer;
      if (key_ == Key::kCompletionTokens) completion_ = integer;
      if (key_ == Key::kDetails) {
        details_ = is_object;
        cached_ = -1;
        return is_object ? Opens::kDetails : Opens::kNothing;
      }
    } else if (depth_ == 3 && in_details_ && key_ == Key::kCachedTokens) {
      cached_ = integer;
    }
    return Opens::kNothing;
  }
  bool Scalar(int64_t integer) {
    Value(integer, false);
    return true;
  }
  bool Open(Opens opens) {
    ++depth_;
    if (opens == Opens::kUsage) in_usage_ = true;
    if (opens == Opens::kDetails) in_details_ = true;
    return true;
  }
  bool Close() {
    if (depth_ == 2) in_usage_ = false;
    if (depth_ == 3) in_details_ = false;
    --depth_;
    return true;
  }

  int depth_ = 0;  // open containers; the root object is depth 1
  Key key_ = Key::kOther;
  char key_buf_[24];
  size_t key_len_ = 0;
  bool in_usage_ = false;    // the open depth-2 container is the usage object
  bool in_details_ = false;  // the open depth-3 container is its details
  bool found_ = false;
  bool details_ = false;
  int64_t prompt_ = -1, completion_ = -1, cached_ = -1;
};

std::optional<bool> UsageFromTail(std::string_view text, Usage* out) {
  const size_t at = RFindUsageKey(text);
  if (at == std::string_view::npos) return std::nullopt;
  size_t first = 0;
  while (first < at && IsJsonSpace(text[first])) ++first;
  if (first >= at || text[first] != '{') return std::nullopt;
  size_t before = at;
  while (before > first && IsJsonSpace(text[before - 1])) --before;
  if (text[before - 1] != ',' && text[before - 1] != '{') return std::nullopt;
  // "{" and the tail in one buffer, parsed in one call (a parser that
  // suspends between two writes allocates its state stack).
  const std::string_view tail = text.substr(at);
  char joined[512];
  std::string big;
  char* buf = joined;
  if (tail.size() + 1 > sizeof(joined)) {
    big.resize(tail.size() + 1);
    buf = big.data();
  }
  buf[0] = '{';
  std::memcpy(buf + 1, tail.data(), tail.size());
  json::basic_parser<UsageHandler> p({});
  boost::system::error_code ec;
  // Stops after the object and the whitespace after it.
  const size_t used = p.write_some(false, buf, tail.size() + 1, ec);
  if (ec || !p.done() || used != tail.size() + 1) return std::nullopt;
  return p.handler().Result(out);
}
}  // namespace

bool ParseUsageFromJson(std::string_view text, Usage* out, std::string* kv_transfer_params) {
  if (kv_transfer_params == nullptr ||
      text.find("\"kv_transfer_params\"") == std::string_view::npos) {
    if (std::optional<bool> fast = UsageFromTail(text, out)) return *fast;
  }
  boost::system::error_code ec;
  // A completion body or usage event is a few hundred bytes: parse it into
  // a stack buffer instead of one heap allocation per JSON node (the parse
  // was 10% of a small request's instructions).
  unsigned char scratch[4096];
  json::monotonic_resource mr(scratch, sizeof(scratch));
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec, &mr);
  if (ec || !root.is_object()) return false;
  const json::object& obj = root.get_object();
  if (kv_transfer_params != nullptr) {
    if (const json::value* p = obj.if_contains("kv_transfer_params"); p && p->is_object()) {
      *kv_transfer_params = json::serialize(*p);
    }
  }
  return UsageFromObject(obj, out);
}

bool ParseUsageOnlyChunk(std::string_view text, Usage* out) {
  boost::system::error_code ec;
  unsigned char scratch[4096];
  json::monotonic_resource mr(scratch, sizeof(scratch));
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec, &mr);
  if (ec || !root.is_object()) return false;
  const json::object& obj = root.get_object();
  const json::value* choices = obj.if_contains("choices");
  if (choices == nullptr || !choices->is_array() || !choices->get_array().empty()) return false;
  Usage u;
  if (!UsageFromObject(obj, &u)) return false;
  *out = u;
  return true;
}

void CachedTokensRule::Apply(bool complete, Usage* usage) {
  if (!usage->reported) return;
  if (usage->has_details) {
    if (!details_seen_.load(std::memory_order_relaxed)) {
      details_seen_.store(true, std::memory_order_relaxed);
    }
    return;
  }
  const AbsentCachedTokens absent = this->absent();
  const bool absent_means_zero =
      absent == AbsentCachedTokens::kZero ||
      (absent == AbsentCachedTokens::kAuto && details_seen_.load(std::memory_order_relaxed));
  usage->cached_tokens = complete && absent_means_zero ? 0 : -1;
}

ResponseObserver::ResponseObserver(bool sse, size_t max_json_body, size_t max_event_bytes,
                                   bool keep_transfer_params, ApiDialect dialect,
                                   CachedTokensRule* cached_tokens_rule)
    : sse_(sse),
      max_json_body_(max_json_body),
      max_event_bytes_(max_event_bytes),
      keep_transfer_params_(keep_transfer_params),
      dialect_(dialect),
      cached_tokens_rule_(cached_tokens_rule) {}

void ResponseObserver::ReportUsage(const Usage& usage) {
  ++events_;
  usage_ = usage;
}

void ResponseObserver::Feed(std::string_view bytes) {
  if (!sse_) {
    if (overflow_) return;
    if (pending_.size() + bytes.size() > max_json_body_) {
      overflow_ = true;
      pending_.clear();
      return;
    }
    pending_.append(bytes);
    return;
  }
  // SSE: an event ends at a blank line ("\n\n" from vLLM, "\r\n\r\n" allowed).
  pending_.append(bytes);
  size_t start = 0;
  // The next CRLF event end, searched again only once passed: searching the
  // rest of the buffer for it at every event made a 16 KB read of ~60
  // events cost ~1 MB of scanning.
  size_t crlf = pending_.find("\r\n\r\n");
  for (;;) {
    const size_t lf = pending_.find("\n\n", start);
    if (crlf != std::string::npos && crlf < start) crlf = pending_.find("\r\n\r\n", start);
    if (lf == std::string::npos && crlf == std::string::npos) break;
    const bool use_lf = crlf == std::string::npos || (lf != std::string::npos && lf < crlf);
    const size_t end = use_lf ? lf : crlf;
    OnEvent(std::string_view(pending_).substr(start, end - start));
    start = end + (use_lf ? 2 : 4);
  }
  pending_.erase(0, start);
  if (pending_.size() > max_event_bytes_) pending_.clear();  // relayed, not observed
}

void ResponseObserver::OnEvent(std::string_view event) {
  ++events_;
  // Each line "data: <payload>"; vLLM sends one data line per event.
  size_t pos = 0;
  while (pos < event.size()) {
    size_t eol = event.find('\n', pos);
    if (eol == std::string_view::npos) eol = event.size();
    std::string_view line = event.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = eol + 1;
    if (line.substr(0, 5) != "data:") continue;
    std::string_view payload = line.substr(5);
    if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
    if (dialect_ != ApiDialect::kOpenAi) {
      OnAgentEvent(payload);
    } else if (payload == "[DONE]") {
      saw_done_ = true;
    } else if (payload.find("\"prompt_tokens\"") != std::string_view::npos) {
      Usage u;
      if (ParseUsageFromJson(payload, &u, nullptr)) usage_ = u;
    }
  }
}

void ResponseObserver::Finish() {
  if (sse_) {
    if (!pending_.empty()) OnEvent(pending_);
  } else if (!overflow_ && !pending_.empty()) {
    if (dialect_ != ApiDialect::kOpenAi) {
      ParseAgentJson(pending_);
    } else {
      ParseUsageFromJson(pending_, &usage_,
                         keep_transfer_params_ ? &kv_transfer_params_ : nullptr);
    }
  }
  pending_.clear();
  // A JSON body's usage is read only from a whole body; a stream's usage
  // chunk comes just before [DONE].
  // The rule reads vLLM's prompt_tokens_details, which only the OpenAI
  // dialect has; the agent APIs report their cache counts their own way.
  if (cached_tokens_rule_ != nullptr && dialect_ == ApiDialect::kOpenAi) {
    cached_tokens_rule_->Apply(!sse_ || saw_done_, &usage_);
  }
}

// An event of the agent APIs: only the few that carry usage, an id or the
// end of the stream are parsed.
void ResponseObserver::OnAgentEvent(std::string_view payload) {
  const bool anthropic = dialect_ == ApiDialect::kAnthropic;
  const bool interesting =
      anthropic ? payload.find("\"usage\"") != std::string_view::npos ||
                      payload.find("\"message_stop\"") != std::string_view::npos
                : payload.find("\"response.") != std::string_view::npos &&
                      (payload.find("\"response.created\"") != std::string_view::npos ||
                       payload.find("\"response.completed\"") != std::string_view::npos ||
                       payload.find("\"response.incomplete\"") != std::string_view::npos ||
                       payload.find("\"response.failed\"") != std::string_view::npos);
  if (!interesting) return;
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(payload.data(), payload.size()), ec);
  if (ec || !root.is_object()) return;
  const json::object& event = root.get_object();
  const json::value* type = event.if_contains("type");
  if (type == nullptr || !type->is_string()) return;
  const json::string& t = type->get_string();
  if (anthropic) {
    if (t == "message_stop") saw_done_ = true;
    const json::value* usage = event.if_contains("usage");  // message_delta
    if (t == "message_start") {
      const json::value* message = event.if_contains("message");
      usage = message != nullptr && message->is_object()
                  ? message->get_object().if_contains("usage")
                  : nullptr;
    }
    if (usage != nullptr && usage->is_object()) AgentUsageFromObject(usage->get_object(), &usage_);
    return;
  }
  const json::value* response = event.if_contains("response");
  if (response == nullptr || !response->is_object()) return;
  const json::object& r = response->get_object();
  if (const json::value* id = r.if_contains("id"); id != nullptr && id->is_string()) {
    response_id_ = std::string(id->get_string());
  }
  if (t == "response.created") return;
  saw_done_ = true;
  if (const json::value* u = r.if_contains("usage"); u != nullptr && u->is_object()) {
    AgentUsageFromObject(u->get_object(), &usage_);
  }
}

void ResponseObserver::ParseAgentJson(std::string_view text) {
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !root.is_object()) return;
  const json::object& obj = root.get_object();
  if (dialect_ == ApiDialect::kResponses) {
    if (const json::value* id = obj.if_contains("id"); id != nullptr && id->is_string()) {
      response_id_ = std::string(id->get_string());
    }
  }
  if (const json::value* u = obj.if_contains("usage"); u != nullptr && u->is_object()) {
    AgentUsageFromObject(u->get_object(), &usage_);
  }
  if (keep_transfer_params_) {
    if (const json::value* p = obj.if_contains("kv_transfer_params"); p && p->is_object()) {
      kv_transfer_params_ = json::serialize(*p);
    }
  }
}

}  // namespace kvroute::proxy
