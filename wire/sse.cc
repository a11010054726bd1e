#include "wire/sse.h"

namespace kvroute::wire {

void AppendSseData(std::string* out, std::string_view payload) {
  out->reserve(out->size() + payload.size() + 8);
  out->append("data: ");
  out->append(payload);
  out->append("\n\n");
}

std::string SseData(std::string_view payload) {
  std::string out;
  AppendSseData(&out, payload);
  return out;
}

bool SseDataReader::DataPayload(std::string_view* line) {
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  constexpr std::string_view kField = "data:";
  if (line->substr(0, kField.size()) != kField) return false;
  line->remove_prefix(kField.size());
  if (!line->empty() && line->front() == ' ') line->remove_prefix(1);
  return true;
}

}  // namespace kvroute::wire
