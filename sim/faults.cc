#include "sim/faults.h"

#include <absl/strings/str_cat.h>

namespace sim {
namespace json = boost::json;

namespace {

absl::Status Bad(std::string_view key, const json::value& v) {
  return absl::InvalidArgumentError(
      absl::StrCat("faults: bad value for ", std::string(key), ": ", json::serialize(v)));
}

std::optional<double> AsNumber(const json::value& v) {
  if (v.is_double()) return v.as_double();
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Faults> ApplyFaultsJson(const Faults& base, const json::object& body) {
  Faults f = base;
  if (const json::value* c = body.if_contains("clear"); c != nullptr) {
    if (!c->is_bool()) return Bad("clear", *c);
    if (c->as_bool()) f = Faults{};
  }
  for (const auto& [key, value] : body) {
    if (key == "clear" || key == "instance") continue;
    if (key == "unhealthy" || key == "refuse_connections" || key == "hang" || key == "killed") {
      if (!value.is_bool()) return Bad(key, value);
      (key == "unhealthy" ? f.unhealthy
       : key == "hang"    ? f.hang
       : key == "killed"  ? f.killed
                          : f.refuse_connections) = value.as_bool();
    } else if (key == "error_rate") {
      const std::optional<double> r = AsNumber(value);
      if (!r || *r < 0 || *r > 1) return Bad(key, value);
      f.error_rate = *r;
    } else if (key == "die_after_events") {
      if (value.is_null()) {
        f.die_after_events = -1;
        continue;
      }
      const std::optional<double> k = AsNumber(value);
      if (!k || *k != static_cast<int>(*k)) return Bad(key, value);
      f.die_after_events = static_cast<int>(*k);
    } else if (key == "slowdown") {
      const std::optional<double> s = AsNumber(value);
      if (!s || *s <= 0) return Bad(key, value);
      f.slowdown = *s;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("faults: unknown field ", std::string(key)));
    }
  }
  return f;
}

json::object FaultsToJson(const Faults& faults) {
  json::object o;
  o["unhealthy"] = faults.unhealthy;
  o["refuse_connections"] = faults.refuse_connections;
  o["killed"] = faults.killed;
  o["error_rate"] = faults.error_rate;
  o["hang"] = faults.hang;
  o["die_after_events"] = faults.die_after_events;
  o["slowdown"] = faults.slowdown;
  return o;
}

}  // namespace sim
