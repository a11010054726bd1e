// Fuzz target: the config loader (proxy/config.h). The config file is written
// by an operator, not a client, but a typo must end in an error naming the key,
// never a crash or a half-valid Config; SIGHUP reloads run the same parser in
// a live daemon.
//
// Input: YAML text.
//
// Checks, beyond "no crash, no sanitizer report": errors are InvalidArgument
// with a message; an accepted config has backends and passes ValidateConfig.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "proxy/config.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("config_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kvroute::proxy::Config> config = kvroute::proxy::ParseConfig(yaml, "fuzz.yaml");
  if (!config.ok()) {
    Check(config.status().code() == absl::StatusCode::kInvalidArgument,
          "errors are InvalidArgument");
    Check(!config.status().message().empty(), "errors carry a message");
    return 0;
  }
  Check(!config->backends.empty(), "an accepted config has backends");
  Check(kvroute::proxy::ValidateConfig(*config).ok(), "an accepted config validates");
  return 0;
}
