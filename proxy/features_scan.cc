#include "proxy/features_scan.h"

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

// What the scan of a body has found so far: the features it decoded on
// the way (one pass over the prompt; giving up discards them) and where
// the fields it decodes only at the end are.
struct FastScan {
  router::RequestFeatures f;
  RawString model, session, prompt;
  bool has_model = false, has_session = false, has_prompt = false, has_messages = false;
  bool has_tools = false;
  std::string_view tools_raw;
  bool seen_stream = false, seen_max = false, seen_max_completion = false;
  bool stream = false;
  int64_t max_tokens = -1, max_completion_tokens = -1;
  std::vector<ChatMessage> messages;
  // Chat: while every message so far had its role before its content, the
  // prompt is rendered into f.prompt_bytes during the scan; a content before
  // its role ends that, and the prompt is rendered from `messages` after.
  bool rendered_in_scan = true;
};

// A message's `content` value: a string (decoded into the prompt while the
// scan renders it, its role's head first) or null. False: give up.
bool ScanContent(BodyScanner& sc, bool has_role, ChatMessage& m, FastScan& scan) {
  if (sc.Peek('"')) {
    std::string* into = nullptr;
    if (scan.rendered_in_scan && has_role) {
      // "<|role|>" before the content, "\n" after it.
      sc.ReserveRest(&scan.f.prompt_bytes, DecodedSizeBound(m.role) + 5);
      AppendMessageHead(m.role, &scan.f.prompt_bytes);
      into = &scan.f.prompt_bytes;
    } else {
      scan.rendered_in_scan = false;
    }
    if (!sc.StringInto(&m.content, into)) return false;
    m.has_content = true;
    return true;
  }
  return sc.Literal("null");
}

// One entry of `messages`: an object with a string `role` and a string or
// null `content` (no `tool_calls`), rendered into the prompt while the scan
// renders it. False: give up.
bool ScanMessage(BodyScanner& sc, ChatMessage& m, FastScan& scan) {
  if (!sc.Eat('{')) return false;
  bool has_role = false, seen_content = false;
  sc.SkipWs();
  if (!sc.Eat('}')) {
    for (;;) {
      RawString mkey;
      if (!sc.String(&mkey) || mkey.escaped) return false;
      sc.SkipWs();
      if (!sc.Eat(':')) return false;
      sc.SkipWs();
      if (KeyIs(mkey, "role")) {
        if (has_role || !sc.Peek('"') || !sc.String(&m.role)) return false;
        has_role = true;
      } else if (KeyIs(mkey, "content")) {
        if (seen_content) return false;
        seen_content = true;
        if (!ScanContent(sc, has_role, m, scan)) return false;
      } else if (KeyIs(mkey, "tool_calls")) {
        return false;
      } else if (!sc.SkipValue(3)) {
        return false;
      }
      sc.SkipWs();
      if (sc.Eat('}')) break;
      if (!sc.Eat(',')) return false;
      sc.SkipWs();
    }
  }
  if (!has_role) return false;
  if (scan.rendered_in_scan) {
    if (m.has_content) {
      scan.f.prompt_bytes.push_back('\n');  // its head and content are out already
    } else {
      AppendMessage(m, &scan.f.prompt_bytes);
    }
  }
  return true;
}

// A chat body's `messages`: a non-empty list of at most max_messages
// entries. False: give up (an empty list is an error the DOM path words).
bool ScanMessages(BodyScanner& sc, const FeatureLimits& limits, FastScan& scan) {
  if (scan.has_messages || !sc.Eat('[')) return false;
  scan.has_messages = true;
  sc.SkipWs();
  if (sc.Eat(']')) return false;
  for (;;) {
    if (scan.messages.size() >= limits.max_messages) return false;
    ChatMessage m;
    if (!ScanMessage(sc, m, scan)) return false;
    scan.messages.push_back(m);
    sc.SkipWs();
    if (sc.Eat(']')) return true;
    if (!sc.Eat(',')) return false;
    sc.SkipWs();
  }
}

// `max_tokens` or `max_completion_tokens`: once, null or a number within
// max_tokens_limit.
bool ScanMaxTokens(BodyScanner& sc, bool completion, const FeatureLimits& limits,
                   FastScan& scan) {
  bool& seen = completion ? scan.seen_max_completion : scan.seen_max;
  int64_t& value = completion ? scan.max_completion_tokens : scan.max_tokens;
  if (seen) return false;
  seen = true;
  if (!sc.Literal("null")) {
    if (!sc.Number(&value) || value > limits.max_tokens_limit) return false;
  }
  return true;
}

