// The Prometheus text exposition format (version 0.0.4), both ways: the
// lines a /metrics endpoint writes (the proxy's registry, the simulator's
// vLLM twin) and a parser for the samples of a scraped page (the bench's
// fleet sampler). Value formatting stays with each writer: the proxy prints
// integers bare, the simulator prints them as Python's prometheus_client
// does ("3.0").
//
//   std::string out;
//   wire::AppendHelpAndType(&out, "kvroute_requests_total", "counter", "Requests.");
//   absl::StrAppend(&out, "kvroute_requests_total{route=\"",
//                   wire::EscapeLabelValue(route), "\"} 7\n");
//
//   for (const wire::PrometheusSample& s : wire::ParsePrometheusText(body)) ...
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvroute::wire {

// Appends "# HELP <name> <help>\n# TYPE <name> <type>\n"; backslashes and
// newlines in `help` are escaped as the format requires.
void AppendHelpAndType(std::string* out, std::string_view name, std::string_view type,
                       std::string_view help);

// A label value escaped for use between double quotes (backslash, double
// quote, newline).
std::string EscapeLabelValue(std::string_view value);

// One sample line of a scraped page.
struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

// Every sample of `text` with a finite value; comments, NaN and infinite
// samples and malformed lines are skipped.
std::vector<PrometheusSample> ParsePrometheusText(std::string_view text);

}  // namespace kvroute::wire
