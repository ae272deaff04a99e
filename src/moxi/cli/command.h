// Subcommand registry for the `moxi` binary: each cmd-*.cpp file defines one subcommand and registers it
// with MOXI_COMMAND, so adding a subcommand never touches main.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace moxi::cli {

struct command {
  std::string name;
  // Adds the subcommand (options and callback) to the root app.
  std::function<void(CLI::App& root)> setup;
};

std::vector<command>& command_registry();

inline bool register_command(command c) {
  command_registry().push_back(std::move(c));
  return true;
}

}  // namespace moxi::cli

#define MOXI_CONCAT_INNER(a, b) a##b
#define MOXI_CONCAT(a, b) MOXI_CONCAT_INNER(a, b)
#define MOXI_COMMAND(name, setup_fn)                                  \
  static const bool MOXI_CONCAT(moxi_command_registered_, __LINE__) = \
      ::moxi::cli::register_command({name, setup_fn})
