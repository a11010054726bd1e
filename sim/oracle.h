// The fleet oracle: a simulator-only endpoint that answers, for a prompt, how many of its
// tokens each instance of this kvroute-sim process really holds in its KV caches now.
//
//   POST /sim/oracle/cached_tokens   (any instance; the body is an OpenAI completions or chat
//                                     body, as sent to /v1/completions or /v1/chat/completions)
//   200 {"prompt_tokens": 91234,
//        "instances": [{"instance": 0, "cached_tokens": 90112}, ...]}   (by instance index)
//
// cached_tokens is what the engine would reuse if the request were admitted now, and report as
// usage.prompt_tokens_details.cached_tokens: the longest cached prefix of whole blocks and,
// with a host tier (--kv-offloading-size), the run of whole offloaded blocks host memory holds
// after it (Engine::CachedPromptTokens), at most prompt_tokens - 1 (the last token is always
// computed). It exists so kvroute-bench can measure routing against the truth (its oracle
// reference); no real engine offers it and kvroute never calls it.
//
// Thread-safety: each instance's engine is read on that instance's strand.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sim {

class Instance;

inline constexpr std::string_view kOracleCachedTokensPath = "/sim/oracle/cached_tokens";

struct OracleAnswer {
  int status = 200;
  std::string body;  // JSON; vLLM-shaped error body when status != 200
};

// Parses `body` like a completion request, tokenizes it once, and asks instance 0, 1, ... of
// `self`'s fleet (through `self`'s peer lookup, until it returns none) for its cached prefix.
boost::asio::awaitable<OracleAnswer> AnswerCachedTokens(std::string body, Instance* self);

}  // namespace sim
