#include "sim/kv_events.h"

#include <absl/strings/str_cat.h>

#include <chrono>
#include <iterator>
#include <msgpack.hpp>
#include <string_view>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace sim {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackHashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

const char* MediumName(KvCacheEvent::Medium medium) {
  switch (medium) {
    case KvCacheEvent::Medium::kCpu:
      return "CPU";
    case KvCacheEvent::Medium::kStorage:
      return "STORAGE";
    case KvCacheEvent::Medium::kGpu:
      break;
  }
  return "GPU";
}

// msgspec writes a tagged struct without array_like as a map: the tag under "type" first,
// then the fields in declaration order, leaving out those equal to their default
// (omit_defaults). Fields without a default (lora_id, medium, lora_name) are always written.
// A GPU block pool's BlockStored carries one extra_keys entry per block; the offloading
// connector's self-describing BlockStored (OffloadingEventsTracker) leaves extra_keys None,
// so a CPU one omits it.
void PackStored(Packer& pk, const KvCacheEvent& e) {
  const bool gpu = e.medium == KvCacheEvent::Medium::kGpu;
  pk.pack_map(gpu ? 11 : 10);
  PackStr(pk, "type");
  PackStr(pk, "BlockStored");
  PackStr(pk, "block_hashes");
  PackHashes(pk, e.block_hashes);
  PackStr(pk, "parent_block_hash");
  if (e.parent_block_hash) {
    pk.pack_uint64(*e.parent_block_hash);
  } else {
    pk.pack_nil();
  }
  PackStr(pk, "token_ids");
  pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int32_t t : e.token_ids) pk.pack_int32(t);
  PackStr(pk, "block_size");
  pk.pack_int32(e.block_size);
  PackStr(pk, "lora_id");
  pk.pack_nil();
  PackStr(pk, "medium");
  PackStr(pk, MediumName(e.medium));
  PackStr(pk, "lora_name");
  pk.pack_nil();
  if (gpu) {
    // One entry per block: no multimodal inputs, LoRA or cache salt in the simulator.
    PackStr(pk, "extra_keys");
    pk.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
    for (size_t i = 0; i < e.block_hashes.size(); ++i) pk.pack_nil();
  }
  PackStr(pk, "group_idx");
  pk.pack_int32(0);
  PackStr(pk, "kv_cache_spec_kind");
  PackStr(pk, "full_attention");
}

void PackEvent(Packer& pk, const KvCacheEvent& e) {
  switch (e.kind) {
    case KvCacheEvent::Kind::kBlockStored:
      PackStored(pk, e);
      break;
    case KvCacheEvent::Kind::kBlockRemoved:
      pk.pack_map(4);
      PackStr(pk, "type");
      PackStr(pk, "BlockRemoved");
      PackStr(pk, "block_hashes");
      PackHashes(pk, e.block_hashes);
      PackStr(pk, "medium");
      PackStr(pk, MediumName(e.medium));
      PackStr(pk, "group_idx");
      pk.pack_int32(0);
      break;
    case KvCacheEvent::Kind::kAllBlocksCleared:
      pk.pack_map(1);
      PackStr(pk, "type");
      PackStr(pk, "AllBlocksCleared");
      break;
  }
}

zmq::message_t SeqFrame(int64_t seq) {
  zmq::message_t frame(8);
  auto* p = static_cast<uint8_t*>(frame.data());
  auto v = static_cast<uint64_t>(seq);
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v & 0xff);
  return frame;
}

