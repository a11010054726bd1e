// The one-pass fast path of ExtractFeatures (proxy/features.h): validates a
// completion or chat body as strict JSON and decodes only the fields routing
// needs, without building a DOM. It handles the common shapes only and
// returns nullopt for anything else (including every error), so that the DOM
// path in features.cc decides and its results and messages stay the only
// ones. Private to proxy/.
//
// Thread-safety: a pure function.
#pragma once

#include <optional>
#include <string_view>

#include "proxy/features.h"

namespace kvroute::proxy {

std::optional<router::RequestFeatures> ExtractFeaturesFast(Endpoint endpoint,
                                                           std::string_view body,
                                                           std::string_view session_header,
                                                           const FeatureLimits& limits);

}  // namespace kvroute::proxy
