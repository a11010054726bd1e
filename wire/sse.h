// Server-sent events as the OpenAI streaming API uses them: every event is
// one `data:` line and a blank line, the stream ends with `data: [DONE]`.
// Writers (the simulator, the proxy's error events) frame payloads with
// AppendSseData; readers (the bench client) split a byte stream into
// payloads with SseDataReader.
//
//   std::string out;
//   wire::AppendSseData(&out, R"({"choices":[...]})");
//   out += wire::kSseDone;
//
//   wire::SseDataReader reader;
//   reader.Feed(bytes, [&](std::string_view payload) { ... });
//
// Thread-safety: the functions are pure; one SseDataReader belongs to one
// stream and is not shared.
#pragma once

#include <string>
#include <string_view>

namespace kvroute::wire {

// The event that ends an OpenAI stream.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Appends "data: <payload>\n\n". `payload` must hold no newline (JSON
// serialised on one line does not).
void AppendSseData(std::string* out, std::string_view payload);

// "data: <payload>\n\n" as a new string.
std::string SseData(std::string_view payload);

// Incremental splitter: Feed() bytes as they arrive, in pieces of any size;
// it calls `on_data` with the payload of each complete `data:` line (one
// optional space after the colon and a trailing CR removed). Other fields
// (event:, id:, comments) and blank lines are skipped. Buffers at most one
// incomplete line.
class SseDataReader {
 public:
  template <typename F>
  void Feed(std::string_view bytes, F&& on_data) {
    pending_.append(bytes);
    size_t start = 0;
    while (true) {
      const size_t nl = pending_.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(pending_.data() + start, nl - start);
      start = nl + 1;
      if (DataPayload(&line)) on_data(line);
    }
    pending_.erase(0, start);
  }

  // Bytes held of a line not yet ended.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  // Turns `line` into its payload when it is a data line.
  static bool DataPayload(std::string_view* line);

  std::string pending_;
};

}  // namespace kvroute::wire
