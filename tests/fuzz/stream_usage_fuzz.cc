// Fuzz target: usage on every stream (proxy/stream_usage.h), both halves.
//
// Input: a header line, then the bytes.
//   p\n<request body>            PlanStreamUsage on the body
//   f<chunk lengths>\n<stream>   StreamUsageFilter on an SSE response body
// For 'f' each further header byte is the length (1..256) of the next piece
// passed to Feed(), cycling; an empty list feeds everything at once.
//
// Checks, beyond "no crash, no sanitizer report":
//   p: the plan's pieces and size agree with Apply(); an edit of a body that
//      is a JSON object gives a JSON object whose stream_options asks for
//      usage (include_usage true, no continuous_usage_stats) and whose other
//      members are the body's; a plan that edits nothing leaves the body as is.
//   f: feeding in pieces gives the client the same bytes, and takes out the
//      same number of events, as one Feed(); the client's bytes are the
//      input's with whole events taken out (never more bytes than came in).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "proxy/response_observer.h"
#include "proxy/stream_usage.h"

namespace {
namespace json = boost::json;
using kvroute::proxy::PlanStreamUsage;
using kvroute::proxy::ResponseObserver;
using kvroute::proxy::StreamUsageFilter;
using kvroute::proxy::StreamUsagePlan;

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("stream_usage_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

void FuzzPlan(std::string_view body) {
  const StreamUsagePlan plan = PlanStreamUsage(body);
  const std::string sent = plan.Apply(body);
  Check(sent.size() == plan.BodySize(body), "BodySize matches Apply");
  std::string joined;
  for (std::string_view p : plan.Pieces(body)) joined.append(p);
  Check(joined == sent, "Pieces join to Apply");
  if (!plan.edits_body()) {
    Check(sent == body, "no edit leaves the body as is");
    return;
  }
  boost::system::error_code ec;
  json::value original = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !original.is_object()) return;  // kvroute's request parser refuses these first
  json::value edited = json::parse(sent, ec);
  Check(!ec && edited.is_object(), "an edited object stays a JSON object");
  json::object& o = edited.as_object();
  const json::value* so = o.if_contains("stream_options");
  Check(so != nullptr && so->is_object(), "stream_options is an object");
  const json::value* iu = so->as_object().if_contains("include_usage");
  Check(iu != nullptr && iu->is_bool() && iu->as_bool(), "include_usage is true");
  Check(so->as_object().if_contains("continuous_usage_stats") == nullptr,
        "continuous_usage_stats is gone");
  o.erase("stream_options");
  original.as_object().erase("stream_options");
  Check(o == original.as_object(), "the other members are the body's");
}

std::string Filter(std::string_view stream, std::string_view chunks, int64_t* dropped) {
  ResponseObserver observer(/*sse=*/true, 1 << 20);
  StreamUsageFilter filter(&observer, 1 << 20);
  std::string out;
  size_t pos = 0;
  for (size_t i = 0; pos < stream.size(); ++i) {
    size_t len = stream.size() - pos;
    if (!chunks.empty()) len = static_cast<uint8_t>(chunks[i % chunks.size()]) + 1;
    const std::string_view piece = stream.substr(pos, len);
    for (std::string_view p : filter.Feed(piece)) out.append(p);
    pos += piece.size();
  }
  for (std::string_view p : filter.Finish()) out.append(p);
  observer.Finish();
  *dropped = filter.dropped_events();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t eol = input.find('\n');
  if (eol == std::string_view::npos || eol == 0) return 0;
  const std::string_view rest = input.substr(eol + 1);
  if (input[0] == 'p') {
    FuzzPlan(rest);
  } else if (input[0] == 'f') {
    int64_t dropped_pieces = 0, dropped_whole = 0;
    const std::string pieces = Filter(rest, input.substr(1, eol - 1), &dropped_pieces);
    const std::string whole = Filter(rest, {}, &dropped_whole);
    Check(pieces == whole, "pieces and one Feed() give the client the same bytes");
    Check(dropped_pieces == dropped_whole, "pieces and one Feed() take out the same events");
    Check(whole.size() <= rest.size(), "never more bytes than came in");
    Check((dropped_whole == 0) == (whole.size() == rest.size()),
          "bytes go missing exactly when an event is taken out");
  }
  return 0;
}
