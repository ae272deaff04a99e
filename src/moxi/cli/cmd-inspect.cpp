// `moxi inspect PATH [--json] [--all]`: a checkpoint file or directory, validated and summarized.
#include <iostream>
#include <limits>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/model/inspect.h"

namespace moxi::cli {
namespace {

void setup_inspect(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("inspect", "Validate and summarize a safetensors file or checkpoint directory");
  struct args {
    std::string path;
    bool json = false, all = false;
  };
  auto a = std::make_shared<args>();
  cmd->add_option("PATH", a->path, "a .safetensors file or a checkpoint directory")->required();
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("--all", a->all, "list every tensor (default: the first 40)");
  set_examples(cmd,
               {"moxi inspect models/moxi-small",
                "moxi inspect /tmp/tiny/model-00001-of-00002.safetensors --json --all"},
               "docs/checkpoints.md");
  cmd->callback([a] {
    const auto r = model::inspect_checkpoint(a->path);
    if (a->json)
      std::cout << model::inspect_to_json(r).dump(2) << "\n";
    else
      std::cout << model::inspect_to_text(r, a->all ? std::numeric_limits<size_t>::max() : 40);
    if (r.has_config && !r.config_ok())
      throw error(a->path + ": the tensors do not match config.json (" + std::to_string(r.missing.size()) +
                  " missing, " + std::to_string(r.mismatched.size()) + " mismatched)");
  });
}

MOXI_COMMAND("inspect", setup_inspect);

}  // namespace
}  // namespace moxi::cli
