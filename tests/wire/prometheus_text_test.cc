#include "wire/prometheus_text.h"

#include <string>

#include "gtest/gtest.h"

namespace kvroute::wire {
namespace {

TEST(PrometheusTextTest, HelpAndTypeLines) {
  std::string out;
  AppendHelpAndType(&out, "kvroute_requests_total", "counter", "Requests by route.");
  EXPECT_EQ(out,
            "# HELP kvroute_requests_total Requests by route.\n"
            "# TYPE kvroute_requests_total counter\n");
  out.clear();
  AppendHelpAndType(&out, "g", "gauge", "a\\b\nc");
  EXPECT_EQ(out, "# HELP g a\\\\b\\nc\n# TYPE g gauge\n");
}

TEST(PrometheusTextTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(PrometheusTextTest, ParsesWhatItWrites) {
  std::string page;
  AppendHelpAndType(&page, "vllm:num_requests_running", "gauge", "Running.");
  page += "vllm:num_requests_running{engine=\"0\",model_name=\"" + EscapeLabelValue("m\"x\\y\nz") +
          "\"} 3.0\n";
  page += "vllm:prompt_tokens_total 1.5e3\n";
  page += "nan_metric NaN\ninf_metric{a=\"b\"} +Inf\nbroken{a=\"b} 1\nnot_a_number x\n";
  const std::vector<PrometheusSample> s = ParsePrometheusText(page);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "vllm:num_requests_running");
  EXPECT_EQ(s[0].labels.at("engine"), "0");
  EXPECT_EQ(s[0].labels.at("model_name"), "m\"x\\y\nz");
  EXPECT_EQ(s[0].value, 3.0);
  EXPECT_EQ(s[1].name, "vllm:prompt_tokens_total");
  EXPECT_TRUE(s[1].labels.empty());
  EXPECT_EQ(s[1].value, 1500.0);
}

}  // namespace
}  // namespace kvroute::wire
