#include "proxy/request_framing.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvroute::proxy {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

struct Framed {
  bool parsed = false;  // Beast's parser took the header
  absl::Status check;   // CheckRequestFraming's verdict (when parsed)
};

// The request header with `fields`, through the parser the server uses.
Framed Frame(const Fields& fields, unsigned version = 11) {
  std::string wire = "POST /v1/completions HTTP/1." + std::to_string(version % 10) + "\r\n";
  for (const auto& [k, v] : fields) wire += k + ": " + v + "\r\n";
  wire += "\r\n";
  ClientRequest req;
  ClientRequestParser p(req);
  p.eager(false);  // the header only
  beast::error_code ec;
  p.put(net::buffer(wire), ec);
  Framed f;
  f.parsed = !ec && p.is_header_done();
  if (f.parsed) f.check = CheckRequestFraming(req);
  return f;
}

TEST(RequestFramingTest, UnambiguousFramingsPass) {
  for (const auto& [fields, version] : std::vector<std::pair<Fields, unsigned>>{
           {{}, 11},
           {{{"Content-Length", "12"}}, 11},
           {{{"Transfer-Encoding", "chunked"}}, 11},
           {{{"Transfer-Encoding", "Chunked"}}, 11},
           {{{"Content-Length", "3"}}, 10},
       }) {
    const Framed f = Frame(fields, version);
    EXPECT_TRUE(f.parsed);
    EXPECT_TRUE(f.check.ok()) << f.check;
  }
}

TEST(RequestFramingTest, AmbiguousFramingsAreRefused) {
  struct Case {
    Fields fields;
    unsigned version;
    bool beast_accepts;  // false: Beast's parser refuses it before the check
  };
  const std::vector<Case> bad = {
      {{{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, 11, false},
      {{{"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}, 11, false},
      {{{"Transfer-Encoding", "xchunked"}, {"Content-Length", "5"}}, 11, true},
      {{{"Transfer-Encoding", "xchunked"}}, 11, true},
      {{{"Transfer-Encoding", "chunked, identity"}}, 11, true},
      {{{"Transfer-Encoding", "identity, chunked"}}, 11, true},
      {{{"Transfer-Encoding", "gzip, chunked"}}, 11, true},
      {{{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}, 11, true},
      {{{"Transfer-Encoding", "chunked"}}, 10, true},
      {{{"Transfer-Encoding", ""}}, 11, true},
  };
  for (const Case& c : bad) {
    SCOPED_TRACE(c.fields.front().first + ": " + c.fields.front().second + ", " +
                 std::to_string(c.fields.size()) + " fields, HTTP/1." +
                 std::to_string(c.version % 10));
    const Framed f = Frame(c.fields, c.version);
    EXPECT_EQ(f.parsed, c.beast_accepts);
    if (!f.parsed) continue;
    EXPECT_EQ(f.check.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(f.check.message().empty());
  }
}

}  // namespace
}  // namespace kvroute::proxy
