#include "proxy/stream_usage.h"

#include <boost/json.hpp>
#include <cstring>
#include <optional>

namespace kvroute::proxy {
namespace {
namespace json = boost::json;

constexpr std::string_view kStreamOptionsKey = "\"stream_options\"";
constexpr std::string_view kInsertedMember = "\"stream_options\":{\"include_usage\":true}";

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The top level of a JSON object, key by key, with each value's byte range;
// values are skipped, not parsed. The body has passed the request parser
// (ExtractFeatures), so this only has to be right on valid JSON and give up
// safely on anything else.
class TopLevelScanner {
 public:
  explicit TopLevelScanner(std::string_view text) : t_(text) {}

  // Positions at the opening brace; false when the text is not an object.
  bool Open() {
    SkipWs();
    if (i_ >= t_.size() || t_[i_] != '{') return false;
    brace_ = i_++;
    SkipWs();
    empty_ = i_ < t_.size() && t_[i_] == '}';
    return true;
  }
  size_t brace() const { return brace_; }
  bool empty() const { return empty_; }

  // The next member: its raw key (between the quotes, escapes untouched) and
  // its value's range. False at the end of the object or on anything odd.
  bool Next(std::string_view* key, size_t* value_begin, size_t* value_end) {
    if (empty_ || done_) return false;
    SkipWs();
    if (i_ >= t_.size() || t_[i_] != '"') return false;
    const size_t k = i_;
    if (!SkipString()) return false;
    *key = t_.substr(k + 1, i_ - k - 2);
    SkipWs();
    if (i_ >= t_.size() || t_[i_] != ':') return false;
    ++i_;
    SkipWs();
    *value_begin = i_;
    if (!SkipValue()) return false;
    *value_end = i_;
    SkipWs();
    if (i_ >= t_.size()) return false;
    if (t_[i_] == '}') {
      done_ = true;
    } else if (t_[i_] == ',') {
      ++i_;
    } else {
      return false;
    }
    return true;
  }
  bool done() const { return done_; }

 private:
  void SkipWs() {
    while (i_ < t_.size() && IsJsonSpace(t_[i_])) ++i_;
  }
  // At a '"': past the closing quote, the first quote after an even run of
  // backslashes (memchr from quote to quote: prompts are most of a body).
  bool SkipString() {
    const size_t open = i_;
    for (size_t from = open + 1; from < t_.size();) {
      const void* q = std::memchr(t_.data() + from, '"', t_.size() - from);
      if (q == nullptr) return false;
      const size_t at = static_cast<size_t>(static_cast<const char*>(q) - t_.data());
      size_t backslashes = 0;
      while (at - backslashes > open + 1 && t_[at - backslashes - 1] == '\\') ++backslashes;
      if (backslashes % 2 == 0) {
        i_ = at + 1;
        return true;
      }
      from = at + 1;
    }
    return false;
  }
  // Past one value: a string, a nested object or array (brackets counted
  // outside strings), or a scalar up to the next delimiter.
  bool SkipValue() {
    if (i_ >= t_.size()) return false;
    if (t_[i_] == '"') return SkipString();
    if (t_[i_] == '{' || t_[i_] == '[') {
      int depth = 0;
      while (i_ < t_.size()) {
        const char c = t_[i_];
        if (c == '"') {
          if (!SkipString()) return false;
          continue;
        }
        if (c == '{' || c == '[') ++depth;
        if (c == '}' || c == ']') --depth;
        ++i_;
        if (depth == 0) return true;
      }
      return false;
    }
    const size_t start = i_;
    while (i_ < t_.size() && t_[i_] != ',' && t_[i_] != '}' && !IsJsonSpace(t_[i_])) ++i_;
    return i_ > start;
  }

