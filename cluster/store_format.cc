#include "cluster/store_format.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvroute::cluster {

std::string FormatLoad(const InstanceLoad& l) {
  return absl::StrCat(l.requests, ":", l.prefill_tokens, ":", l.tokens, ":", l.decoding_requests,
                      ":", l.waiting);
}

std::string FormatResidents(const std::vector<std::pair<std::string, int64_t>>& residents) {
  std::string out;
  for (const auto& [session, tokens] : residents) {
    if (session.find('\n') != std::string::npos) continue;
    absl::StrAppend(&out, tokens, " ", session, "\n");
  }
  return out;
}

void ParseResidents(absl::string_view text, absl::flat_hash_map<std::string, int64_t>* into) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t space = line.find(' ');
    int64_t tokens = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, space), &tokens)) {
      continue;
    }
    int64_t& held = (*into)[std::string(line.substr(space + 1))];
    held = std::max(held, tokens);
  }
}

bool ParseLoad(absl::string_view text, InstanceLoad* l) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  return parts.size() == 5 && absl::SimpleAtoi(parts[0], &l->requests) &&
         absl::SimpleAtoi(parts[1], &l->prefill_tokens) && absl::SimpleAtoi(parts[2], &l->tokens) &&
         absl::SimpleAtoi(parts[3], &l->decoding_requests) &&
         absl::SimpleAtoi(parts[4], &l->waiting);
}

std::string FormatRate(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", r);
  return buf;
}

}  // namespace kvroute::cluster
