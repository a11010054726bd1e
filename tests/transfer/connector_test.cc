// Golden bodies for every connector: a change in the field set shows up here
// as a deliberate diff (PROTOCOLS.md §3).
#include "transfer/connector.h"

#include <gtest/gtest.h>

namespace kvroute::transfer {
namespace {

namespace json = boost::json;

json::object Client() {
  return json::parse(
             R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
             R"("stream_options":{"include_usage":true},"max_tokens":64,"min_tokens":4})")
      .as_object();
}

HandoffPlan Plan() {
  HandoffPlan p;
  p.request_id = "req-1";
  p.prefill_host = "10.0.0.1";
  p.prefill_port = 8100;
  p.bootstrap_port = 8998;
  p.engine_id = "engine-A";
  p.bootstrap_room = 12345;
  return p;
}

TEST(ConnectorTest, UnknownNameIsConfigError) {
  auto c = MakeConnector("rdma");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("transfer.connector: unknown connector 'rdma'"),
            std::string::npos);
}

TEST(ConnectorTest, NixlPrefillGolden) {
  auto c = MakeConnector("nixl");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->sequential());
  EXPECT_FALSE((*c)->needs_engine_id());
  auto body = (*c)->PrefillBody(Client(), Plan());
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,)"
            R"("max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,)"
            R"("do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,)"
            R"("remote_host":null,"remote_port":null}})");
}

TEST(ConnectorTest, NixlPrefillAlsoCapsMaxCompletionTokens) {
  json::object client = Client();
  client["max_completion_tokens"] = 99;
  auto body = (*MakeConnector("nixl"))->PrefillBody(client, Plan());
  ASSERT_TRUE(body.ok());
  EXPECT_NE(body->find(R"("max_completion_tokens":1)"), std::string::npos);
}

TEST(ConnectorTest, NixlDecodeCopiesParamsVerbatim) {
  auto c = MakeConnector("nixl");
  json::object params = json::parse(
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],)"
      R"("remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":5600,)"
      R"("tp_size":1,"some_future_field":{"x":[true]}})").as_object();
  auto body = (*c)->DecodeBody(Client(), Plan(), params);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
            R"("stream_options":{"include_usage":true},"max_tokens":64,"min_tokens":4,)"
            R"("kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,)"
            R"("remote_block_ids":[1,2,3],"remote_engine_id":"e","remote_request_id":"r",)"
            R"("remote_host":"h","remote_port":5600,"tp_size":1,"some_future_field":{"x":[true]}}})");
}

TEST(ConnectorTest, NixlDecodeWithoutParamsIsTheClientBody) {
  auto body = (*MakeConnector("nixl"))->DecodeBody(Client(), Plan(), std::nullopt);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, json::serialize(Client()));
}

TEST(ConnectorTest, MooncakeGolden) {
  auto c = MakeConnector("mooncake");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->sequential());
  EXPECT_TRUE((*c)->needs_engine_id());
  auto pre = (*c)->PrefillBody(Client(), Plan());
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(*pre,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,)"
            R"("max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,)"
            R"("do_remote_prefill":false,"transfer_id":"xfer-req-1"}})");
  auto dec = (*c)->DecodeBody(Client(), Plan(), std::nullopt);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
            R"("stream_options":{"include_usage":true},"max_tokens":64,"min_tokens":4,)"
            R"("kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,)"
            R"("remote_bootstrap_addr":"http://10.0.0.1:8998","remote_engine_id":"engine-A",)"
            R"("transfer_id":"xfer-req-1"}})");
}

TEST(ConnectorTest, MooncakeDecodeNeedsEngineId) {
  HandoffPlan p = Plan();
  p.engine_id.clear();
  EXPECT_FALSE((*MakeConnector("mooncake"))->DecodeBody(Client(), p, std::nullopt).ok());
}

TEST(ConnectorTest, SglangSameBodyToBoth) {
  auto c = MakeConnector("sglang");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->sequential());
  auto pre = (*c)->PrefillBody(Client(), Plan());
  auto dec = (*c)->DecodeBody(Client(), Plan(), std::nullopt);
  ASSERT_TRUE(pre.ok() && dec.ok());
  EXPECT_EQ(*pre, *dec);
  EXPECT_EQ(*pre,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
            R"("stream_options":{"include_usage":true},"max_tokens":64,"min_tokens":4,)"
            R"("bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":12345})");
}

TEST(ConnectorTest, EngineIdFromQuery) {
  auto id = EngineIdFromQuery(R"({"1":{"engine_id":"b"},"0":{"engine_id":"a","worker_addr":"x"}})");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "a");
  EXPECT_FALSE(EngineIdFromQuery("[]").ok());
  EXPECT_FALSE(EngineIdFromQuery(R"({"0":{}})").ok());
  EXPECT_FALSE(EngineIdFromQuery("not json").ok());
}

}  // namespace
}  // namespace kvroute::transfer