  std::string_view t_;
  size_t i_ = 0;
  size_t brace_ = 0;
  bool empty_ = false;
  bool done_ = false;
};

StreamUsagePlan InsertAfterBrace(const TopLevelScanner& sc) {
  StreamUsagePlan plan;
  plan.action = StreamUsagePlan::Action::kInsert;
  plan.begin = plan.end = sc.brace() + 1;
  plan.text = std::string(kInsertedMember);
  if (!sc.empty()) plan.text.push_back(',');
  return plan;
}

// The plan for a top-level stream_options value `value`.
StreamUsagePlan PlanForValue(std::string_view value, size_t begin, size_t end) {
  StreamUsagePlan plan;
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(value.data(), value.size()), ec);
  if (ec) return plan;
  json::object options;
  if (v.is_object()) {
    options = std::move(v.get_object());
    const json::value* include = options.if_contains("include_usage");
    // vLLM's StreamOptions defaults include_usage to true.
    if (include == nullptr || (include->is_bool() && include->get_bool())) {
      plan.action = StreamUsagePlan::Action::kClientAsked;
      return plan;
    }
    if (!include->is_null() && !include->is_bool()) return plan;  // the engine's to judge
  } else if (!v.is_null()) {
    return plan;
  }
  // The client gets no usage from the engine: neither final nor per chunk.
  options.erase("continuous_usage_stats");
  options["include_usage"] = true;
  plan.action = StreamUsagePlan::Action::kReplace;
  plan.begin = begin;
  plan.end = end;
  plan.text = json::serialize(options);
  return plan;
}

// `"choices"`, optional spaces, ':', optional spaces, '[', optional spaces,
// ']' somewhere in `text`. A quote right after `choices` can only close a
// key (inside a JSON string it would be escaped), so this is a cheap and
// nearly exact test for an empty choices array; the parse confirms it.
bool HasEmptyChoices(std::string_view text) {
  constexpr std::string_view kKey = "\"choices\"";
  for (size_t at = text.find(kKey); at != std::string_view::npos; at = text.find(kKey, at + 1)) {
    size_t i = at + kKey.size();
    auto skip = [&] {
      while (i < text.size() && IsJsonSpace(text[i])) ++i;
    };
    skip();
    if (i >= text.size() || text[i] != ':') continue;
    ++i;
    skip();
    if (i >= text.size() || text[i] != '[') continue;
    ++i;
    skip();
    if (i < text.size() && text[i] == ']') return true;
  }
  return false;
}

// Whether a raw key (escapes untouched) names stream_options: the engine
// decodes `"stream\u005foptions"` to the same key.
bool IsStreamOptionsKey(std::string_view raw) {
  if (raw == "stream_options") return true;
  if (raw.find('\\') == std::string_view::npos || raw.size() > 96) return false;
  std::string quoted;
  quoted.reserve(raw.size() + 2);
  quoted.append("\"").append(raw).append("\"");
  boost::system::error_code ec;
  const json::value v = json::parse(quoted, ec);
  return !ec && v.is_string() && v.get_string() == "stream_options";
}

}  // namespace

std::array<std::string_view, 3> StreamUsagePlan::Pieces(std::string_view body) const {
  if (!edits_body()) return {body, {}, {}};
  return {body.substr(0, begin), text, body.substr(end)};
}

size_t StreamUsagePlan::BodySize(std::string_view body) const {
  if (!edits_body()) return body.size();
  return body.size() - (end - begin) + text.size();
}

std::string StreamUsagePlan::Apply(std::string_view body) const {
  std::string out;
  out.reserve(BodySize(body));
  for (std::string_view piece : Pieces(body)) out.append(piece);
  return out;
}

StreamUsagePlan PlanStreamUsage(std::string_view body) {
  TopLevelScanner sc(body);
  if (!sc.Open()) return {};
  // Most bodies: no stream_options anywhere, and no \u escape that could
  // spell one, so nothing to scan.
  if (body.find(kStreamOptionsKey) == std::string_view::npos &&
      body.find("\\u") == std::string_view::npos) {
    return InsertAfterBrace(sc);
  }
  std::optional<std::pair<size_t, size_t>> found;
  std::string_view key;
  size_t vb = 0, ve = 0;
  while (sc.Next(&key, &vb, &ve)) {
    if (!IsStreamOptionsKey(key)) continue;
    if (found) return {};  // twice: which one the engine keeps is its business
    found.emplace(vb, ve);
  }
  if (!sc.done() && !sc.empty()) return {};  // not a well-formed object
  if (!found) return InsertAfterBrace(sc);   // the bytes were inside some value
  return PlanForValue(body.substr(found->first, found->second - found->first), found->first,
                      found->second);
}

