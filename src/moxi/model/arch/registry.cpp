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
      &kimi_linear_manifest, &kimi_linear_layout}},
    {"deepseek_v32",
     {"deepseek_v3", "DeepSeek-V3.2: DSA over MLA with YaRN, grouped routing, MTP", &deepseek_v3_manifest,
      &deepseek_v3_layout}},
    {"deepseek_v3",
     {"deepseek_v3", "DeepSeek-V3: MLA with YaRN, grouped routing, MTP", &deepseek_v3_manifest,
      &deepseek_v3_layout}},
}};

}  // namespace

const architecture& find_architecture(const formats::model_config& config) {
  for (const auto& e : kRegistry)
    if (config.model_type == e.model_type) return e.arch;
  throw error(config.source + ": no architecture is registered for model_type '" + config.model_type + "'");
}

}  // namespace moxi::model::arch
