#include "classifier/request_class.h"

namespace kvroute::classifier {

std::string_view ToString(RequestClass c) {
  switch (c) {
    case RequestClass::kWarm:
      return "WARM";
    case RequestClass::kMedium:
      return "MEDIUM";
    case RequestClass::kHeavy:
      return "HEAVY";
  }
  return "UNKNOWN";
}

}  // namespace kvroute::classifier
