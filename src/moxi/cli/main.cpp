// The `moxi` command line: subcommands register themselves (command.h); this file parses arguments and
// is the one boundary where user errors become a message on stderr and exit code 1.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"

namespace moxi::cli {

std::vector<command>& command_registry() {
  static std::vector<command> registry;
  return registry;
}

}  // namespace moxi::cli

int main(int argc, char** argv) {
  CLI::App app{"moxi: run, serve, post-train and evaluate hybrid-attention sparse MoE models", "moxi"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moxi 0.1.0");
  auto& registry = moxi::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : registry) c.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const moxi::interrupted& e) {
    // A command under an interrupt_guard stopped and cleaned up (base/interrupt.h): 128 + signal.
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: %s; stopped\n", e.what());
    return 128 + e.signal();
  } catch (const moxi::error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
