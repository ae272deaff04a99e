// `moxi quantize IN_DIR OUT_DIR [--shards N]`: BF16/F32 checkpoint -> MXFP4 routed experts.
#include <iostream>

#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
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
  cmd->add_option("IN_DIR", a->in, "input checkpoint directory (with config.json)")->required();
  cmd->add_option("OUT_DIR", a->out, "output directory (must not exist)")->required();
  cmd->add_option("--shards", a->opt.num_shards, "output shards (default: as many as the input)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--activations", a->activations, "activation format recorded in quantization_config")
      ->check(CLI::IsMember({"bf16", "mxfp8_e4m3", "mxfp8_e5m2"}))
      ->capture_default_str();
  cmd->callback([a] {
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: the OUT.tmp-PID directory is removed, exit 130
    a->opt.activations = a->activations == "bf16"         ? formats::act_format::BF16
                         : a->activations == "mxfp8_e5m2" ? formats::act_format::MXFP8_E5M2
                                                          : formats::act_format::MXFP8_E4M3;
    const auto rep = model::quantize_checkpoint(a->in, a->out, a->opt);
    std::cout << "wrote " << a->out << ": " << rep.quantized_tensors << " expert weights to MXFP4, "
              << rep.copied_tensors << " tensors copied, " << rep.bytes_in << " -> " << rep.bytes_out
              << " bytes\n";
  });
}

MOXI_COMMAND("quantize", setup_quantize);

}  // namespace
}  // namespace moxi::cli
