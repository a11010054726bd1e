#include "proxy/response_observer.h"

#include <boost/json.hpp>
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
  out->prompt_tokens = IntOr(u, "prompt_tokens");
  out->completion_tokens = IntOr(u, "completion_tokens");
  if (const json::value* d = u.if_contains("prompt_tokens_details"); d && d->is_object()) {
    out->cached_tokens = IntOr(d->get_object(), "cached_tokens");
  }
  return true;
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

std::optional<bool> UsageFromTail(std::string_view text, Usage* out) {
  const size_t at = RFindUsageKey(text);
  if (at == std::string_view::npos) return std::nullopt;
  size_t first = 0;
  while (first < at && IsJsonSpace(text[first])) ++first;
  if (first >= at || text[first] != '{') return std::nullopt;
  size_t before = at;
  while (before > first && IsJsonSpace(text[before - 1])) --before;
  if (text[before - 1] != ',' && text[before - 1] != '{') return std::nullopt;
  unsigned char scratch[1024];
  json::monotonic_resource mr(scratch, sizeof(scratch));
  unsigned char stack[256];  // the parser's own stack, off the heap too
  json::stream_parser p({}, {}, stack, sizeof(stack));
  p.reset(&mr);
  boost::system::error_code ec;
  // "{" and the tail in one buffer when it is small (one parser call).
  char joined[512];
  size_t used = 0;
  const std::string_view tail = text.substr(at);
  if (tail.size() < sizeof(joined)) {
    joined[0] = '{';
    std::memcpy(joined + 1, tail.data(), tail.size());
    used = p.write_some(joined, tail.size() + 1, ec);
    used = used > 0 ? used - 1 : 0;
  } else {
    p.write_some("{", 1, ec);
    if (!ec) used = p.write_some(tail.data(), tail.size(), ec);
  }
  if (ec || !p.done()) return std::nullopt;
  for (size_t j = at + used; j < text.size(); ++j) {
    if (!IsJsonSpace(text[j])) return std::nullopt;
  }
  const json::value root = p.release();
  return UsageFromObject(root.get_object(), out);
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

ResponseObserver::ResponseObserver(bool sse, size_t max_json_body, size_t max_event_bytes,
                                   bool keep_transfer_params)
    : sse_(sse),
      max_json_body_(max_json_body),
      max_event_bytes_(max_event_bytes),
      keep_transfer_params_(keep_transfer_params) {}

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
    if (payload == "[DONE]") {
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
    ParseUsageFromJson(pending_, &usage_, keep_transfer_params_ ? &kv_transfer_params_ : nullptr);
  }
  pending_.clear();
}

}  // namespace kvroute::proxy
