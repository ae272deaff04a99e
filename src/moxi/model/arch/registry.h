// The architecture registry: the only switch on model_type (docs/design.md §1). Each entry parses its
// model type's config fields (formats parses the common ones, model/config.h joins the two), declares its
// tensors and lays out its layers; per-layer attention kinds are not architecture-specific
// (layers/attention.h).
#pragma once

#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/arch/blocks.h"
#include "moxi/model/manifest.h"

namespace moxi::model::arch {

struct architecture {
  const char* name;  // "kimi_linear" (the seed family), "deepseek_v3"
  const char* description;
  // Reads this model type's own config.json fields (formats::architecture_fields).
  void (*parse_config)(formats::config_reader& r, formats::model_config& config);
  std::vector<tensor_decl> (*manifest)(const formats::model_config&);
  model_layout (*layout)(const formats::model_config&);
};

// The architecture serving config.model_type; throws naming the model type when none does.
const architecture& find_architecture(const formats::model_config& config);
// The architecture registered for `model_type`, or nullptr.
const architecture* find_architecture(const std::string& model_type);
// The registered model types, comma-separated, for messages.
std::string registered_model_types();

void kimi_linear_config(formats::config_reader& r, formats::model_config& config);
void deepseek_v3_config(formats::config_reader& r, formats::model_config& config);

std::vector<tensor_decl> kimi_linear_manifest(const formats::model_config& config);
std::vector<tensor_decl> deepseek_v3_manifest(const formats::model_config& config);
model_layout kimi_linear_layout(const formats::model_config& config);
model_layout deepseek_v3_layout(const formats::model_config& config);

}  // namespace moxi::model::arch
