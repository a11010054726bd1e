#include "proxy/stream_usage.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "proxy/response_observer.h"

namespace kvroute::proxy {
namespace {
namespace json = boost::json;
using Action = StreamUsagePlan::Action;

// Byte-level fixtures in vLLM's own serialisation (pydantic model_dump_json:
// no spaces; chat chunks with exclude_unset, so no `usage` key unless
// continuous_usage_stats; the usage-only chunk with exclude_none).
const std::string kChatHead =
    "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
    "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
    "\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
    "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,"
    "\"finish_reason\":null}]}\n\n"
    "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
    "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},\"logprobs\":null,"
    "\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n";
const std::string kChatUsage =
    "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
    "\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":14,"
    "\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n";
const std::string kDone = "data: [DONE]\n\n";

// Older vLLM completions chunks (exclude_unset=False): `"usage":null` in
// every chunk; a cold prompt's usage has no prompt_tokens_details.
const std::string kCmplHead =
    "data: {\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":"
    "\"m\",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,\"finish_reason\":null,"
    "\"stop_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":"
    "\"m\",\"choices\":[{\"index\":0,\"text\":\" b\",\"logprobs\":null,\"finish_reason\":"
    "\"length\",\"stop_reason\":null}],\"usage\":null}\n\n";
const std::string kCmplUsage =
    "data: {\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":"
    "\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"total_tokens\":42,"
    "\"completion_tokens\":2}}\n\n";

std::string CrLf(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out.push_back('\r');
    out.push_back(c);
  }
  return out;
}

struct Filtered {
  std::string client;  // what the client gets
  Usage usage;
  bool saw_done = false;
  int64_t events = 0;
  int64_t dropped = 0;
};

// Runs `stream` through a filter in reads of the given sizes (cycled).
Filtered FilterStream(const std::string& stream, const std::vector<size_t>& reads,
                      CachedTokensRule* rule = nullptr, size_t max_event = 1 << 20) {
  ResponseObserver observer(/*sse=*/true, 1 << 20, 1 << 20, false, ApiDialect::kOpenAi, rule);
  StreamUsageFilter filter(&observer, max_event);
  Filtered f;
  size_t i = 0;
  for (size_t r = 0; i < stream.size(); ++r) {
    const size_t n = std::min(reads[r % reads.size()], stream.size() - i);
    for (std::string_view p : filter.Feed(std::string_view(stream).substr(i, n))) f.client += p;
    i += n;
  }
  for (std::string_view p : filter.Finish()) f.client += p;
  observer.Finish();
  f.usage = observer.usage();
  f.saw_done = observer.saw_done();
  f.events = observer.events();
  f.dropped = filter.dropped_events();
  return f;
}

TEST(StreamUsageFilterTest, ChatStreamLosesExactlyTheUsageChunk) {
  const Filtered f = FilterStream(kChatHead + kChatUsage + kDone, {1 << 16});
  EXPECT_EQ(f.client, kChatHead + kDone);
  EXPECT_EQ(f.dropped, 1);
  EXPECT_TRUE(f.saw_done);
  EXPECT_EQ(f.events, 5);
  EXPECT_EQ(f.usage.prompt_tokens, 12);
  EXPECT_EQ(f.usage.cached_tokens, 8);
  EXPECT_EQ(f.usage.completion_tokens, 2);
}

TEST(StreamUsageFilterTest, EventsSplitAcrossReadsAtEveryPlace) {
  const std::string stream = kChatHead + kChatUsage + kDone;
  // Two reads cut at every byte, and fixed small read sizes.
  for (size_t cut = 1; cut < stream.size(); ++cut) {
    const Filtered f = FilterStream(stream, {cut, stream.size()});
    ASSERT_EQ(f.client, kChatHead + kDone) << "cut " << cut;
    ASSERT_EQ(f.usage.cached_tokens, 8) << "cut " << cut;
    ASSERT_TRUE(f.saw_done) << "cut " << cut;
  }
  for (size_t read : {1, 2, 3, 7, 64, 255}) {
    const Filtered f = FilterStream(stream, {read});
    EXPECT_EQ(f.client, kChatHead + kDone) << "read " << read;
    EXPECT_EQ(f.dropped, 1) << "read " << read;
  }
}

TEST(StreamUsageFilterTest, CrLfEventsAtEverySplit) {
  const std::string stream = CrLf(kChatHead + kChatUsage + kDone);
  for (size_t cut = 1; cut < stream.size(); ++cut) {
    const Filtered f = FilterStream(stream, {cut, stream.size()});
    ASSERT_EQ(f.client, CrLf(kChatHead + kDone)) << "cut " << cut;
    ASSERT_EQ(f.usage.prompt_tokens, 12) << "cut " << cut;
  }
  // A CRLF usage chunk between LF events (mixed line ends).
  const Filtered mixed = FilterStream(kChatHead + CrLf(kChatUsage) + kDone, {5});
  EXPECT_EQ(mixed.client, kChatHead + kDone);
  EXPECT_EQ(mixed.dropped, 1);
}

TEST(StreamUsageFilterTest, CompletionsStreamWithNullUsageInEveryChunk) {
  const Filtered f = FilterStream(kCmplHead + kCmplUsage + kDone, {17});
  EXPECT_EQ(f.client, kCmplHead + kDone);  // "usage":null chunks stay
  EXPECT_EQ(f.dropped, 1);
  EXPECT_EQ(f.usage.prompt_tokens, 40);
  EXPECT_EQ(f.usage.cached_tokens, -1);  // no details, no rule
}

TEST(StreamUsageFilterTest, ColdUsageReadThroughTheBackendsRule) {
  CachedTokensRule zero(AbsentCachedTokens::kZero);
  EXPECT_EQ(FilterStream(kCmplHead + kCmplUsage + kDone, {9}, &zero).usage.cached_tokens, 0);
  CachedTokensRule unknown(AbsentCachedTokens::kUnknown);
  EXPECT_EQ(FilterStream(kCmplHead + kCmplUsage + kDone, {9}, &unknown).usage.cached_tokens, -1);
  // auto: unknown until the backend has been seen writing details.
  CachedTokensRule autorule;
  EXPECT_EQ(FilterStream(kCmplHead + kCmplUsage + kDone, {9}, &autorule).usage.cached_tokens, -1);
  EXPECT_EQ(FilterStream(kChatHead + kChatUsage + kDone, {9}, &autorule).usage.cached_tokens, 8);
  EXPECT_TRUE(autorule.details_seen());
  EXPECT_EQ(FilterStream(kCmplHead + kCmplUsage + kDone, {9}, &autorule).usage.cached_tokens, 0);
  // A stream cut before [DONE] never reads as a miss.
  EXPECT_EQ(FilterStream(kCmplHead + kCmplUsage, {9}, &zero).usage.cached_tokens, -1);
}

TEST(StreamUsageFilterTest, PerChunkUsageIsNotTheInjectedChunk) {
  // continuous_usage_stats chunks carry usage next to a non-empty choices:
  // never taken out (kvroute never causes them: see PlanStreamUsage).
  const std::string chunk =
      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
      "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"logprobs\":null,"
      "\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":13,"
      "\"completion_tokens\":1}}\n\n";
  const Filtered f = FilterStream(chunk + chunk + kChatUsage + kDone, {33});
  EXPECT_EQ(f.client, chunk + chunk + kDone);
  EXPECT_EQ(f.dropped, 1);
  EXPECT_EQ(f.usage.cached_tokens, 8);  // the final usage wins
}

TEST(StreamUsageFilterTest, OtherEventsPassUntouched) {
  const std::string error_event =
      "data: {\"error\":{\"message\":\"boom\",\"type\":\"InternalServerError\",\"code\":500}}\n\n";
  const std::string comment = ": keep-alive\n\n";
  // A usage-shaped chunk with a second line is not what an engine sends
  // for include_usage: kept.
  const std::string two_lines =
      "event: usage\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n";
  const std::string text_mentions =
      "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"choices\\\":[],\\\"usage\\\":{}\"}}]}\n\n";
  const std::string stream = comment + error_event + two_lines + text_mentions + kDone;
  const Filtered f = FilterStream(stream, {4});
  EXPECT_EQ(f.client, stream);
  EXPECT_EQ(f.dropped, 0);
}

TEST(StreamUsageFilterTest, UnfinishedLastEventGoesOutAtFinish) {
  const std::string stream = kChatHead + "data: {\"id\":\"chatcmpl-7\",\"choi";
  const Filtered f = FilterStream(stream, {10});
  EXPECT_EQ(f.client, stream);
}

TEST(StreamUsageFilterTest, FeedPiecesOutliveFinish) {
  // The relay copies a read's pieces out, then calls Finish at the end of
  // the body: the pieces must still point at the right bytes.
  ResponseObserver observer(true, 1 << 20);
  StreamUsageFilter filter(&observer, 1 << 20);
  const std::string first = kChatHead.substr(0, 40);
  const std::string second = kChatHead.substr(40) + "data: {\"unfinished\"";
  filter.Feed(first);  // held
  const std::vector<std::string_view> kept = filter.Feed(second);
  const std::vector<std::string_view> rest = filter.Finish();
  std::string client;
  for (std::string_view p : kept) client += p;
  for (std::string_view p : rest) client += p;
  EXPECT_EQ(client, first + second);
}

TEST(StreamUsageFilterTest, OversizedEventPassesThroughAsItComes) {
  const std::string big = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"pad\":\"" +
                          std::string(300, 'x') + "\"}\n\n";
  const std::string stream = kChatHead + big + kChatUsage + kDone;
  const Filtered f = FilterStream(stream, {50}, nullptr, /*max_event=*/256);
  EXPECT_EQ(f.client, kChatHead + big + kDone);  // the big one is never judged
  EXPECT_EQ(f.dropped, 1);
}

TEST(StreamUsageFilterTest, UnfilteredStreamIsZeroCopy) {
  ResponseObserver observer(true, 1 << 20);
  StreamUsageFilter filter(&observer, 1 << 20);
  const std::string stream = kChatHead + kDone;
  const auto& out = filter.Feed(stream);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data(), stream.data());
  EXPECT_EQ(out[0].size(), stream.size());
}

