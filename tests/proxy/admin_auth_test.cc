// proxy/admin_auth.h and the config keys behind it (`admin.*`), plus
// `request_log_prompts`.
#include "proxy/admin_auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proxy/config.h"

namespace kvroute::proxy {
namespace {

const std::string kToken = "0123456789abcdef-token";

TEST(AdminAuthTest, LoopbackIsAllowedUnlessTurnedOff) {
  AdminOptions o;
  EXPECT_EQ(CheckAdminAccess(o, true, ""), AdminAccess::kAllowed);
  EXPECT_EQ(CheckAdminAccess(o, false, ""), AdminAccess::kForbidden);
  o.allow_loopback = false;
  EXPECT_EQ(CheckAdminAccess(o, true, ""), AdminAccess::kForbidden);
  EXPECT_EQ(CheckAdminAccess(o, true, "Bearer anything-at-all-here"), AdminAccess::kForbidden);
}

TEST(AdminAuthTest, TokenAdmitsOnlyAnExactBearer) {
  AdminOptions o;
  o.token = kToken;
  o.allow_loopback = false;
  EXPECT_EQ(CheckAdminAccess(o, false, "Bearer " + kToken), AdminAccess::kAllowed);
  EXPECT_EQ(CheckAdminAccess(o, true, "BEARER " + kToken), AdminAccess::kAllowed);
  EXPECT_EQ(CheckAdminAccess(o, false, "  Bearer   " + kToken + "  "), AdminAccess::kAllowed);
  for (const std::string& bad :
       {std::string(), std::string("Bearer"), std::string("Bearer "), "Bearer " + kToken + "0",
        "Bearer " + kToken.substr(1), "Basic " + kToken, kToken, "Bearer" + kToken,
        "Bearer " + std::string(kToken.size(), 'a')}) {
    EXPECT_EQ(CheckAdminAccess(o, false, bad), AdminAccess::kUnauthorized) << bad;
  }
}

TEST(AdminAuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abcabc", "abc"));  // wraps around: still unequal
  EXPECT_FALSE(ConstantTimeEquals("", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // an empty token admits no one
}

constexpr char kBackends[] = "backends:\n  - {name: gpu0, url: http://127.0.0.1:8100}\n";

absl::StatusOr<Config> Parse(const std::string& extra) {
  return ParseConfig(extra + kBackends, "test");
}

std::string TempFile(const std::string& name, const std::string& content) {
  const auto path = std::filesystem::temp_directory_path() /
                    (name + "_" + std::to_string(getpid()));
  std::ofstream(path) << content;
  return path.string();
}

TEST(AdminConfigTest, DefaultsAndInlineToken) {
  absl::StatusOr<Config> c = Parse("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->admin.token.empty());
  EXPECT_TRUE(c->admin.allow_loopback);
  EXPECT_FALSE(c->request_log_prompts);
  c = Parse("admin: {token: " + kToken + ", allow_loopback: false}\nrequest_log_prompts: true\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, kToken);
  EXPECT_FALSE(c->admin.allow_loopback);
  EXPECT_TRUE(c->request_log_prompts);
}

TEST(AdminConfigTest, TokenFileIsReadAndTrimmed) {
  const std::string path = TempFile("kvroute_admin_token", "\n  " + kToken + "\n\n");
  absl::StatusOr<Config> c = Parse("admin: {token_file: " + path + "}\n");
  std::filesystem::remove(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin.token, kToken);
}

TEST(AdminConfigTest, ErrorsNameTheKeyAndNeverTheToken) {
  const std::string short_file = TempFile("kvroute_admin_short", "short-token\n");
  const std::string empty_file = TempFile("kvroute_admin_empty", "  \n");
  struct Case {
    std::string yaml;
    std::string want;
  } cases[] = {
      {"admin: {token: short-token}\n", "admin.token: the token has 11 characters; at least 16"},
      {"admin: {token_file: " + short_file + "}\n", "admin.token_file: the token has 11"},
      {"admin: {token_file: " + empty_file + "}\n", "admin.token_file: the token has 0"},
      {"admin: {token_file: /nonexistent/kvroute/token}\n",
       "admin.token_file: cannot read '/nonexistent/kvroute/token'"},
      {"admin: {token_file: /tmp}\n", "admin.token_file: cannot read '/tmp'"},
      {"admin: {token: " + kToken + ", token_file: /x}\n", "admin.token_file: set admin.token"},
      {"admin: {allow_loopback: maybe}\n", "admin.allow_loopback: expected true or false"},
      {"admin: {tokens: x}\n", "admin.tokens: unknown key"},
      {"admin: [1]\n", "admin: expected a map"},
      {"request_log_prompts: yes please\n", "request_log_prompts: expected true or false"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Config> c = Parse(k.yaml);
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_NE(std::string(c.status().message()).find(k.want), std::string::npos)
        << k.yaml << " -> " << c.status().message();
    EXPECT_EQ(std::string(c.status().message()).find("short-token"), std::string::npos)
        << "the token leaked into " << c.status().message();
  }
  std::filesystem::remove(short_file);
  std::filesystem::remove(empty_file);
}

}  // namespace
}  // namespace kvroute::proxy
