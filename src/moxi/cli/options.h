// The parts every `moxi` subcommand's command line shares, so that all of them check their flags the same
// way: range validators that run on the flag's text (so "-3" can never wrap into a huge unsigned count), the
// model flag (-m/--model), output paths that are checked before any work and refused when they exist unless
// --force is given, and the EXAMPLES footer of --help. A bad value is a CLI::ValidationError and a bad
// combination a moxi::usage_error; main.cpp exits with status 2 for both (docs/design.md §3).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "moxi/runtime/generate.h"
#include "moxi/runtime/sampler.h"

namespace moxi::cli {

// A decimal integer in [lo, hi] ("-3" for a count is rejected, not converted).
CLI::Validator integer_in(int64_t lo, int64_t hi);
// A decimal integer in [0, 2^64 - 1]: seeds.
CLI::Validator unsigned_integer();
// A finite number in [lo, hi], or (lo, hi] when lo_open.
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// A TCP port (0: any free port).
CLI::Validator tcp_port();

// Adds -m,--model DIR. Optional models default to $MOXI_MODEL, else the bundled moxi-small
// (model-dir.h's resolve_model_dir).
CLI::Option* add_model_option(CLI::App* cmd, std::string& dir, bool required);

// The sampling flags of `generate` and `chat`, with one policy for both: greedy (temperature 0) unless
// --temperature is given, so a command line is reproducible; the HTTP API keeps OpenAI's default of 1
// (docs/serving.md). Returns --seed, whose value the caller copies into `s.seed` when given.
CLI::Option* add_sampling_options(CLI::App* cmd, runtime::sampling_params& s, uint64_t& seed);

// --draft-tokens N: speculative decoding with the model's MTP head (runtime/generate.h draft_tokens).
void add_draft_option(CLI::App* cmd, int64_t& draft_tokens);
// A moxi::error when drafting is asked for and the model has no MTP layer to draft with.
void check_draft_option(int64_t draft_tokens, const runtime::causal_lm& lm, const std::string& model_dir);
// "drafted 120, accepted 96 (80.0 %), 2.6 tokens per verify step"; empty without speculation.
std::string draft_summary(const runtime::generate_result& r);

// Ends `cmd --help` with an EXAMPLES section (one command line each) and the doc that describes it.
void set_examples(CLI::App* cmd, std::initializer_list<std::string> examples, const std::string& doc);

// The outputs of one command. add() registers an output flag whose parent directory must exist (a file)
// or may be created (a checkpoint directory, like `mkdir -p`); the first add() also adds --force. check(),
// called first in the command's callback, refuses an output that exists unless --force is given, so no
// work is done for a result that cannot be written.
class output_paths {
 public:
  enum class kind { file, directory };

  explicit output_paths(CLI::App* cmd) : cmd_(cmd) {}
  // `name` is "--out" or a positional name such as "OUT_DIR".
  CLI::Option* add(const std::string& name, std::string& path, const std::string& description, kind k);
  // Throws moxi::usage_error for an existing output without --force, for an existing directory in place of
  // a file, and (even with --force) for an existing directory that is not a checkpoint.
  void check();
  // Where a directory output is written: the path itself, or with --force over an existing checkpoint a
  // fresh sibling that publish() renames over the old one once the write has succeeded (a failed write
  // leaves the old checkpoint as it was).
  std::string write_path(const std::string& path) const;
  void publish(const std::string& path) const;
  bool force() const { return force_; }  // --force was given

 private:
  struct entry {
    std::string* path;
    kind k;
    CLI::Option* option;
  };
  CLI::App* cmd_;
  std::vector<entry> entries_;
  bool force_ = false;
};

}  // namespace moxi::cli
