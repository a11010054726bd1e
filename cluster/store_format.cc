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

namespace {

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads little-endian integers off the front of `in`; false when it is short.
bool TakeU64(absl::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<unsigned char>((*in)[i])} << (8 * i);
  in->remove_prefix(8);
  return true;
}
bool TakeU32(absl::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v |= uint32_t{static_cast<unsigned char>((*in)[i])} << (8 * i);
  in->remove_prefix(4);
  return true;
}

}  // namespace

std::string FormatPins(const std::vector<RequestPin>& pins) {
  std::string out;
  for (const RequestPin& p : pins) {
    PutU64(&out, p.id);
    PutU64(&out, static_cast<uint64_t>(p.footprint_chunks));
    PutU32(&out, static_cast<uint32_t>(p.instance.size()));
    out += p.instance;
    PutU32(&out, static_cast<uint32_t>(p.chain.size()));
    for (uint64_t h : p.chain) PutU64(&out, h);
  }
  return out;
}

bool ParsePins(absl::string_view bytes, std::vector<RequestPin>* into) {
  while (!bytes.empty()) {
    RequestPin p;
    uint64_t footprint = 0;
    uint32_t name = 0;
    uint32_t chunks = 0;
    if (!TakeU64(&bytes, &p.id) || !TakeU64(&bytes, &footprint) || !TakeU32(&bytes, &name) ||
        bytes.size() < name) {
      return false;
    }
    p.footprint_chunks = static_cast<int64_t>(footprint);
    p.instance = std::string(bytes.substr(0, name));
    bytes.remove_prefix(name);
    if (!TakeU32(&bytes, &chunks) || bytes.size() / 8 < chunks) return false;
    p.chain.resize(chunks);
    for (uint64_t& h : p.chain) TakeU64(&bytes, &h);
    into->push_back(std::move(p));
  }
  return true;
}

std::string FormatPinIds(const std::vector<uint64_t>& ids) {
  std::string out;
  out.reserve(ids.size() * 8);
  for (uint64_t id : ids) PutU64(&out, id);
  return out;
}

bool ParsePinIds(absl::string_view bytes, std::vector<uint64_t>* into) {
  if (bytes.size() % 8 != 0) return false;
  uint64_t id = 0;
  while (TakeU64(&bytes, &id)) into->push_back(id);
  return true;
}

std::string FormatRate(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", r);
  return buf;
}

}  // namespace kvroute::cluster