// --- the request side ---

json::object Parsed(const std::string& body) { return json::parse(body).as_object(); }

TEST(PlanStreamUsageTest, InsertsAfterTheBraceWhenAbsent) {
  const std::string body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
      "\"stream\":true}";
  const StreamUsagePlan plan = PlanStreamUsage(body);
  ASSERT_EQ(plan.action, Action::kInsert);
  EXPECT_TRUE(plan.edits_body());
  EXPECT_EQ(plan.begin, 1u);
  const std::string sent = plan.Apply(body);
  EXPECT_EQ(sent, "{\"stream_options\":{\"include_usage\":true}," + body.substr(1));
  EXPECT_EQ(plan.BodySize(body), sent.size());
  const auto pieces = plan.Pieces(body);
  EXPECT_EQ(pieces[0].data(), body.data());  // the body itself, not a copy
  EXPECT_EQ(pieces[2].data(), body.data() + 1);
  json::object o = Parsed(sent);
  EXPECT_EQ(o.at("stream_options").at("include_usage"), true);
  EXPECT_EQ(o.at("model"), "m");
}

TEST(PlanStreamUsageTest, LeadingSpaceAndEmptyObject) {
  const std::string spaced = " \n {\"prompt\":\"x\",\"stream\":true}";
  EXPECT_EQ(PlanStreamUsage(spaced).Apply(spaced),
            " \n {\"stream_options\":{\"include_usage\":true},\"prompt\":\"x\",\"stream\":true}");
  const std::string empty = "{ }";
  const std::string sent = PlanStreamUsage(empty).Apply(empty);
  EXPECT_EQ(sent, "{\"stream_options\":{\"include_usage\":true} }");
  EXPECT_NO_THROW(json::parse(sent));
}

