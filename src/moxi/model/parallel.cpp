// Layout rules of the multi-process forward: which ranks form a stage, which layers and experts a rank
// owns, the divisibility checks, the tensor-parallel local config and the tensor split table.
#include "moxi/model/parallel.h"

#include <array>
#include <string_view>

#include "moxi/base/error.h"

namespace moxi::model {

std::string parallel_sizes::to_string() const {
  return "tp " + std::to_string(tp) + ", ep " + std::to_string(ep) + ", pp " + std::to_string(pp);
}

parallel_layout parallel_layout::place(const parallel_sizes& sizes, int world, int rank) {
  parallel_layout l;
  l.sizes = sizes;
  l.world_size = world;
  l.world_rank = rank;
  const int per_stage = world / sizes.pp;
  l.stage = rank / per_stage;
  l.stage_rank = rank % per_stage;
  l.tp_rank = l.stage_rank % sizes.tp;
  l.ep_rank = l.stage_rank % sizes.ep;
  return l;
}

std::pair<int64_t, int64_t> parallel_layout::stage_layers(int64_t num_layers, int pp, int s) {
  return {int64_t(s) * num_layers / pp, int64_t(s + 1) * num_layers / pp - 1};
}

std::pair<int64_t, int64_t> parallel_layout::expert_range(int64_t num_experts, int ep, int e) {
  const int64_t n = num_experts / ep;
  return {int64_t(e) * n, n};
}

void check_layout(const formats::model_config& c, const parallel_sizes& s, int world) {
  const std::string what = "layout " + s.to_string() + " on " + std::to_string(world) + " ranks: ";
  if (s.tp < 1 || s.ep < 1 || s.pp < 1) throw error(what + "every size must be at least 1");
  if (world % s.pp)
    throw error(what + "the " + std::to_string(world) + " ranks do not split into " + std::to_string(s.pp) +
                " pipeline stages");
  const int per_stage = world / s.pp;
  if (per_stage % s.tp)
    throw error(what + "tp " + std::to_string(s.tp) + " must divide the " + std::to_string(per_stage) +
                " ranks of a pipeline stage (run mpirun -np tp x pp, or a multiple of it)");
  if (per_stage % s.ep)
    throw error(what + "ep " + std::to_string(s.ep) + " must divide the " + std::to_string(per_stage) +
                " ranks of a pipeline stage");
  if (s.pp > c.num_layers)
    throw error(what + std::to_string(s.pp) + " stages for " + std::to_string(c.num_layers) + " layers");
  auto divisible = [&](int64_t n, int by, const std::string& field, const char* flag) {
    if (n % by)
      throw error(what + c.source + ": " + field + " " + std::to_string(n) + " is not divisible by " + flag +
                  " " + std::to_string(by));
  };
  if (c.kda) divisible(c.kda->num_heads, s.tp, "KDA num_heads", "tp");
  if (c.mla) divisible(c.mla->num_heads, s.tp, "MLA num_heads", "tp");
  if (c.swa) {
    divisible(c.swa->num_heads, s.tp, "SWA num_attention_heads", "tp");
    divisible(c.swa->num_kv_heads, s.tp, "SWA num_key_value_heads", "tp");
  }
  if (c.dense_intermediate_size) divisible(c.dense_intermediate_size, s.tp, "intermediate_size", "tp");
  if (c.moe.num_experts > 0) {
    divisible(c.moe.num_experts, s.ep, "num_experts", "ep");
    divisible(c.moe.intermediate_size * c.moe.num_shared_experts, s.tp,
              "the shared experts' width (moe_intermediate_size x num_shared_experts)", "tp");
  } else if (s.ep > 1) {
    throw error(what + c.source + " has no routed experts to split ep ways");
  }
}

formats::model_config local_config(const formats::model_config& config, int tp) {
  formats::model_config c = config;
  if (tp == 1) return c;
  if (c.kda) c.kda->num_heads /= tp;
  if (c.mla) c.mla->num_heads /= tp;
  if (c.swa) {
    c.swa->num_heads /= tp;
    c.swa->num_kv_heads /= tp;
  }
  c.dense_intermediate_size /= tp;
  return c;
}

std::optional<int> tp_split_axis(const std::string& name) {
  static constexpr std::string_view layers = "model.layers.";
  if (!name.starts_with(layers)) return std::nullopt;
  if (name.find(".experts.") != std::string::npos || name.find(".indexer.") != std::string::npos)
    return std::nullopt;
  // The module the tensor belongs to: "...self_attn.q_proj.weight" -> "q_proj"; "...self_attn.A_log" and
  // "...self_attn.dt_bias" are parameters of the attention module itself.
  const size_t last = name.rfind('.');
  const std::string_view leaf = std::string_view(name).substr(last + 1);
  if (leaf == "A_log") return 2;  // [1, 1, H, 1]
  if (leaf == "dt_bias") return 0;
  if (leaf != "weight") return std::nullopt;
  const size_t prev = name.rfind('.', last - 1);
  const std::string_view module = std::string_view(name).substr(prev + 1, last - prev - 1);
  static constexpr std::array<std::string_view, 14> rows = {
      "q_proj",   "k_proj",    "v_proj",    "q_b_proj",  "kv_b_proj", "g_proj",    "g_b_proj",
      "f_b_proj", "b_proj",    "gate_proj", "up_proj",   "q_conv1d",  "k_conv1d",  "v_conv1d"};
  for (const auto r : rows)
    if (module == r) return 0;
  if (module == "o_proj" || module == "down_proj") return 1;
  return std::nullopt;
}

}  // namespace moxi::model
