// The architecture registry: the model layer's only switch on model_type (docs/design.md §1). Reading
// config.json still switches on model_type for its field names (formats/model-config.cpp), below this
// layer; per-layer attention kinds are not architecture-specific (layers/attention.h).
#pragma once

#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/arch/blocks.h"
#include "moxi/model/manifest.h"

namespace moxi::model::arch {

struct architecture {
  const char* name;         // "kimi_linear" (the seed family), "deepseek_v3"
  const char* description;
  std::vector<tensor_decl> (*manifest)(const formats::model_config&);
  model_layout (*layout)(const formats::model_config&);
};

// The architecture serving config.model_type; throws naming the model type when none does.
const architecture& find_architecture(const formats::model_config& config);

std::vector<tensor_decl> kimi_linear_manifest(const formats::model_config& config);
std::vector<tensor_decl> deepseek_v3_manifest(const formats::model_config& config);
model_layout kimi_linear_layout(const formats::model_config& config);
model_layout deepseek_v3_layout(const formats::model_config& config);

}  // namespace moxi::model::arch
