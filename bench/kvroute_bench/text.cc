#include "bench/kvroute_bench/text.h"

#include <xxhash.h>

#include <array>
#include <cstring>

namespace kvroute::bench {
namespace {

// Common three-letter English words; 256 of them so every token carries 8 bits.
constexpr std::array<std::string_view, 256> kWords = {
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
    "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old",
    "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use",
    "ask", "big", "box", "car", "cat", "cup", "cut", "dog", "dry", "ear", "eat", "egg", "end",
    "eye", "far", "fat", "few", "fit", "fix", "fly", "fun", "gun", "hat", "hit", "hot", "ice",
    "ill", "job", "key", "kid", "lay", "leg", "lie", "lot", "low", "map", "mix", "mom", "net",
    "nor", "oil", "pay", "pen", "pet", "pie", "pot", "raw", "red", "rid", "row", "run", "sad",
    "sat", "sea", "set", "sir", "sit", "six", "sky", "son", "sun", "tax", "tea", "ten", "tie",
    "tip", "toe", "top", "toy", "try", "war", "wet", "win", "yes", "yet", "zoo", "act", "add",
    "age", "ago", "aid", "aim", "air", "arm", "art", "bad", "bag", "bar", "bat", "bed", "bee",
    "bet", "bid", "bit", "bow", "bus", "buy", "cab", "cap", "cop", "cow", "cry", "dad", "die",
    "dig", "dot", "due", "dug", "dye", "ego", "elf", "era", "fan", "fee", "fig", "fin", "fog",
    "fox", "gap", "gas", "gel", "gem", "gum", "guy", "gym", "hay", "hen", "hid", "hip", "hop",
    "hug", "hum", "ink", "jam", "jar", "jaw", "jet", "joy", "jug", "kit", "lab", "lap", "law",
    "lid", "lip", "log", "mad", "mat", "mud", "mug", "nap", "nod", "nut", "oak", "oar", "odd",
    "off", "opt", "owl", "own", "pad", "pal", "pan", "paw", "pea", "peg", "pig", "pin", "pit",
    "pop", "pub", "pun", "pup", "rag", "ram", "rat", "ray", "rib", "rim", "rod", "rot", "rub",
    "rug", "sap", "saw", "sew", "shy", "sin", "sip", "sob", "sow", "spa", "spy", "sub", "sum",
    "tab", "tag", "tan", "tap", "tar", "tin", "ton", "tub", "tug", "urn", "van", "vat", "vet",
    "via", "vow", "wax", "web", "wig", "wit", "wok", "won", "yak"};

}  // namespace

uint64_t StreamSeed(uint64_t seed, std::string_view domain, uint64_t a, uint64_t b) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, seed);
  XXH64_update(state, domain.data(), domain.size());
  unsigned char ints[16];
  std::memcpy(ints, &a, 8);
  std::memcpy(ints + 8, &b, 8);
  XXH64_update(state, ints, sizeof(ints));
  const uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double SplitMix64::NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

void AppendSyntheticText(uint64_t stream_seed, int64_t tokens, std::string& out) {
  if (tokens <= 0) return;
  out.reserve(out.size() + static_cast<size_t>(tokens * kBytesPerToken));
  SplitMix64 rng(stream_seed);
  uint64_t bits = 0;
  int left = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    if (left == 0) {
      bits = rng.Next();
      left = 8;
    }
    const std::string_view word = kWords[bits & 0xff];
    bits >>= 8;
    --left;
    out.push_back(' ');
    out.append(word);
  }
}

std::string SyntheticText(uint64_t stream_seed, int64_t tokens) {
  std::string out;
  AppendSyntheticText(stream_seed, tokens, out);
  return out;
}

}  // namespace kvroute::bench
