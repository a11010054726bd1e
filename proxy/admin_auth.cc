#include "proxy/admin_auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "proxy/absl_compat.h"

namespace kvroute::proxy {

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  if (expected.empty()) return false;
  // Every presented byte is compared (against the expected byte at the same
  // position, or wrapped around), so no early exit reveals a prefix match.
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i]) ^
            static_cast<unsigned char>(expected[i % expected.size()]);
  }
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

AdminAccess CheckAdminAccess(const AdminOptions& options, bool loopback,
                             std::string_view authorization) {
  if (loopback && options.allow_loopback) return AdminAccess::kAllowed;
  if (options.token.empty()) return AdminAccess::kForbidden;
  absl::string_view auth = absl::StripAsciiWhitespace(ToAbsl(authorization));
  // RFC 9110 §11.1: the scheme name is case-insensitive.
  constexpr absl::string_view kScheme = "bearer ";
  if (auth.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(auth.substr(0, kScheme.size()), kScheme)) {
    return AdminAccess::kUnauthorized;
  }
  const absl::string_view presented = absl::StripLeadingAsciiWhitespace(auth.substr(kScheme.size()));
  return ConstantTimeEquals(std::string_view(presented.data(), presented.size()), options.token)
             ? AdminAccess::kAllowed
             : AdminAccess::kUnauthorized;
}

}  // namespace kvroute::proxy
