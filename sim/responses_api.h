// The OpenAI Responses API (POST /v1/responses, GET /v1/responses/{id}) as vLLM serves it
// (vllm/entrypoints/openai/responses/{serving,streaming_events,api_router}.py), for models
// without the harmony format: the request becomes chat messages (`instructions` as the system
// message, then the stored conversation of `previous_response_id`: its input messages and its
// output, then `input`), run through the chat path; the output becomes a response object or
// its SSE events, each framed as "event: <type>\ndata: <json>\n\n" (no [DONE]):
//
//   response.created, response.in_progress       {"response": {... "status":"in_progress"}}
//   response.output_item.added                   message item, status in_progress
//   response.content_part.added                  output_text part, content_index 0
//   response.output_text.delta ...               one per generated piece
//   response.output_text.done, response.content_part.done, response.output_item.done
//   response.completed                           {"response": the full response}
// (a function call instead: output_item.added with the function_call item,
// function_call_arguments.delta/.done, output_item.done). Every event has a sequence_number
// counting from 0.
//
// Usage: {"input_tokens", "input_tokens_details": {"cached_tokens"}, "output_tokens",
// "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}: vLLM reports the prefix-cache
// hits of the request here, unlike on /v1/messages.
//
// Storage: vLLM keeps responses (and the messages that produced them) in the memory of the
// server that produced them, only when started with VLLM_ENABLE_RESPONSES_API_STORE=1 and the
// request does not say "store": false. A follow-up naming an unknown previous_response_id, and
// a GET of an unknown id, get 404 {"error": {"message": "Response with id '<id>' not found.",
// "type": "invalid_request_error", "param": null, "code": 404}}. vLLM never evicts; the
// simulator's ResponseStore is bounded and forgets the oldest response first (an evicted id
// then answers like an unknown one, as after a restart).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <boost/json.hpp>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "sim/api.h"
#include "sim/output_format.h"

namespace sim {

// A stored response: what GET returns, and what a follow-up continues from.
struct StoredResponse {
  boost::json::object response;
  boost::json::array messages;  // the chat messages of the request that produced it
};

// One instance's response store. Owned by the Instance; strand-only (not thread-safe).
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  bool enabled() const { return capacity_ > 0; }
  size_t size() const { return by_id_.size(); }
  const StoredResponse* Find(std::string_view id) const;
  void Put(const std::string& id, StoredResponse stored);

 private:
  size_t capacity_;
  absl::flat_hash_map<std::string, StoredResponse> by_id_;
  std::deque<std::string> order_;  // oldest first
};

struct ResponsesRequest {
  std::string chat_body;        // the equivalent /v1/chat/completions request, serialised
  boost::json::array messages;  // its chat messages (stored with the response)
  bool stream = false;
  bool store = true;
  std::optional<ForcedToolCall> forced_tool;
  boost::json::object echo;  // request fields the response object repeats
};

// Validates a /v1/responses body, resolves previous_response_id in `store` and converts it;
// on failure returns the error to send (always in the OpenAI error shape).
std::optional<ApiError> ConvertResponsesRequest(std::string_view body, const ResponseStore& store,
                                                ResponsesRequest* out);

// 404 for an id the store does not hold.
ApiError ResponseNotFound(std::string_view id);

class ResponsesOutput final : public ChatOutputFormat {
 public:
  // `response_id` is "resp_<hex>", `item_id`/`call_id` name the output item; the finished
  // response is stored in `store` when the request asked for it (and the store is enabled).
  ResponsesOutput(ResponsesRequest request, std::string response_id, std::string item_id,
                  std::string call_id, int64_t created, ResponseStore* store);

  std::string ErrorBody(const ApiError& error) const override;
  std::string FullBody(const ChatOutcome& outcome) override;
  std::string StreamStart(const std::string& id, int64_t created, const std::string& model,
                          int prompt_tokens) override;
  std::string StreamText(std::string_view piece) override;
  std::string StreamEnd(std::string_view finish, const Usage& usage) override;

 private:
  boost::json::object Response(const std::string& model, std::string_view status,
                               const boost::json::array& output, const Usage* usage) const;
  boost::json::array Output(std::string_view text) const;
  std::string Event(boost::json::object event);
  void Store(const boost::json::object& response);

  ResponsesRequest request_;
  std::string response_id_;
  std::string item_id_;
  std::string call_id_;
  int64_t created_;
  ResponseStore* store_;
  std::string model_;
  std::string text_;  // streamed so far
  bool item_open_ = false;
  int sequence_number_ = 0;
};

}  // namespace sim
