// Reading a JSON file with errors that name it: the one place tokenizer configs, generation configs and
// eval reports are read from disk.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "moxi/base/error.h"

namespace moxi::formats {

// The bytes of a file; moxi::error "cannot open <what> <path>" when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& what = "file");

// A parsed JSON document (nlohmann::json, or nlohmann::ordered_json to keep key order); moxi::error naming
// the path when the file cannot be read or is not JSON.
template <class Json = nlohmann::json>
Json read_json_file(const std::string& path, const std::string& what = "file") {
  const std::string text = read_text_file(path, what);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw error(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace moxi::formats
