#include "sim/output_format.h"

namespace sim {
namespace json = boost::json;

std::string ArgumentsForSchema(const json::value* schema) {
  json::object args;
  const json::object* s = schema != nullptr ? schema->if_object() : nullptr;
  const json::value* props = s != nullptr ? s->if_contains("properties") : nullptr;
  if (props != nullptr && props->is_object()) {
    for (const auto& [name, prop] : props->as_object()) {
      std::string_view type;
      if (const json::object* p = prop.if_object()) {
        if (const json::value* t = p->if_contains("type"); t != nullptr && t->is_string()) {
          type = t->as_string();
        }
      }
      if (type == "integer" || type == "number") {
        args[name] = 0;
      } else if (type == "boolean") {
        args[name] = false;
      } else if (type == "array") {
        args[name] = json::array{};
      } else if (type == "object") {
        args[name] = json::object{};
      } else if (type == "null") {
        args[name] = nullptr;
      } else {
        args[name] = "sim";
      }
    }
  }
  return json::serialize(args);
}

}  // namespace sim
