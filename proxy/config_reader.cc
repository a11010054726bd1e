#include "proxy/config_reader.h"

namespace kvroute::proxy::config_internal {

absl::Status KeyError(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

std::string Show(const YAML::Node& n) {
  if (n.IsScalar()) return absl::StrCat("'", n.Scalar(), "'");
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return "null";
}

absl::Status RequireMap(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return KeyError(path, absl::StrCat("expected a map, got ", Show(n)));
  return absl::OkStatus();
}

absl::Status ReadBool(MapReader& r, const std::string& key, bool* out) {
  const YAML::Node* n = r.Find(key);
  if (n == nullptr) return absl::OkStatus();
  if (!n->IsScalar() || (n->Scalar() != "true" && n->Scalar() != "false")) {
    return KeyError(r.Path(key), absl::StrCat("expected true or false, got ", Show(*n)));
  }
  *out = n->Scalar() == "true";
  return absl::OkStatus();
}

}  // namespace kvroute::proxy::config_internal
