// Hjson, the JSON superset DeepSpeed loads its configs with (hjson.load): comments (#, //, /* */),
// keys without quotes, strings without quotes (to the end of the line), optional and trailing
// commas, single-quoted and ''' multi-line strings, and a root object without braces. Every JSON
// file reads as JSON reads it. A key given twice in one object is refused, as DeepSpeed's
// object_pairs_hook refuses it. Stateless functions; safe from several threads.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace zinf::core {

// Parses `text` (named `name` in errors) into a JSON value, keys in file order. Numbers without a
// fraction or exponent are integers (doubles when they exceed 64 bits), others doubles, as Python
// reads them. Throws ConfigError naming the line and column on anything Hjson refuses.
nlohmann::ordered_json parse_hjson(const std::string& text, const std::string& name);

}  // namespace zinf::core
