#include "bench/kvroute_bench/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace kvroute::bench {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("not executable: ", argv[0]));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. Die with the bench (even on SIGKILL),
    // so an interrupted ablation never leaves a fleet behind.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (FILE* log = std::fopen(log_path.c_str(), "a")) {
    std::fprintf(log, "# pid %d: %s\n", static_cast<int>(pid), absl::StrJoin(argv, " ").c_str());
    std::fclose(log);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, fds[0], log_path));
}

ChildProcess::ChildProcess(pid_t pid, int out_fd, const std::string& log_path)
    : pid_(pid), out_fd_(out_fd) {
  reader_ = std::thread([this, log_path] { ReadLoop(log_path); });
}

ChildProcess::~ChildProcess() {
  Stop();
  if (reader_.joinable()) reader_.join();
  close(out_fd_);
}

void ChildProcess::ReadLoop(std::string log_path) {
  FILE* log = std::fopen(log_path.c_str(), "a");
  std::string partial;
  char buf[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log != nullptr) {
      std::fwrite(buf, 1, static_cast<size_t>(n), log);
      std::fflush(log);
    }
    partial.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    absl::MutexLock lock(&mu_);
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      lines_.push_back(partial.substr(start, nl - start));
      if (lines_.size() > kMaxKeptLines) {
        lines_.pop_front();
        ++dropped_lines_;
      }
      start = nl + 1;
    }
    partial.erase(0, start);
  }
  if (log != nullptr) std::fclose(log);
  absl::MutexLock lock(&mu_);
  if (!partial.empty()) lines_.push_back(partial);
  eof_ = true;
}

absl::StatusOr<std::vector<std::vector<std::string>>> ChildProcess::WaitForLines(
    const std::regex& pattern, size_t count, std::chrono::milliseconds timeout) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  std::vector<std::vector<std::string>> matches;
  size_t next = 0;  // total line number to look at next
  absl::MutexLock lock(&mu_);
  while (true) {
    next = std::max(next, dropped_lines_);
    for (; next < dropped_lines_ + lines_.size(); ++next) {
      const std::string& line = lines_[next - dropped_lines_];
      std::smatch m;
      if (!std::regex_search(line, m, pattern)) continue;
      std::vector<std::string> groups;
      for (const auto& g : m) groups.push_back(g.str());
      matches.push_back(std::move(groups));
      if (matches.size() >= count) return matches;
    }
    if (eof_) {
      return absl::UnavailableError(absl::StrCat("process ", pid_, " exited before printing ",
                                                 count, " ready lines (got ", matches.size(), ")"));
    }
    auto more = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return eof_ || dropped_lines_ + lines_.size() > next;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&more), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid_, " printed ", matches.size(),
                                                      " of ", count,
                                                      " ready lines before the timeout"));
    }
  }
}

void ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    // Reaping has no readiness event to wait on without a SIGCHLD handler; poll briefly.
    usleep(20000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
}

void ChildProcess::Kill() {
  if (stopped_) return;
  stopped_ = true;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace kvroute::bench
