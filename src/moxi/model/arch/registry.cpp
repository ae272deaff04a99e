// Registry of supported architectures, keyed by config.json model_type.
#include "moxi/model/arch/registry.h"

#include <array>

#include "moxi/base/error.h"

namespace moxi::model::arch {
namespace {

struct entry {
  const char* model_type;
  architecture arch;
};

const std::array<entry, 3> kRegistry = {{
    {"kimi_linear",
     {"kimi_linear",
      "KDA + (Gated DSA | MLA) [+ sliding-window] hybrid MoE with MTP: the seed family and Kimi-Linear",
      &kimi_linear_config, &kimi_linear_manifest, &kimi_linear_layout}},
    {"deepseek_v32",
     {"deepseek_v3", "DeepSeek-V3.2: DSA over MLA with YaRN, grouped routing, MTP", &deepseek_v3_config,
      &deepseek_v3_manifest, &deepseek_v3_layout}},
    {"deepseek_v3",
     {"deepseek_v3", "DeepSeek-V3: MLA with YaRN, grouped routing, MTP", &deepseek_v3_config,
      &deepseek_v3_manifest, &deepseek_v3_layout}},
}};

}  // namespace

const architecture* find_architecture(const std::string& model_type) {
  for (const auto& e : kRegistry)
    if (model_type == e.model_type) return &e.arch;
  return nullptr;
}

const architecture& find_architecture(const formats::model_config& config) {
  if (const architecture* a = find_architecture(config.model_type)) return *a;
  throw error(config.source + ": no architecture is registered for model_type '" + config.model_type + "'");
}

std::string registered_model_types() {
  std::string out;
  for (const auto& e : kRegistry) out += (out.empty() ? "" : ", ") + std::string(e.model_type);
  return out;
}

}  // namespace moxi::model::arch
