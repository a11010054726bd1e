#include "cluster/redis_connection.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvroute::cluster {
namespace {

// hiredis writes with write(2): a write to a connection the store reset
// raises SIGPIPE, which would end the process. Blocks it in this thread for
// the guard's life and swallows one raised meanwhile (the write then fails
// with EPIPE, which hiredis reports), as the daemon's own sockets do with
// MSG_NOSIGNAL.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

}  // namespace

timeval TimevalOf(absl::Duration d) {
  d = std::max(d, absl::Milliseconds(1));
  return absl::ToTimeval(d);
}

std::string ReplyText(const redisReply* r) { return std::string(r->str, r->len); }

absl::StatusOr<Reply> Command(redisContext* c, std::vector<std::string> args) {
  Pipeline p;
  p.Add(std::move(args));
  std::vector<Reply> replies;
  if (absl::Status st = p.Run(c, &replies); !st.ok()) return st;
  return std::move(replies.front());
}

absl::StatusOr<redisContext*> OpenConnection(const StoreAddress& a, absl::Duration timeout) {
  redisContext* c = redisConnectWithTimeout(a.host.c_str(), a.port, TimevalOf(timeout));
  if (c == nullptr) return absl::UnavailableError("cluster store: cannot allocate a connection");
  auto fail = [c](std::string why) {
    redisFree(c);
    return absl::UnavailableError(std::move(why));
  };
  if (c->err != 0) return fail(absl::StrCat("cluster store: ", c->errstr));
  if (redisSetTimeout(c, TimevalOf(timeout)) != REDIS_OK) {
    return fail(absl::StrCat("cluster store: ", c->errstr));
  }
  if (a.db != 0) {
    absl::StatusOr<Reply> r = Command(c, {"SELECT", absl::StrCat(a.db)});
    if (!r.ok()) return fail(std::string(r.status().message()));
    if ((*r)->type == REDIS_REPLY_ERROR) {
      return fail(absl::StrCat("cluster store: SELECT ", a.db, ": ", ReplyText(r->get())));
    }
  }
  return c;
}

absl::Status Pipeline::Run(redisContext* c, std::vector<Reply>* replies) const {
  SigpipeGuard no_sigpipe;
  for (const std::vector<std::string>& args : commands_) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
        REDIS_OK) {
      return absl::UnavailableError(absl::StrCat("cluster store: ", c->errstr));
    }
  }
  replies->clear();
  for (size_t i = 0; i < commands_.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) {
      return absl::UnavailableError(absl::StrCat("cluster store: ", c->errstr));
    }
    replies->emplace_back(static_cast<redisReply*>(r));
  }
  return absl::OkStatus();
}

}  // namespace kvroute::cluster
