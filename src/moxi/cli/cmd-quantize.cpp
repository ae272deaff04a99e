// `moxi quantize IN_DIR OUT_DIR [--shards N] [--force]`: BF16/F32 checkpoint -> MXFP4 routed experts.
#include <iostream>

#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/model/quantize.h"

namespace moxi::cli {
namespace {

void setup_quantize(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("quantize", "Convert a BF16/F32 checkpoint to MXFP4 routed experts (streaming)");
  struct args {
    std::string in, out, activations = "mxfp8_e4m3";
    model::quantize_options opt;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("IN_DIR", a->in, "input checkpoint directory (with config.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("OUT_DIR", a->out, "output checkpoint directory (parents are created)",
            output_paths::kind::directory)
      ->required();
  cmd->add_option("--shards", a->opt.num_shards, "output shards (default: as many as the input)")
      ->check(integer_in(1, 100000));
  cmd->add_option("--activations", a->activations, "activation format recorded in quantization_config")
      ->check(CLI::IsMember({"bf16", "mxfp8_e4m3", "mxfp8_e5m2"}))
      ->capture_default_str();
  set_examples(
      cmd, {"moxi quantize /tmp/bf16 /tmp/mxfp4", "moxi quantize /tmp/bf16 /tmp/mxfp4 --shards 4 --force"},
      "docs/mx-formats.md");
  cmd->callback([a, outs] {
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: the OUT.tmp-PID directory is removed, exit 130
    outs->check();
    a->opt.activations = a->activations == "bf16"         ? formats::act_format::BF16
                         : a->activations == "mxfp8_e5m2" ? formats::act_format::MXFP8_E5M2
                                                          : formats::act_format::MXFP8_E4M3;
    const auto rep = model::quantize_checkpoint(a->in, outs->write_path(a->out), a->opt);
    outs->publish(a->out);
    std::cout << "wrote " << a->out << ": " << rep.quantized_tensors << " expert weights to MXFP4, "
              << rep.copied_tensors << " tensors copied, " << rep.bytes_in << " -> " << rep.bytes_out
              << " bytes\n";
  });
}

MOXI_COMMAND("quantize", setup_quantize);

}  // namespace
}  // namespace moxi::cli
