// Who may call kvroute's /admin/* endpoints.
//
//   switch (CheckAdminAccess(config.admin, IsLoopback(peer), req[http::field::authorization])) {
//     case AdminAccess::kAllowed: ...serve...
//     case AdminAccess::kUnauthorized: 401 with `WWW-Authenticate: Bearer`
//     case AdminAccess::kForbidden: 403
//   }
//
// A loopback client is allowed while `admin.allow_loopback` (default true).
// Any other client is allowed when `admin.token` is set and it presents
// `Authorization: Bearer <token>`; the comparison takes time independent of
// where the presented token first differs. With no token configured,
// non-loopback clients are forbidden outright.
//
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "proxy/config.h"

namespace kvroute::proxy {

enum class AdminAccess {
  kAllowed,
  kUnauthorized,  // a token is configured; the client did not present it
  kForbidden,     // no token is configured and the client is not on loopback
};

AdminAccess CheckAdminAccess(const AdminOptions& options, bool loopback,
                             std::string_view authorization);

// Compares `presented` with `expected` in time that depends only on
// presented.size(), never on the position of the first differing byte.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

}  // namespace kvroute::proxy
