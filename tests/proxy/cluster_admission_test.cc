// A session turn's residency admission across replicas, served in-process:
// kvroute's server on port 0 in front of a FakeUpstream, its ClusterSync over
// a store whose answers the test holds (the other replicas' residents fill
// the instance until the test frees it). The Redis store's own admission is
// tested in tests/cluster/; the router's half in cluster_sync_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "proxy/cluster_sync.h"
#include "tests/proxy/proxy_harness.h"

namespace kvroute::proxy {
namespace {

using kvroute::testing::FakeUpstream;
using kvroute::testing::RequestOnce;

const char kStreamBody[] =
    R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]})";

// Refuses every reservation while `full` (the others' residents fill the
// instance) unless forced, which makes one of theirs yield.
class HeldStore : public cluster::ClusterStore {
 public:
  void PublishLoad(cluster::LoadByInstance) override {}
  void PublishRates(cluster::RateByInstance) override {}
  void PublishHome(std::string, std::string) override {}
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHomes(
      absl::Span<const std::string>) override {
    return absl::flat_hash_map<std::string, std::string>{};
  }
  std::shared_ptr<const cluster::PeerView> View() const override { return view_; }
  absl::StatusOr<cluster::Reservation> Reserve(absl::string_view instance, absl::string_view id,
                                               int64_t tokens, int64_t fill_tokens,
                                               bool force) override {
    std::lock_guard<std::mutex> lock(mu_);
    cluster::Reservation r;
    if (full_ && !force) {
      ++refused_;
      changed_.notify_all();
      r.reserved_tokens = fill_tokens;
      return r;
    }
    r.admitted = true;
    r.evicted = full_ ? 1 : 0;
    r.reserved_tokens = tokens;
    full_ = false;
    admitted_[std::string(instance)] = std::string(id);
    return r;
  }
  void Release(std::string, std::string) override {}
  bool connected() const override { return true; }
  cluster::ClusterStoreStats stats() const override { return {}; }

  void SetFull(bool full) {
    std::lock_guard<std::mutex> lock(mu_);
    full_ = full;
  }
  // Waits until a reservation has been refused; false after `guard` (a test
  // failure, not a wait for time to pass).
  bool AwaitRefusal(std::chrono::seconds guard) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, guard, [this] { return refused_ > 0; });
  }
  std::string AdmittedOn(const std::string& instance) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = admitted_.find(instance);
    return it == admitted_.end() ? "" : it->second;
  }

 private:
  std::shared_ptr<const cluster::PeerView> view_ = std::make_shared<cluster::PeerView>();
  std::mutex mu_;
  std::condition_variable changed_;
  bool full_ = true;
  int refused_ = 0;
  absl::flat_hash_map<std::string, std::string> admitted_;
};