StreamUsageFilter::StreamUsageFilter(ResponseObserver* observer, size_t max_event_bytes)
    : observer_(observer), max_event_bytes_(max_event_bytes) {}

void StreamUsageFilter::Emit(std::string_view piece) {
  if (piece.empty()) return;
  out_.push_back(piece);
  observer_->Feed(piece);
}

bool StreamUsageFilter::IsInjectedUsage(std::string_view event) {
  // Most events: memmem skips ahead where find() stops at every quote.
  constexpr std::string_view kUsageKey = "\"usage\"";
  if (memmem(event.data(), event.size(), kUsageKey.data(), kUsageKey.size()) == nullptr) {
    return false;
  }
  // The event's one data line; comments and other fields are not expected
  // in a usage chunk, so an event with them is kept.
  std::string_view payload;
  bool have_data = false;
  size_t pos = 0;
  while (pos < event.size()) {
    size_t eol = event.find('\n', pos);
    if (eol == std::string_view::npos) eol = event.size();
    std::string_view line = event.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line.substr(0, 5) != "data:" || have_data) return false;
    have_data = true;
    payload = line.substr(5);
    if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
  }
  if (!have_data || !HasEmptyChoices(payload)) return false;
  Usage usage;
  if (!ParseUsageOnlyChunk(payload, &usage)) return false;
  observer_->ReportUsage(usage);
  ++dropped_;
  return true;
}

const std::vector<std::string_view>& StreamUsageFilter::Feed(std::string_view bytes) {
  out_.clear();
  completed_.clear();
  size_t pending = 0;      // first byte of `bytes` not yet sent, held or dropped
  size_t event_start = 0;  // where the current event began in `bytes` (if it did)
  bool event_in_held = !held_.empty();
  size_t pos = 0;
  while (pos < bytes.size()) {
    const void* found = std::memchr(bytes.data() + pos, '\n', bytes.size() - pos);
    if (found == nullptr) break;
    const size_t nl = static_cast<size_t>(static_cast<const char*>(found) - bytes.data());
    const size_t here = nl - pos;  // this line's bytes within `bytes`
    const size_t len = line_bytes_ + here;
    const bool blank = len == 0 || (len == 1 && (here == 1 ? bytes[pos] == '\r' : line_is_cr_));
    pos = nl + 1;
    line_bytes_ = 0;
    line_is_cr_ = false;
    if (!blank) continue;
    // An event ends at `pos`.
    if (oversized_) {
      oversized_ = false;  // its bytes go out with the kept ones
    } else if (event_in_held) {
      held_.append(bytes.substr(0, pos));
      if (!IsInjectedUsage(held_)) {
        completed_ = std::move(held_);
        Emit(completed_);
      }
      held_.clear();
      pending = pos;
    } else if (IsInjectedUsage(bytes.substr(event_start, pos - event_start))) {
      Emit(bytes.substr(pending, event_start - pending));
      pending = pos;
    }
    event_in_held = false;
    event_start = pos;
  }
  // The bytes after the last '\n' extend the current line.
  const size_t tail_line = bytes.size() - pos;
  if (tail_line > 0) {
    line_is_cr_ = line_bytes_ + tail_line == 1 && bytes.back() == '\r';
    line_bytes_ += tail_line;
  }
  if (oversized_) {
    Emit(bytes.substr(pending));
  } else if (event_in_held) {
    // The whole read continues an event begun earlier.
    if (held_.size() + bytes.size() > max_event_bytes_) {
      completed_ = std::move(held_);
      held_.clear();
      Emit(completed_);
      Emit(bytes);
      oversized_ = true;
    } else {
      held_.append(bytes);
    }
  } else {
    Emit(bytes.substr(pending, event_start - pending));
    const std::string_view rest = bytes.substr(event_start);
    if (rest.size() > max_event_bytes_) {
      Emit(rest);
      oversized_ = true;
    } else {
      held_.assign(rest);
    }
  }
  return out_;
}

const std::vector<std::string_view>& StreamUsageFilter::Finish() {
  out_.clear();
  // Its own string: the last Feed's pieces may point into completed_.
  tail_ = std::move(held_);
  held_.clear();
  Emit(tail_);
  return out_;
}

}  // namespace kvroute::proxy
