#include "proxy/request_log.h"

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvroute::proxy {
namespace {

namespace json = boost::json;

// Built by hand rather than through json::value so that times print as
// fixed-point seconds with microseconds (1795308691.635442), not 1.79E9.
class LineWriter {
 public:
  void Key(std::string_view k) {
    out_.push_back(out_.empty() ? '{' : ',');
    out_.push_back('"');
    out_.append(k);
    out_.append("\":");
  }
  void Str(std::string_view k, const std::string& v) {
    Key(k);
    if (v.empty()) {
      out_.append("null");
    } else {
      out_.append(json::serialize(json::string(v)));
    }
  }
  void Time(std::string_view k, double t) {
    Key(k);
    if (t < 0) {
      out_.append("null");
    } else {
      out_.append(absl::StrFormat("%.6f", t));
    }
  }
  void Count(std::string_view k, int64_t n) {
    Key(k);
    out_.append(n < 0 ? std::string("null") : absl::StrCat(n));
  }
  void Bool(std::string_view k, bool b) {
    Key(k);
    out_.append(b ? "true" : "false");
  }
  std::string Done() {
    out_.push_back('}');
    return std::move(out_);
  }

 private:
  std::string out_;
};

}  // namespace

std::string RequestRecordToJson(const RequestRecord& r) {
  LineWriter w;
  w.Str("id", r.id);
  w.Str("session", r.session);
  w.Str("mode", r.mode);
  w.Str("route", r.route);
  w.Str("class", r.request_class);
  w.Bool("stream", r.stream);
  w.Count("prompt_tokens_est", r.prompt_tokens_est);
  w.Count("cached_tokens_est", r.cached_tokens_est);
  w.Count("new_tokens_est", r.new_tokens_est);
  w.Str("prefill_backend", r.prefill_backend);
  w.Str("decode_backend", r.decode_backend);
  w.Time("t_arrival", r.t_arrival);
  w.Time("t_routed", r.t_routed);
  w.Time("t_prefill_done", r.t_prefill_done);
  w.Time("t_first_token", r.t_first_token);
  w.Time("t_done", r.t_done);
  w.Time("transfer_s", r.transfer_s);
  w.Count("prompt_tokens", r.prompt_tokens);
  w.Count("cached_tokens", r.cached_tokens);
  w.Count("completion_tokens", r.completion_tokens);
  w.Count("status", r.status);
  w.Str("error", r.error);
  w.Count("attempts", r.attempts);
  w.Time("predicted_ttft_s", r.predicted_ttft_s);
  w.Time("predicted_transfer_s", r.predicted_transfer_s);
  w.Time("residency_wait_s", r.residency_wait_s);
  if (!r.cluster_admission.empty()) {
    w.Str("cluster_admission", r.cluster_admission);
    w.Count("cluster_footprint_tokens", r.cluster_footprint_tokens);
    w.Count("cluster_reserved_tokens", r.cluster_reserved_tokens);
    w.Count("cluster_fill_tokens", r.cluster_fill_tokens);
  }
  w.Str("outcome", r.outcome);
  if (!r.prompt.empty()) w.Str("prompt", r.prompt);
  return w.Done();
}

RequestLog::~RequestLog() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status RequestLog::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_log: cannot open '", path, "': ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = f;
  return absl::OkStatus();
}

bool RequestLog::is_open() const {
  absl::MutexLock lock(&mu_);
  return file_ != nullptr;
}

void RequestLog::Write(const RequestRecord& record) {
  // Without a log, skip formatting the line: nobody reads it.
  if (!is_open()) return;
  std::string line = RequestRecordToJson(record);
  line.push_back('\n');
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace kvroute::proxy