int64_t ReadSeq(const zmq::message_t& frame) {
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (size_t i = 0; i < frame.size(); ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

// How often the thread looks at the replay socket while no batch arrives: vLLM's publisher
// thread polls it between queue waits of 100 ms.
constexpr auto kReplayPoll = std::chrono::milliseconds(100);

}  // namespace

std::string EncodeKvEventBatch(double ts, std::span<const KvCacheEvent> events,
                               int data_parallel_rank) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvCacheEvent& e : events) PackEvent(pk, e);
  pk.pack_int32(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub;
  zmq::socket_t replay;  // unset without a replay port
};

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions o) : options_(std::move(o)) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    KvEventPublisherOptions o) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(o)));
  const KvEventPublisherOptions& opt = p->options_;
  auto sockets = std::make_unique<Sockets>();
  auto endpoint = [&](uint16_t port) {
    return absl::StrCat("tcp://", opt.host, ":", port == 0 ? std::string("*") : absl::StrCat(port));
  };
  std::string current = endpoint(opt.port);
  try {
    sockets->pub = zmq::socket_t(sockets->context, zmq::socket_type::pub);
    sockets->pub.set(zmq::sockopt::sndhwm, opt.hwm);
    sockets->pub.set(zmq::sockopt::linger, 0);
    sockets->pub.bind(current);
    p->endpoint_ = sockets->pub.get(zmq::sockopt::last_endpoint);
    if (opt.replay_port) {
      current = endpoint(*opt.replay_port);
      sockets->replay = zmq::socket_t(sockets->context, zmq::socket_type::router);
      sockets->replay.set(zmq::sockopt::linger, 0);
      sockets->replay.bind(current);
      p->replay_endpoint_ = sockets->replay.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("kv events: cannot bind ", current, ": ", e.what()));
  }
  p->sockets_ = std::move(sockets);
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Publish(double ts, std::vector<KvCacheEvent> events) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queue_size) {
      ++dropped_;
      return;
    }
    queue_.push_back(Batch{ts, std::move(events)});
    ++accepted_;
  }
  wake_.notify_one();
}

uint64_t KvEventPublisher::accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

uint64_t KvEventPublisher::published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

uint64_t KvEventPublisher::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void KvEventPublisher::ServiceReplay() {
  zmq::socket_t& replay = sockets_->replay;
  std::vector<zmq::message_t> request;
  while (zmq::recv_multipart(replay, std::back_inserter(request), zmq::recv_flags::dontwait)) {
    // [client identity, empty delimiter, 8-byte start sequence number]
    if (request.size() == 3) {
      // Batches queued before the request was sent are part of the answer.
      SendQueued();
      const int64_t start = ReadSeq(request[2]);
      for (const auto& [seq, payload] : buffer_) {
        if (seq < start) continue;
        zmq::multipart_t reply;
        reply.addstr(request[0].to_string());
        reply.add(zmq::message_t());
        reply.add(SeqFrame(seq));
        reply.addstr(payload);
        reply.send(replay);
      }
      zmq::multipart_t end;
      end.addstr(request[0].to_string());
      end.add(zmq::message_t());
      end.add(SeqFrame(-1));
      end.add(zmq::message_t());
      end.send(replay);
    }
    request.clear();
  }
}

void KvEventPublisher::SendQueued() {
  std::deque<Batch> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready.swap(queue_);
  }
  if (ready.empty()) return;
  try {
    for (const Batch& b : ready) {
      const int64_t seq = next_seq_++;
      std::string payload = EncodeKvEventBatch(b.ts, b.events, options_.data_parallel_rank);
      zmq::multipart_t message;
      message.addstr(options_.topic);
      message.add(SeqFrame(seq));
      message.addstr(payload);
      message.send(sockets_->pub);  // PUB never blocks: beyond its HWM ZeroMQ drops
      buffer_.emplace_back(seq, std::move(payload));
      if (buffer_.size() > options_.buffer_steps) buffer_.pop_front();
    }
  } catch (const zmq::error_t&) {
    // A send can only fail when the context is going away; the batches are lost like
    // vLLM's after its publisher thread logs the error.
  }
  std::lock_guard<std::mutex> lock(mu_);
  published_ += ready.size();
}

void KvEventPublisher::Run() {
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto woken = [&] { return stopping_ || !queue_.empty(); };
      if (sockets_->replay) {
        wake_.wait_for(lock, kReplayPoll, woken);
      } else {
        wake_.wait(lock, woken);
      }
      stopping = stopping_;
    }
    SendQueued();
    if (sockets_->replay) {
      try {
        ServiceReplay();
      } catch (const zmq::error_t&) {
        // As above: only while the context goes away.
      }
    }
    if (stopping) break;
  }
  sockets_->pub.close();
  if (sockets_->replay) sockets_->replay.close();
}

}  // namespace sim
