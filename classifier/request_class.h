// RequestClass: the classifier's verdict on one request, WARM, MEDIUM or
// HEAVY. Its own dependency-free header so that the classifier, the router
// (which carries it in a Decision) and the proxy (which logs it) share it
// without the classifier including the router.
#pragma once

#include <string_view>

namespace kvroute::classifier {

// WARM: mostly cached or few new tokens; MEDIUM: cold but below the heavy
// threshold; HEAVY: at least `heavy_threshold` new tokens.
enum class RequestClass { kWarm, kMedium, kHeavy };

// "WARM", "MEDIUM", "HEAVY": the spelling of request logs and metric labels.
std::string_view ToString(RequestClass c);

}  // namespace kvroute::classifier
