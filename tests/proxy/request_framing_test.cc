#include "proxy/request_framing.h"

#include <gtest/gtest.h>

namespace kvroute::proxy {
namespace {

http::request_header<> Header(std::vector<std::pair<std::string, std::string>> fields,
                              unsigned version = 11) {
  http::request_header<> h;
  h.method(http::verb::post);
  h.target("/v1/completions");
  h.version(version);
  for (auto& [k, v] : fields) h.insert(k, v);
  return h;
}

TEST(RequestFramingTest, UnambiguousFramingsPass) {
  EXPECT_TRUE(CheckRequestFraming(Header({})).ok());
  EXPECT_TRUE(CheckRequestFraming(Header({{"Content-Length", "12"}})).ok());
  EXPECT_TRUE(CheckRequestFraming(Header({{"Transfer-Encoding", "chunked"}})).ok());
  EXPECT_TRUE(CheckRequestFraming(Header({{"Transfer-Encoding", "Chunked"}})).ok());
  EXPECT_TRUE(CheckRequestFraming(Header({{"Content-Length", "3"}}, 10)).ok());
}

TEST(RequestFramingTest, AmbiguousFramingsAreRefused) {
  const std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, unsigned>> bad = {
      {{{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, 11},
      {{{"Transfer-Encoding", "xchunked"}, {"Content-Length", "5"}}, 11},
      {{{"Transfer-Encoding", "xchunked"}}, 11},
      {{{"Transfer-Encoding", "chunked, identity"}}, 11},
      {{{"Transfer-Encoding", "identity, chunked"}}, 11},
      {{{"Transfer-Encoding", "gzip, chunked"}}, 11},
      {{{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}, 11},
      {{{"Transfer-Encoding", "chunked"}}, 10},
      {{{"Transfer-Encoding", ""}}, 11},
  };
  for (const auto& [fields, version] : bad) {
    absl::Status st = CheckRequestFraming(Header(fields, version));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument)
        << fields.front().first << ": " << fields.front().second;
    EXPECT_FALSE(st.message().empty());
  }
}

}  // namespace
}  // namespace kvroute::proxy
