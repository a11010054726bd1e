// Debian 12's abseil is built with its own absl::string_view (not an alias of
// std::string_view), so views from Beast or the standard library are
// converted explicitly where they meet absl's string functions.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace kvroute {

inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace kvroute
