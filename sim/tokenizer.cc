#include "sim/tokenizer.h"

#include <xxhash.h>

#include <array>

namespace sim {
namespace {

constexpr int kMaxWordBytes = 4;

bool IsWordByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsSpace(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Length of the piece starting at text[i]. Depends only on text[i .. i+len] (one byte of
// look-ahead), which is what makes the segmentation prefix-stable.
size_t PieceLength(std::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  const size_t n = text.size();
  if (c == ' ' && i + 1 < n && IsWordByte(static_cast<unsigned char>(text[i + 1]))) {
    size_t len = 1;
    while (i + len < n && len < 1 + kMaxWordBytes &&
           IsWordByte(static_cast<unsigned char>(text[i + len]))) {
      ++len;
    }
    return len;
  }
  if (IsWordByte(c)) {
    size_t len = 1;
    while (i + len < n && len < kMaxWordBytes &&
           IsWordByte(static_cast<unsigned char>(text[i + len]))) {
      ++len;
    }
    return len;
  }
  if (IsSpace(c)) {
    size_t len = 1;
    // A run of spaces, leaving the last space to prefix a following word.
    while (i + len < n && len < 8 && IsSpace(static_cast<unsigned char>(text[i + len])) &&
           !(text[i + len] == ' ' && i + len + 1 < n &&
             IsWordByte(static_cast<unsigned char>(text[i + len + 1])))) {
      ++len;
    }
    return len;
  }
  if (c >= 0xC0) {
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return std::min(len, n - i);
  }
  return 1;  // newline, punctuation, stray continuation byte
}

// One token each: a space and at most four letters.
constexpr std::array<std::string_view, 64> kWords = {
    " the",  " of",   " and",  " to",   " in",   " is",  " that", " for",  " it",   " with",
    " as",   " on",   " be",   " this", " by",   " are", " from", " at",   " or",   " an",
    " we",   " can",  " data", " each", " will", " one", " all",  " time", " if",   " not",
    " has",  " more", " when", " new",  " code", " key", " size", " next", " node", " path",
    " line", " file", " list", " set",  " map",  " run", " test", " call", " use",  " then",
    " step", " load", " last", " fast", " slow", " hit", " miss", " kv",   " gpu",  " tok",
    " was",  " but",  " so",   "."};

}  // namespace

std::vector<std::string_view> StandInTokenizer::Split(std::string_view text) {
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 3 + 1);
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = PieceLength(text, i);
    pieces.push_back(text.substr(i, len));
    i += len;
  }
  return pieces;
}

int32_t StandInTokenizer::PieceId(std::string_view piece) {
  return static_cast<int32_t>(XXH3_64bits(piece.data(), piece.size()) % kVocabSize);
}

std::vector<int32_t> StandInTokenizer::Encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = PieceLength(text, i);
    ids.push_back(PieceId(text.substr(i, len)));
    i += len;
  }
  return ids;
}

std::string StandInTokenizer::RenderChat(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  out += "<|im_start|>assistant\n";
  return out;
}

std::string_view StandInTokenizer::GeneratedPiece(uint64_t seed, int index) {
  const uint64_t x = XXH3_64bits_withSeed(&index, sizeof(index), seed);
  return kWords[x % kWords.size()];
}

}  // namespace sim
