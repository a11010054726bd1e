// The config loader's YAML reading (internal to proxy/config*.cc): errors
// that name the key, and MapReader, which reads a map field by field and
// reports every unknown key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace kvroute::proxy::config_internal {

// InvalidArgument "KEY: WHAT".
absl::Status KeyError(const std::string& key, const std::string& what);
// What a node is, for an error message ("a map", "'x'", "null").
std::string Show(const YAML::Node& n);
// InvalidArgument naming `path` unless `n` is a map.
absl::Status RequireMap(const YAML::Node& n, const std::string& path);

// A map node read field by field; remembers which keys were consumed so that
// every unknown key is reported.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

  std::string Path(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }

  const YAML::Node* Find(const std::string& key) {
    seen_.insert(key);
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        found_.push_back(it->second);
        return &found_.back();
      }
    }
    return nullptr;
  }

  absl::Status String(const std::string& key, std::string* out) {
    const YAML::Node* n = Find(key);
    if (n == nullptr) return absl::OkStatus();
    if (!n->IsScalar()) return KeyError(Path(key), absl::StrCat("expected a string, got ", Show(*n)));
    *out = n->Scalar();
    return absl::OkStatus();
  }

  template <typename Int>
  absl::Status Integer(const std::string& key, Int* out, int64_t min, int64_t max) {
    const YAML::Node* n = Find(key);
    if (n == nullptr) return absl::OkStatus();
    int64_t v = 0;
    if (!n->IsScalar() || !absl::SimpleAtoi(n->Scalar(), &v)) {
      return KeyError(Path(key), absl::StrCat("expected an integer, got ", Show(*n)));
    }
    if (v < min || v > max) {
      return KeyError(Path(key), absl::StrCat("value ", v, " is out of range [", min, ", ", max, "]"));
    }
    *out = static_cast<Int>(v);
    return absl::OkStatus();
  }

  absl::Status Double(const std::string& key, double* out, double min, double max) {
    const YAML::Node* n = Find(key);
    if (n == nullptr) return absl::OkStatus();
    double v = 0;
    if (!n->IsScalar() || !absl::SimpleAtod(n->Scalar(), &v)) {
      return KeyError(Path(key), absl::StrCat("expected a number, got ", Show(*n)));
    }
    if (!(v >= min && v <= max)) {
      return KeyError(Path(key), absl::StrCat("value ", n->Scalar(), " is out of range [", min, ", ", max, "]"));
    }
    *out = v;
    return absl::OkStatus();
  }

  // Durations are given in seconds (fractions allowed).
  absl::Status Seconds(const std::string& key, absl::Duration* out, double min_s = 0.001,
                       double max_s = 86400.0 * 7) {
    double s = absl::ToDoubleSeconds(*out);
    if (absl::Status st = Double(key, &s, min_s, max_s); !st.ok()) return st;
    *out = absl::Seconds(s);
    return absl::OkStatus();
  }

  // Reports the first key that no Find() asked for.
  absl::Status Finish() const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "<non-scalar key>";
      if (!seen_.contains(key)) {
        return KeyError(Path(key), "unknown key");
      }
    }
    return absl::OkStatus();
  }

 private:
  YAML::Node node_;  // a handle; operator[] returns temporaries
  std::string path_;
  absl::flat_hash_set<std::string> seen_;
  std::deque<YAML::Node> found_;  // keeps returned nodes alive at stable addresses
};

// `key: true|false`; absent leaves *out alone.
absl::Status ReadBool(MapReader& r, const std::string& key, bool* out);

}  // namespace kvroute::proxy::config_internal

#define KV_RETURN_IF_ERROR(expr)          \
  do {                                    \
    absl::Status _st = (expr);            \
    if (!_st.ok()) return _st;            \
  } while (0)
