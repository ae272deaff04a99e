// `moxi train ...`: runs the trainer, `moxi-train` from the directory of this executable, with the same
// arguments. The trainer links libtorch and the engine must not, so it is its own executable; it exists only
// where libtorch was found at build time.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/cli/command.h"

namespace moxi::cli {
namespace {

std::string trainer_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw error("moxi train: cannot locate this executable (/proc/self/exe): " + ec.message());
  return (self.parent_path() / "moxi-train").string();
}

void setup_train(CLI::App& root) {
  auto* cmd = root.add_subcommand("train",
                                  "Post-train a model: `moxi train sft --recipe recipes/moxi-small.json` "
                                  "(runs moxi-train; see `moxi train --help`)");
  // Everything after `train` belongs to moxi-train, --help included.
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd] {
    const std::string exe = trainer_path();
    if (::access(exe.c_str(), X_OK) != 0)
      throw error("moxi train: " + exe +
                  " is missing: this moxi was built without libtorch, which the trainer needs "
                  "(apt-get install libtorch-dev, then configure and build again)");
    std::vector<std::string> args = {"moxi-train"};
    for (const auto& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    ::execv(exe.c_str(), argv.data());
    throw io_error("exec", exe, errno);
  });
}

MOXI_COMMAND("train", setup_train);

}  // namespace
}  // namespace moxi::cli
