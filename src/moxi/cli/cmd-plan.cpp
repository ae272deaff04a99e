// `moxi plan --config FILE [...]`: parameters, bytes on disk, shards, per-device memory and decode traffic
// for a parallel layout, computed from the config alone (see model/plan.h). A layout that does not fit
// --device-memory exits 1 and names the stage whose devices are short, by how much; without layout flags
// it says which cluster it assumed.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
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
  const auto layout = std::make_shared<std::vector<CLI::Option*>>();
  layout->push_back(cmd->add_option("--tp", a->opt.tp, "tensor-parallel size")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(cmd->add_option("--pp", a->opt.pp, "pipeline-parallel stages")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(
      cmd->add_option("--ep", a->opt.ep, "expert-parallel size (devices sharing one stage's routed experts)")
          ->check(integer_in(1, 1 << 20))
          ->capture_default_str());
  layout->push_back(cmd->add_option("--nodes", a->opt.nodes, "machines")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  layout->push_back(cmd->add_option("--gpus-per-node", a->opt.gpus_per_node, "devices per machine")
                        ->check(integer_in(1, 1 << 20))
                        ->capture_default_str());
  cmd->add_option("--device-memory", a->opt.device_memory_gib, "memory per device in GiB (0: no fit check)")
      ->check(number_in(0, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--context", a->opt.context, "tokens per sequence (default: max_position_embeddings)")
      ->check(integer_in(1, int64_t(1) << 40));
  cmd->add_option("--batch", a->opt.batch, "concurrent sequences per model replica")
      ->check(integer_in(1, int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--shards", a->opt.num_shards, "checkpoint shards")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--cache-format", a->cache, "cache element format: bf16 or fp8")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "print JSON instead of a table");
  set_examples(cmd,
               {"moxi plan --config configs/seed-2.8t.json",
                "moxi plan --config configs/seed-2.8t.json --tp 8 --ep 64 --nodes 8 --device-memory 141 "
                "--context 1048576 --json"},
               "docs/plan.md");
  cmd->callback([a, layout] {
    a->opt.cache = a->cache == "fp8" ? model::cache_format::FP8 : model::cache_format::BF16;
    const auto config = model::load_model_config(a->config);
    const auto plan = model::make_plan(config, a->opt);
    const auto& o = a->opt;
    // The JSON carries the layout it assumed; the table says so on stderr.
    if (!a->json &&
        std::none_of(layout->begin(), layout->end(), [](const CLI::Option* x) { return x->count() > 0; }))
      std::fprintf(
          stderr,
          "moxi plan: no layout flags given; assumed one node of %d devices (tp %d, pp %d, ep %d)%s\n",
          o.gpus_per_node, o.tp, o.pp, o.ep,
          o.device_memory_gib > 0 ? "" : " and no memory limit (--device-memory GiB checks the fit)");
    if (a->json)
      std::cout << model::plan_to_json(plan, o).dump(2) << "\n";
    else
      std::cout << model::plan_to_text(config, plan, o);
    if (plan.fits) return;
    std::cout.flush();
    const double limit = o.device_memory_gib * double(uint64_t(1) << 30);
    std::string shortfall;
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const auto& st = plan.stages[s];
      const double need = double(st.weight_bytes + st.cache_bytes);
      if (need <= limit) continue;
      char line[200];
      std::snprintf(line, sizeof line,
                    "%sstage %zu (layers %lld-%lld) needs %.2f GiB per device, %.2f GiB over",
                    shortfall.empty() ? "" : "; ", s, (long long)st.first_layer, (long long)st.last_layer,
                    need / double(uint64_t(1) << 30), (need - limit) / double(uint64_t(1) << 30));
      shortfall += line;
    }
    if (shortfall.empty())
      shortfall = "the heaviest device needs " +
                  std::to_string(double(plan.device_bytes_max) / double(uint64_t(1) << 30)) + " GiB";
    char head[120];
    std::snprintf(head, sizeof head, "the layout does NOT fit %g GiB per device: ", o.device_memory_gib);
    throw error(head + shortfall +
                " (more --tp/--pp/--ep or devices, a shorter --context or a smaller --batch)");
  });
}

MOXI_COMMAND("plan", setup_plan);

}  // namespace
}  // namespace moxi::cli
