// Stand-in tokenizer of the simulator.
//
// Deterministic and prefix-stable: the tokens of a prefix of a text are a prefix of the tokens
// of the whole text, except possibly the last one. It averages about 4 bytes per token on
// English text (a piece is an optional leading space plus up to 4 letters/digits, a run of
// whitespace, one punctuation byte or one UTF-8 code point). Token ids are a hash of the piece.
// This is simulator-only code: the proxy never links it (like a real deployment, it sees text).
// Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sim {

struct ChatMessage {
  std::string role;
  std::string content;
};

class StandInTokenizer {
 public:
  // Vocabulary size: ids are in [0, kVocabSize).
  static constexpr int32_t kVocabSize = 151936;

  static std::vector<int32_t> Encode(std::string_view text);
  // Splits `text` into the pieces Encode() hashes (for tests and debugging).
  static std::vector<std::string_view> Split(std::string_view text);
  static int32_t PieceId(std::string_view piece);

  // Chat messages rendered with a fixed ChatML-like template, ending with the assistant header
  // (the generation prompt).
  static std::string RenderChat(const std::vector<ChatMessage>& messages);

  // The text of the `index`-th generated token of a request whose output seed is `seed`:
  // a space and a common English word, so generated text re-tokenizes to the same tokens.
  static std::string_view GeneratedPiece(uint64_t seed, int index);
};

}  // namespace sim
