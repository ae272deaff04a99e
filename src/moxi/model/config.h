// Reading a model's config.json: formats parses the fields every model type has and the architecture
// registry (arch/registry.h) the model type's own, so adding an architecture touches one registry entry.
// Every tool reads configs through these two functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "moxi/formats/model-config.h"

namespace moxi::model {

// Parses and validates `doc`; `source` names the file in error messages. An unregistered model_type is an
// error naming the field and the registered types.
formats::model_config parse_model_config(const nlohmann::json& doc, const std::string& source);
// Reads PATH, or PATH/config.json when PATH is a directory.
formats::model_config load_model_config(const std::string& path);

}  // namespace moxi::model