FakeUpstream::Handler OneStream() {
  return [](const auto&, auto& s) {
    FakeUpstream::WriteSseHeader(s);
    FakeUpstream::WriteChunk(
        s, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n");
    FakeUpstream::WriteChunk(
        s,
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n");
    FakeUpstream::WriteChunk(s, "data: [DONE]\n\n");
    FakeUpstream::WriteLastChunk(s);
    return true;
  };
}

// One kvroute replica (baseline, which holds sessions) in front of one fake
// engine, its ClusterSync over a HeldStore, writing a request log; Finish
// stops it and returns the log's first line.
class Replica {
 public:
  // `deadline_s` > 0: every request's shed deadline, past the tiny prompt's
  // predicted TTFT (so nothing is shed, and the wait it leaves is short).
  explicit Replica(absl::Duration max_wait, double deadline_s = 0) : up_(OneStream()) {
    Config c = harness::TestConfig({up_.port()});
    c.router.mode = "baseline";
    c.router.residency.max_wait = max_wait;
    if (deadline_s > 0) {
      c.router.offload_cost_known = true;
      c.router.offload_cost.prefill_tokens_per_second = 1000;  // a few tokens: a few ms
      c.router.shed.ttft_deadline_warm_s = c.router.shed.ttft_deadline_medium_s =
          c.router.shed.ttft_deadline_heavy_s = deadline_s;
    }
    c.request_log = (std::filesystem::temp_directory_path() /
                     ("kvroute_cluster_admission_" + std::to_string(getpid()) + ".jsonl"))
                        .string();
    std::filesystem::remove(c.request_log);
    log_ = c.request_log;
    server_ = harness::StartServer(c);
    sync_ = ClusterSync::ForStore(store_, /*lease_s=*/5, server_->router());
    server_->SetClusterSync(sync_.get());
  }

  http::response<http::string_body> Turn(const std::string& session) {
    return RequestOnce(server_->port(), http::verb::post, "/v1/chat/completions", kStreamBody,
                       {{"X-Session-Id", session}});
  }
  HeldStore& store() { return *store_; }
  int engine_requests() const { return up_.requests(); }

  std::string Finish() {
    server_->SetClusterSync(nullptr);
    server_->Shutdown();
    server_->Wait();
    std::ifstream in(log_);
    std::string line;
    std::getline(in, line);
    std::filesystem::remove(log_);
    return line;
  }

 private:
  FakeUpstream up_;
  std::string log_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<HeldStore> store_ = std::make_shared<HeldStore>();
  std::unique_ptr<ClusterSync> sync_;
};

// The local gate admits the turn (nothing is resident here), the store
// refuses it (the other replicas fill the instance): it waits, asking again
// every retry interval, and goes once they free room.
TEST(ClusterAdmissionTest, ATurnRefusedAcrossReplicasWaitsForRoomThenGoes) {
  Replica replica(absl::Seconds(120));
  auto answer = std::async(std::launch::async, [&] { return replica.Turn("job-1"); });
  ASSERT_TRUE(replica.store().AwaitRefusal(std::chrono::seconds(30)));
  EXPECT_EQ(replica.engine_requests(), 0) << "sent while the instance was full across replicas";
  replica.store().SetFull(false);
  EXPECT_EQ(answer.get().result_int(), 200);
  EXPECT_EQ(replica.engine_requests(), 1);
  EXPECT_EQ(replica.store().AdmittedOn("gpu0"), "job-1");
  const std::string line = replica.Finish();
  EXPECT_NE(line.find("\"cluster_admission\":\"waited\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"cluster_fill_tokens\":"), std::string::npos) << line;
}

// A turn with no wait left (residency.max_wait_s 0) asks with force: the
// others' reservations yield and it goes at once.
TEST(ClusterAdmissionTest, ATurnWithNoWaitLeftIsForced) {
  Replica replica(absl::ZeroDuration());
  EXPECT_EQ(replica.Turn("job-2").result_int(), 200);
  EXPECT_EQ(replica.store().AdmittedOn("gpu0"), "job-2");
  const std::string line = replica.Finish();
  EXPECT_NE(line.find("\"cluster_admission\":\"forced\""), std::string::npos) << line;
}

// The store's wait ends when one gate's would: at what the turn's deadline
// leaves after its predicted TTFT, here under 50 ms (a new session's; a
// running session's, under 250 ms), though max_wait_s is 120 s.
TEST(ClusterAdmissionTest, ATurnWhoseDeadlineLeavesLittleWaitIsForced) {
  Replica replica(absl::Seconds(120), /*deadline_s=*/0.05);
  EXPECT_EQ(replica.Turn("job-3").result_int(), 200);
  EXPECT_EQ(replica.store().AdmittedOn("gpu0"), "job-3");
  const std::string line = replica.Finish();
  EXPECT_NE(line.find("\"cluster_admission\":\"forced\""), std::string::npos) << line;
  const size_t at = line.find("\"residency_wait_s\":");
  ASSERT_NE(at, std::string::npos) << line;
  EXPECT_LT(std::stod(line.substr(at + 19)), 60) << "waited out max_wait_s: " << line;
}

}  // namespace
}  // namespace kvroute::proxy
