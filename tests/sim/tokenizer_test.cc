#include "sim/tokenizer.h"

#include <gtest/gtest.h>

#include <string>

namespace sim {
namespace {

constexpr const char* kEnglish =
    "The quick brown fox jumps over the lazy dog. Prefix caching lets an inference engine "
    "reuse the attention keys and values it already computed for an earlier request, so a "
    "multi-turn conversation only pays for the tokens of its newest turn. Routing requests of "
    "one session to the same instance is therefore worth a lot of GPU time, until that "
    "instance is overloaded and the queue in front of it grows longer than the prefill it "
    "saves.\n";

TEST(StandInTokenizerTest, IsDeterministic) {
  EXPECT_EQ(StandInTokenizer::Encode(kEnglish), StandInTokenizer::Encode(kEnglish));
  EXPECT_NE(StandInTokenizer::Encode("hello world"), StandInTokenizer::Encode("hello there"));
}

TEST(StandInTokenizerTest, AveragesAboutFourBytesPerTokenOnEnglish) {
  const std::string text = kEnglish;
  const double bytes_per_token =
      static_cast<double>(text.size()) / StandInTokenizer::Encode(text).size();
  EXPECT_GT(bytes_per_token, 3.5);
  EXPECT_LT(bytes_per_token, 4.5);
}

TEST(StandInTokenizerTest, IsPrefixStableExceptTheLastToken) {
  const std::string text = kEnglish;
  const std::vector<int32_t> whole = StandInTokenizer::Encode(text);
  for (size_t cut = 1; cut < text.size(); ++cut) {
    const std::vector<int32_t> prefix = StandInTokenizer::Encode(text.substr(0, cut));
    ASSERT_LE(prefix.size(), whole.size());
    for (size_t i = 0; i + 1 < prefix.size(); ++i) {
      ASSERT_EQ(prefix[i], whole[i]) << "cut " << cut << " token " << i;
    }
  }
}

TEST(StandInTokenizerTest, PiecesCoverTheText) {
  std::string joined;
  for (std::string_view p : StandInTokenizer::Split("héllo,  wörld\n\tok")) joined += p;
  EXPECT_EQ(joined, "héllo,  wörld\n\tok");
}

TEST(StandInTokenizerTest, ChatTemplateIsFixed) {
  EXPECT_EQ(StandInTokenizer::RenderChat({{"system", "be brief"}, {"user", "hi"}}),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(StandInTokenizerTest, GeneratedTextRetokenizesToOneTokenPerPiece) {
  for (int i = 0; i < 50; ++i) {
    const std::string_view piece = StandInTokenizer::GeneratedPiece(7, i);
    EXPECT_EQ(StandInTokenizer::Encode(piece).size(), 1u) << piece;
  }
}

}  // namespace
}  // namespace sim