// The value of the body's top-level member `key`: the few fields routing
// needs are read, any other value only validated. False: give up.
bool ScanMember(BodyScanner& sc, const RawString& key, bool chat,
                std::string_view session_header, const FeatureLimits& limits, FastScan& scan) {
  if (KeyIs(key, "model")) {
    if (scan.has_model || !sc.Peek('"') || !sc.StringInto(&scan.model, &scan.f.model)) {
      return false;
    }
    scan.has_model = true;
  } else if (KeyIs(key, "stream")) {
    if (scan.seen_stream) return false;
    scan.seen_stream = true;
    if (sc.Literal("true")) {
      scan.stream = true;
    } else if (!sc.Literal("false") && !sc.Literal("null")) {
      return false;
    }
  } else if (KeyIs(key, "max_tokens") || KeyIs(key, "max_completion_tokens")) {
    return ScanMaxTokens(sc, KeyIs(key, "max_completion_tokens"), limits, scan);
  } else if (KeyIs(key, "session_id")) {
    if (scan.has_session) return false;
    scan.has_session = true;
    // The header, when given, wins: the body's value is only checked.
    std::string* into = session_header.empty() ? &scan.f.session_id : nullptr;
    if (!sc.Literal("null") && (!sc.Peek('"') || !sc.StringInto(&scan.session, into))) {
      return false;
    }
  } else if (chat && KeyIs(key, "tools")) {
    // Rendered at the front of the prompt once the scan is done: chat
    // templates put the tool definitions before the first message.
    if (scan.has_tools) return false;
    scan.has_tools = true;
    const char* start = sc.pos();
    if (!sc.SkipValue(1)) return false;
    scan.tools_raw = std::string_view(start, static_cast<size_t>(sc.pos() - start));
  } else if (!chat && KeyIs(key, "prompt")) {
    if (scan.has_prompt || !sc.Peek('"')) return false;
    sc.ReserveRest(&scan.f.prompt_bytes);
    if (!sc.StringInto(&scan.prompt, &scan.f.prompt_bytes)) return false;
    scan.has_prompt = true;
  } else if (chat && KeyIs(key, "messages")) {
    return ScanMessages(sc, limits, scan);
  } else if (!sc.SkipValue(1)) {
    return false;
  }
  return true;
}

// The whole body: one object, then nothing but whitespace. False: give up.
bool ScanBody(BodyScanner& sc, bool chat, std::string_view session_header,
              const FeatureLimits& limits, FastScan& scan) {
  sc.SkipWs();
  if (!sc.Eat('{')) return false;
  sc.SkipWs();
  if (!sc.Eat('}')) {
    for (;;) {
      RawString key;
      if (!sc.String(&key) || key.escaped) return false;
      sc.SkipWs();
      if (!sc.Eat(':')) return false;
      sc.SkipWs();
      if (!ScanMember(sc, key, chat, session_header, limits, scan)) return false;
      sc.SkipWs();
      if (sc.Eat('}')) break;
      if (!sc.Eat(',')) return false;
      sc.SkipWs();
    }
  }
  sc.SkipWs();
  return sc.AtEnd();
}

// The features from a finished scan: the fields read as scalars, the
// session header, the prompt rendered from `messages` when the scan could
// not render it, and the tools at its front.
std::optional<router::RequestFeatures> Assemble(FastScan& scan, bool chat,
                                                std::string_view session_header,
                                                const FeatureLimits& limits) {
  router::RequestFeatures& f = scan.f;
  f.stream = scan.stream;
  if (scan.max_completion_tokens >= 0) {
    f.max_tokens = scan.max_completion_tokens;
  } else if (scan.max_tokens >= 0) {
    f.max_tokens = scan.max_tokens;
  }
  if (!session_header.empty()) f.session_id = std::string(session_header);
  if (chat && !scan.rendered_in_scan) {
    size_t size = 0;
    for (const ChatMessage& m : scan.messages) {
      size += DecodedSizeBound(m.role) + (m.has_content ? DecodedSizeBound(m.content) : 0) + 5;
    }
    f.prompt_bytes.clear();
    f.prompt_bytes.reserve(size);
    for (const ChatMessage& m : scan.messages) AppendMessage(m, &f.prompt_bytes);
  }
  if (scan.has_tools) {
    std::string head;
    if (!RenderRawTools(scan.tools_raw, limits, &head)) return std::nullopt;
    if (!head.empty()) f.prompt_bytes.insert(0, head);
  }
  return std::move(f);
}

}  // namespace

// The fast path; nullopt means "ask the DOM path".
std::optional<router::RequestFeatures> ExtractFeaturesFast(Endpoint endpoint,
                                                           std::string_view body,
                                                           std::string_view session_header,
                                                           const FeatureLimits& limits) {
  if (limits.max_json_depth < 8) return std::nullopt;
  if (endpoint != Endpoint::kChat && endpoint != Endpoint::kCompletions) return std::nullopt;
  const bool chat = endpoint == Endpoint::kChat;
  BodyScanner sc(body, limits.max_json_depth);
  FastScan scan;
  if (!ScanBody(sc, chat, session_header, limits, scan)) return std::nullopt;
  if (chat ? !scan.has_messages : !scan.has_prompt) return std::nullopt;
  return Assemble(scan, chat, session_header, limits);
}

}  // namespace kvroute::proxy
