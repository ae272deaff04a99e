// `moxi init --config FILE --out DIR [--seed N] [--shards N] [--dtype bf16|f32] [--force]`: a random
// checkpoint.
#include <iostream>

#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"

namespace moxi::cli {
namespace {

void setup_init(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "init", "Write a random-weight checkpoint for a config (MXFP4 experts if configured)");
  struct args {
    std::string config, out, dtype = "bf16";
    model::init_options opt;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("--config", a->config, "config.json")->required();
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "output checkpoint directory (parents are created)",
            output_paths::kind::directory)
      ->required();
  cmd->add_option("--seed", a->opt.seed, "random seed")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--shards", a->opt.num_shards, "number of safetensors shards")
      ->check(integer_in(1, 100000))
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "dtype of unquantized tensors")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  set_examples(
      cmd,
      {"moxi init --config configs/tiny-seed.json --out /tmp/tiny --seed 3",
       "moxi init --config configs/tiny-kimi-linear.json --out /tmp/kl --shards 2 --dtype f32 --force"},
      "docs/checkpoints.md");
  cmd->callback([a, outs] {
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: the OUT.tmp-PID directory is removed, exit 130
    outs->check();
    a->opt.float_type = a->dtype == "f32" ? dtype::F32 : dtype::BF16;
    const auto config = model::load_model_config(a->config);
    model::init_checkpoint(config, outs->write_path(a->out), a->opt);
    outs->publish(a->out);
    std::cout << "wrote " << a->out << "\n";
  });
}

MOXI_COMMAND("init", setup_init);

}  // namespace
}  // namespace moxi::cli
