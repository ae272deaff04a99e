// The `moxi` command line: subcommands register themselves (command.h); this file parses arguments and
// is the one boundary where errors become a message on stderr and an exit status: 0 success (and --help),
// 1 an error (moxi::error: a bad file, config or request), 2 a usage error (a bad flag or value from CLI11,
// or moxi::usage_error), 70 an unexpected internal error (EX_SOFTWARE); docs/design.md §3.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
#include "moxi/dist/mpi.h"

namespace moxi::cli {

std::vector<command>& command_registry() {
  static std::vector<command> registry;
  return registry;
}

namespace {

// "moxi serve", "moxi tokenizer train": the deepest subcommand the command line named.
std::string command_path(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* a = &app;;) {
    const auto subs = a->get_subcommands();
    if (subs.empty()) return path;
    a = subs.front();
    path += " " + a->get_name();
  }
}

int usage_error_exit(const CLI::App& app, const std::string& message) {
  std::fflush(stdout);
  const std::string path = command_path(app);
  std::fprintf(stderr, "%s: usage error: %s\nRun '%s --help' for the usage.\n", path.c_str(), message.c_str(),
               path.c_str());
  return 2;
}

}  // namespace

int run_parsed(CLI::App& app, int argc, char** argv);

}  // namespace moxi::cli

int main(int argc, char** argv) {
  CLI::App app{"moxi: run, serve, post-train and evaluate hybrid-attention sparse MoE models", "moxi"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moxi 0.1.0");
  app.footer(
      "EXAMPLES:\n  moxi chat\n  moxi serve models/moxi-small --port 8000\n"
      "  moxi plan --config configs/seed-2.8t.json --tp 8 --ep 64 --nodes 8 --device-memory 141\n\n"
      "Run 'moxi COMMAND --help' for a command's flags and examples. Documentation: README.md and "
      "\n" MOXI_DOCS_DIR "/*.md (the docs/ of the moxi source tree).");
  auto& registry = moxi::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : registry) c.setup(app);
  // CLI11 would report a mistyped command as "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(registry.begin(), registry.end(), [&](const auto& c) { return c.name == argv[1]; }))
    return moxi::cli::usage_error_exit(
        app, std::string("no command '") + argv[1] + "' ('moxi --help' lists them)");
  const int rc = moxi::cli::run_parsed(app, argc, argv);
  // Under mpirun a rank that stops on an error takes the job down with it, so that no other rank waits
  // forever in a collective (docs/distributed.md).
  if (rc != 0) moxi::dist::abort_job(rc);
  return rc;
}

namespace moxi::cli {

int run_parsed(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return moxi::cli::usage_error_exit(app, e.what());
  } catch (const moxi::interrupted& e) {
    // A command under an interrupt_guard stopped and cleaned up (base/interrupt.h): 128 + signal.
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: %s; stopped\n", e.what());
    return 128 + e.signal();
  } catch (const moxi::usage_error& e) {
    return moxi::cli::usage_error_exit(app, e.what());
  } catch (const moxi::error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "moxi: internal error: %s (please report it)\n", e.what());
    return 70;
  }
  return 0;
}

}  // namespace moxi::cli
