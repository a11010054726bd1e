// A child process (kvroute-sim, kvroute) started by the ablation runner.
//
// The child's stdout and stderr go through a pipe that a reader thread drains into a log
// file, so the child never blocks on a full pipe; lines are also kept (bounded) so the
// caller can wait for a readiness line such as "kvroute: listening on 127.0.0.1:PORT".
// Stop() sends SIGTERM, then SIGKILL after a grace period, and reaps the child. The child
// also gets SIGTERM if the bench dies (PR_SET_PDEATHSIG), so fleets are never orphaned.
//
// Usage:
//   auto child = ChildProcess::Start({"kvroute-sim", "--instances", "2"}, "sim.log");
//   auto ports = (*child)->WaitForLines(std::regex("listening on .*:(\\d+)"), 2, 30s);
//
// Thread-safety: WaitForLines and Stop are safe to call from one controlling thread while
// the reader thread runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::bench {

class ChildProcess {
 public:
  static constexpr size_t kMaxKeptLines = 4096;

  // argv[0] is a path to the executable.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_path);
  ~ChildProcess();  // Stop()s the child if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits until `count` output lines match `pattern` (searched), or the child exits, or
  // `timeout` passes. Returns each matching line's groups (0 = whole match), in output order.
  absl::StatusOr<std::vector<std::vector<std::string>>> WaitForLines(const std::regex& pattern, size_t count,
                                                        std::chrono::milliseconds timeout);

  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // Kills the child at once (SIGKILL, no chance to flush or close): a crash.
  void Kill();
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int out_fd, const std::string& log_path);
  void ReadLoop(std::string log_path);

  pid_t pid_;
  int out_fd_;
  bool stopped_ = false;
  absl::Mutex mu_;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  size_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace kvroute::bench