TEST(PlanStreamUsageTest, KeyInsideAStringOrNestedIsNotTheMember) {
  const std::string in_text =
      "{\"prompt\":\"say \\\"stream_options\\\": null\",\"stream\":true,"
      "\"extra\":{\"stream_options\":null}}";
  const StreamUsagePlan plan = PlanStreamUsage(in_text);
  ASSERT_EQ(plan.action, Action::kInsert);
  json::object o = Parsed(plan.Apply(in_text));
  EXPECT_EQ(o.at("stream_options").at("include_usage"), true);
  EXPECT_TRUE(o.at("extra").at("stream_options").is_null());
}

TEST(PlanStreamUsageTest, EscapedKeyIsTheSameMember) {
  // JSON decodes "stream\u005foptions" to stream_options: the client asked.
  const std::string asked = R"({"stream":true,"stream\u005foptions":{"include_usage":true}})";
  EXPECT_EQ(PlanStreamUsage(asked).action, Action::kClientAsked);
  const std::string off = R"({"stream":true,"stream\u005foptions":{"include_usage":false}})";
  const StreamUsagePlan plan = PlanStreamUsage(off);
  ASSERT_EQ(plan.action, Action::kReplace);
  EXPECT_EQ(Parsed(plan.Apply(off)).at("stream_options").at("include_usage"), true);
  // A \u escape elsewhere (a non-ASCII prompt) still gets the insert.
  const std::string text = R"({"prompt":"caf\u00e9","stream":true})";
  EXPECT_EQ(PlanStreamUsage(text).action, Action::kInsert);
}

