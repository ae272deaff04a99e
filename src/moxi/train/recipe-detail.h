// Recipe parsing shared by the SFT and RL recipes (recipe.cpp, rl-recipe.cpp): a strict field reader and
// the data-source list.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/train/recipe.h"

namespace moxi::train::detail {

using nlohmann::json;

// Reads one object's fields, remembering which keys were consumed so that unknown ones are reported.
class reader {
 public:
  reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw error(where_ + ": expected an object");
  }
  // Call after the last get: a key nobody asked for is a typo or a field of another version.
  void finish() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.count(k)) throw error(where_ + ": unknown field '" + k + "'");
  }
  bool has(const std::string& k) {
    seen_.insert(k);
    return j_.contains(k) && !j_[k].is_null();
  }
  const json& at(const std::string& k) {
    seen_.insert(k);
    return j_.at(k);
  }
  std::string field(const std::string& k) const { return where_ + "." + k; }

  template <class T>
  void get(const std::string& k, T& out) {
    if (!has(k)) return;
    try {
      out = j_[k].get<T>();
    } catch (const json::exception&) {
      throw error(field(k) + ": expected " + expected<T>() + ", got " + j_[k].dump());
    }
  }

 private:
  template <class T>
  static const char* expected() {
    if constexpr (std::is_same_v<T, std::string>)
      return "a string";
    else if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_floating_point_v<T>)
      return "a number";
    else
      return "an integer";
  }
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
};

// `p` made absolute against `base` (empty stays empty).
std::string resolve(const std::string& base, const std::string& p);
// A data.train / data.eval list; `weighted` accepts a "weight" per source (RL's domain mix).
std::vector<data_source> parse_sources(const json& list, const std::string& where, const std::string& base,
                                       const std::string& default_split, bool weighted = false);
json sources_json(const std::vector<data_source>& sources);
// The JSON of a recipe file; errors name the file.
json read_recipe_file(const std::string& path);
// A `dotted.key=value` assignment (value as JSON, else a bare string such as a path) applied to doc.
void apply_assignment(json& doc, const std::string& assignment);
// Sets doc[a][b]... = value for a dotted key, creating objects on the way.
void set_dotted(json& doc, const std::string& key, json value);
// {"a": {"b": 1}} -> {"a.b": 1}; lists stay whole values.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out);

}  // namespace moxi::train::detail
