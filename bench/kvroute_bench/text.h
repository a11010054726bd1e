// Deterministic English-like synthetic text for load generation.
//
// Every "token" is one space followed by a three-letter English word (" the", " cat"), so a
// text of N tokens is exactly 4 * N bytes. Byte-based token estimators (4 bytes/token) and
// real BPE tokenizers (one token per common word with its leading space) both count close to
// N, which keeps requested sizes and the engine's `usage.prompt_tokens` in agreement.
//
// Usage:
//   std::string block = SyntheticText(StreamSeed(seed, "trace-block", hash_id), 512);
//
// Thread-safety: all functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvroute::bench {

inline constexpr int64_t kBytesPerToken = 4;

// A seed for one independent text stream, derived from a run seed, a domain name and up to
// two integers (e.g. job id and turn). Stable across platforms and builds (xxHash64).
uint64_t StreamSeed(uint64_t seed, std::string_view domain, uint64_t a, uint64_t b = 0);

// SplitMix64: a tiny generator whose output is fixed by its seed on every platform
// (unlike std:: distributions, whose algorithms are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, 1).
  double NextDouble();

 private:
  uint64_t state_;
};

// `tokens` tokens of text from the stream `stream_seed`: exactly kBytesPerToken * tokens bytes.
// A shorter request returns a prefix of a longer one with the same seed.
std::string SyntheticText(uint64_t stream_seed, int64_t tokens);

// Appends the same text to `out` without an intermediate copy.
void AppendSyntheticText(uint64_t stream_seed, int64_t tokens, std::string& out);

}  // namespace kvroute::bench