TEST(PlanStreamUsageTest, ClientThatAskedIsLeftAlone) {
  // vLLM's StreamOptions defaults include_usage to true.
  for (const char* body :
       {"{\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        "{\"stream\":true,\"stream_options\":{\"include_usage\":true,"
        "\"continuous_usage_stats\":true}}",
        "{\"stream\":true,\"stream_options\":{}}",
        "{\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true}}"}) {
    const StreamUsagePlan plan = PlanStreamUsage(body);
    EXPECT_EQ(plan.action, Action::kClientAsked) << body;
    EXPECT_FALSE(plan.edits_body());
    EXPECT_EQ(plan.Apply(body), body);
  }
}

TEST(PlanStreamUsageTest, ReplacesOptionsThatTurnUsageOff) {
  // continuous_usage_stats acts only with include_usage: the client would
  // get no usage at all, so it goes (else the engine would add usage to
  // every chunk).
  const std::string body =
      "{\"stream\":true,\"stream_options\": {\"include_usage\":false,"
      "\"continuous_usage_stats\":true, \"future\":[1,2]} ,\"prompt\":\"p\"}";
  const StreamUsagePlan plan = PlanStreamUsage(body);
  ASSERT_EQ(plan.action, Action::kReplace);
  const std::string sent = plan.Apply(body);
  EXPECT_EQ(plan.BodySize(body), sent.size());
  json::object o = Parsed(sent);
  EXPECT_EQ(o.at("stream_options").at("include_usage"), true);
  EXPECT_EQ(o.at("stream_options").as_object().if_contains("continuous_usage_stats"), nullptr);
  EXPECT_EQ(o.at("stream_options").at("future"), (json::array{1, 2}));
  EXPECT_EQ(o.at("prompt"), "p");
  // Only the value's bytes changed.
  EXPECT_EQ(sent.substr(0, plan.begin), body.substr(0, plan.begin));
  EXPECT_EQ(sent.substr(sent.size() - (body.size() - plan.end)), body.substr(plan.end));

  for (const char* off : {"{\"stream\":true,\"stream_options\":null}",
                          "{\"stream\":true,\"stream_options\":{\"include_usage\":null}}"}) {
    const StreamUsagePlan p = PlanStreamUsage(off);
    ASSERT_EQ(p.action, Action::kReplace) << off;
    EXPECT_EQ(Parsed(p.Apply(off)).at("stream_options"), (json::object{{"include_usage", true}}));
  }
}

TEST(PlanStreamUsageTest, UnreadableBodiesAreLeftAlone) {
  for (const char* body :
       {"[1,2]", "", "   ", "{\"stream_options\":\"yes\"}",
        "{\"stream_options\":{\"include_usage\":\"no\"}}",
        "{\"stream_options\":null,\"stream_options\":null}",
        "{\"stream_options\":{\"include_usage\":false}", "{\"stream_options\" null}"}) {
    const StreamUsagePlan plan = PlanStreamUsage(body);
    EXPECT_EQ(plan.action, Action::kNone) << body;
    EXPECT_EQ(plan.Apply(body), body);
  }
}

TEST(PlanStreamUsageTest, EveryPlanKeepsTheBodysOtherMembers) {
  // Values of every JSON shape around a stream_options that turns usage off.
  const std::string members =
      "\"a\":\"s,}]\\\"{\",\"f\":\"x\\\\\",\"b\":[{\"x\":[]},-1.5e3,true,null],\"c\":{\"d\":\"}\"},\"e\":0";
  for (const std::string& body :
       {"{" + members + ",\"stream_options\":{\"include_usage\":false}}",
        "{\"stream_options\":{\"include_usage\":false}," + members + "}", "{" + members + "}"}) {
    const StreamUsagePlan plan = PlanStreamUsage(body);
    ASSERT_TRUE(plan.edits_body()) << body;
    json::object sent = Parsed(plan.Apply(body));
    json::object original = Parsed(body);
    original["stream_options"] = json::object{{"include_usage", true}};
    EXPECT_EQ(sent, original) << body;
  }
}

}  // namespace
}  // namespace kvroute::proxy
