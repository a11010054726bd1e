#include "sim/oracle.h"

#include <boost/json.hpp>

#include "sim/api.h"
#include "sim/instance.h"
#include "sim/tokenizer.h"

namespace sim {
namespace json = boost::json;

boost::asio::awaitable<OracleAnswer> AnswerCachedTokens(std::string body, Instance* self) {
  OracleAnswer answer;
  boost::system::error_code ec;
  const json::value v = json::parse(body, ec);
  const bool chat = !ec && v.is_object() && v.as_object().contains("messages");
  CompletionRequest parsed;
  if (auto err = ParseCompletionRequest(
          body, chat ? Endpoint::kChatCompletions : Endpoint::kCompletions, &parsed)) {
    answer.status = err->status;
    answer.body = ErrorJson(*err);
    co_return answer;
  }
  std::shared_ptr<const std::vector<int32_t>> tokens = std::make_shared<const std::vector<int32_t>>(
      parsed.prompt_is_ids ? std::move(parsed.prompt_ids)
                           : StandInTokenizer::Encode(parsed.prompt_text));
  json::array instances;
  for (int i = 0;; ++i) {
    Instance* peer = self->Peer(i);
    if (peer == nullptr) break;
    boost::asio::awaitable<int64_t> ask = peer->CachedPrefixTokens(tokens);
    const int64_t cached = co_await std::move(ask);
    instances.push_back(json::object{{"instance", i}, {"cached_tokens", cached}});
  }
  json::object o;
  o["prompt_tokens"] = tokens->size();
  o["instances"] = std::move(instances);
  answer.body = json::serialize(o);
  co_return answer;
}

}  // namespace sim
