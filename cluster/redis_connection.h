// The hiredis plumbing RedisStore talks through: owned replies, pipelined
// commands (one round trip), and connections whose every command is bounded
// by a timeout. hiredis's synchronous API; a write to a connection the store
// reset does not raise SIGPIPE in the calling thread.
//
//   absl::StatusOr<redisContext*> c = OpenConnection(address, absl::Milliseconds(50));
//   Pipeline p;
//   p.Add({"SET", "k", "v"});
//   std::vector<Reply> replies;
//   absl::Status st = p.Run(*c, &replies);
//
// Thread-safety: a connection is used by one thread at a time.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/options.h"

namespace kvroute::cluster {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// At least 1 ms: hiredis reads 0 as "no timeout".
timeval TimevalOf(absl::Duration d);
std::string ReplyText(const redisReply* r);

// Commands written in one go, their replies read in order: one round trip.
class Pipeline {
 public:
  void Add(std::vector<std::string> args) { commands_.push_back(std::move(args)); }
  bool empty() const { return commands_.empty(); }

  // Sends every command and reads every reply. A failed connection (timeout,
  // reset) is an Unavailable status; error replies are the caller's to read.
  absl::Status Run(redisContext* c, std::vector<Reply>* replies) const;

 private:
  std::vector<std::vector<std::string>> commands_;
};

// One command, one reply, on `c`; Unavailable when the connection fails.
absl::StatusOr<Reply> Command(redisContext* c, std::vector<std::string> args);

// A connection with every command bounded by `timeout`, on database `a.db`;
// Unavailable naming the cause when it cannot be opened.
absl::StatusOr<redisContext*> OpenConnection(const StoreAddress& a, absl::Duration timeout);

}  // namespace kvroute::cluster
