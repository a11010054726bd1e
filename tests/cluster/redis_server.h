// tests/cluster: a real redis-server on loopback for one test, and a raw
// client to look at (or tamper with) what the stores wrote.
//
//   RedisServer server;
//   ASSERT_TRUE(server.Start().ok());            // a free port
//   options.store = server.url();
//   server.Query({"DEL", "kvroute:replica:a"});   // "1"
//   server.Kill();                               // SIGKILL, as a crash
//   ASSERT_TRUE(server.Start(server.port()).ok());  // the same port again, empty
//
// Start() waits for the server to print "Ready to accept connections" on
// its stdout (no sleeps); a thread then drains that pipe so the server never
// blocks on its log. Without redis-server installed Start() fails with a
// message that points to deploy/install-deps.sh.
//
// Thread-safety: one test thread.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvroute::cluster::testing {

class RedisServer {
 public:
  RedisServer() = default;
  ~RedisServer() { Kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts redis-server on 127.0.0.1:`port` (0: a free one), without
  // persistence, and waits until it accepts connections. A free port can be
  // taken by another process between FreePort() and the server's bind: then
  // another one is tried.
  absl::Status Start(uint16_t port = 0) {
    const std::string binary = FindBinary();
    if (binary.empty()) {
      return absl::FailedPreconditionError(
          "redis-server is not installed (not on PATH): run deploy/install-deps.sh, which "
          "installs redis-server and libhiredis-dev");
    }
    if (port != 0) return StartOn(binary, port);
    absl::Status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
      absl::StatusOr<uint16_t> free_port = FreePort();
      if (!free_port.ok()) return free_port.status();
      st = StartOn(binary, *free_port);
      if (st.ok()) break;
    }
    return st;
  }

  // SIGKILL, as a crash: clients see their connections reset.
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();
  }

  uint16_t port() const { return port_; }
  std::string url() const { return absl::StrCat("redis://127.0.0.1:", port_); }

  // One command on a fresh connection; the reply as text: a string or
  // status as is, an integer in decimal, nil as "(nil)", an array's
  // elements joined by ",", an error as "ERR: ...".
  std::string Query(const std::vector<std::string>& args) const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    if (c == nullptr || c->err != 0) {
      if (c != nullptr) redisFree(c);
      return "ERR: cannot connect";
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    std::string text = r == nullptr ? "ERR: no reply" : Render(r);
    if (r != nullptr) freeReplyObject(r);
    redisFree(c);
    return text;
  }

 private:
  absl::Status StartOn(const std::string& binary, uint16_t port) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
    const std::string port_text = absl::StrCat(port);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execl(binary.c_str(), "redis-server", "--bind", "127.0.0.1", "--port", port_text.c_str(),
            "--save", "", "--appendonly", "no", "--daemonize", "no", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    pid_ = pid;
    port_ = port;
    // Read until the ready line, the pipe's end (the server exited), or a
    // generous deadline that only a broken machine reaches.
    std::string log;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (log.find("Ready to accept connections") == std::string::npos) {
      pollfd p{out[0], POLLIN, 0};
      const int wait_ms =
          static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
      char buf[4096];
      ssize_t n = 0;
      if (poll(&p, 1, wait_ms) <= 0 || (n = read(out[0], buf, sizeof(buf))) <= 0) {
        close(out[0]);
        Kill();
        return absl::UnavailableError(
            absl::StrCat("redis-server on port ", port, " did not become ready; it said:\n", log));
      }
      log.append(buf, static_cast<size_t>(n));
    }
    drain_ = std::thread([fd = out[0]] {
      char buf[4096];
      while (read(fd, buf, sizeof(buf)) > 0) {
      }
      close(fd);
    });
    return absl::OkStatus();
  }

  static std::string Render(const redisReply* r) {
    switch (r->type) {
      case REDIS_REPLY_STRING:
      case REDIS_REPLY_STATUS:
        return std::string(r->str, r->len);
      case REDIS_REPLY_INTEGER:
        return absl::StrCat(r->integer);
      case REDIS_REPLY_NIL:
        return "(nil)";
      case REDIS_REPLY_ERROR:
        return absl::StrCat("ERR: ", std::string(r->str, r->len));
      case REDIS_REPLY_ARRAY: {
        std::vector<std::string> parts;
        for (size_t i = 0; i < r->elements; ++i) parts.push_back(Render(r->element[i]));
        return absl::StrJoin(parts, ",");
      }
    }
    return "?";
  }

  static std::string FindBinary() {
    const char* path = std::getenv("PATH");
    std::vector<std::string> dirs = absl::StrSplit(path ? path : "", ':', absl::SkipEmpty());
    dirs.push_back("/usr/bin");
    dirs.push_back("/usr/sbin");
    for (const std::string& d : dirs) {
      const std::string candidate = d + "/redis-server";
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return "";
  }

  // A port nobody listens on now: bind port 0, read it, close.
  static absl::StatusOr<uint16_t> FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return absl::InternalError("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      close(fd);
      return absl::InternalError("cannot bind a loopback port");
    }
    close(fd);
    return ntohs(addr.sin_port);
  }

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::thread drain_;
};

}  // namespace kvroute::cluster::testing
