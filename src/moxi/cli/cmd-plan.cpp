// `moxi plan --config FILE [...]`: parameters, bytes on disk, shards, per-device memory and decode traffic
// for a parallel layout, computed from the config alone (see model/plan.h).
#include <cstdio>
#include <iostream>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/plan.h"

namespace moxi::cli {
namespace {

void setup_plan(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("plan", "Plan parameters, disk, shards, memory per device and decode traffic");
  struct args {
    std::string config;
    model::plan_options opt;
    std::string cache = "bf16";
    bool json = false;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--config", a->config, "config.json (or a checkpoint directory)")->required();
  cmd->add_option("--tp", a->opt.tp, "tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", a->opt.pp, "pipeline-parallel stages")->capture_default_str();
  cmd->add_option("--ep", a->opt.ep, "expert-parallel size (devices sharing one stage's routed experts)")
      ->capture_default_str();
  cmd->add_option("--nodes", a->opt.nodes, "machines")->capture_default_str();
  cmd->add_option("--gpus-per-node", a->opt.gpus_per_node, "devices per machine")->capture_default_str();
  cmd->add_option("--device-memory", a->opt.device_memory_gib, "memory per device in GiB (0: no fit check)")
      ->capture_default_str();
  cmd->add_option("--context", a->opt.context, "tokens per sequence (default: max_position_embeddings)");
  cmd->add_option("--batch", a->opt.batch, "concurrent sequences per model replica")->capture_default_str();
  cmd->add_option("--shards", a->opt.num_shards, "checkpoint shards")->capture_default_str();
  cmd->add_option("--cache-format", a->cache, "cache element format: bf16 or fp8")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print JSON instead of a table");
  cmd->callback([a] {
    a->opt.cache = a->cache == "fp8" ? model::cache_format::FP8 : model::cache_format::BF16;
    const auto config = model::load_model_config(a->config);
    const auto plan = model::make_plan(config, a->opt);
    if (a->json)
      std::cout << model::plan_to_json(plan, a->opt).dump(2) << "\n";
    else
      std::cout << model::plan_to_text(config, plan, a->opt);
  });
}

MOXI_COMMAND("plan", setup_plan);

}  // namespace
}  // namespace moxi::cli
