#include "cluster/options.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"

namespace kvroute::cluster {
namespace {

TEST(ParseStoreUrlTest, NoneAndRedisForms) {
  absl::StatusOr<StoreAddress> none = ParseStoreUrl("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->none);

  struct Good {
    const char* url;
    const char* host;
    uint16_t port;
    int db;
  };
  for (const Good& g :
       {Good{"redis://10.0.0.7:6380", "10.0.0.7", 6380, 0},
        Good{"redis://store.local", "store.local", 6379, 0},
        Good{"redis://store.local:7000/3", "store.local", 7000, 3}, Good{"redis://h:1/", "h", 1, 0},
        Good{"redis://[::1]:6379/2", "::1", 6379, 2}, Good{"redis://[::1]", "::1", 6379, 0}}) {
    absl::StatusOr<StoreAddress> a = ParseStoreUrl(g.url);
    ASSERT_TRUE(a.ok()) << g.url << ": " << a.status();
    EXPECT_FALSE(a->none);
    EXPECT_EQ(a->host, g.host) << g.url;
    EXPECT_EQ(a->port, g.port) << g.url;
    EXPECT_EQ(a->db, g.db) << g.url;
  }
}

TEST(ParseStoreUrlTest, BadUrlsNameTheKey) {
  for (const char* url : {"", "None", "redis:/h:1", "nats://h:4222", "redis://", "redis://:6379",
                          "redis://h:0", "redis://h:65536", "redis://h:port", "redis://h:1/x",
                          "redis://user:pw@h:1", "redis://h:1?timeout=1"}) {
    absl::StatusOr<StoreAddress> a = ParseStoreUrl(url);
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(a.status().message(), "cluster.store: ")) << a.status();
    EXPECT_NE(a.status().message().find(std::string("'") + url + "'"), std::string::npos)
        << a.status();
  }
}

TEST(ValidateClusterOptionsTest, RangesNameTheKey) {
  ClusterOptions ok;
  EXPECT_TRUE(ValidateClusterOptions(ok).ok());
  struct Bad {
    void (*change)(ClusterOptions*);
    const char* error;
  };
  for (const Bad& b : {
           Bad{[](ClusterOptions* o) { o->lease_s = 0; }, "cluster.lease_s: expected a positive"},
           Bad{[](ClusterOptions* o) { o->sync_interval_s = -1; }, "cluster.sync_interval_s"},
           Bad{[](ClusterOptions* o) { o->op_timeout_s = 0; }, "cluster.op_timeout_s"},
           Bad{[](ClusterOptions* o) { o->session_ttl_s = 0; }, "cluster.session_ttl_s"},
           Bad{[](ClusterOptions* o) { o->lease_s = 0.1; }, "cluster.lease_s: must be at least 3"},
           Bad{[](ClusterOptions* o) { o->store = "redis://h:1"; }, "cluster.replica_id"},
           Bad{[](ClusterOptions* o) { o->replica_id = "a b"; }, "cluster.replica_id"},
           Bad{[](ClusterOptions* o) { o->key_prefix = ""; }, "cluster.key_prefix"},
           Bad{[](ClusterOptions* o) { o->max_pending_writes = 0; }, "cluster.max_pending_writes"},
           Bad{[](ClusterOptions* o) { o->max_replicas = 0; }, "cluster.max_replicas"},
       }) {
    ClusterOptions o;
    b.change(&o);
    absl::Status st = ValidateClusterOptions(o);
    ASSERT_FALSE(st.ok()) << b.error;
    EXPECT_NE(st.message().find(b.error), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace kvroute::cluster
