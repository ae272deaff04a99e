// `--tp --ep --pp` of the commands that run a model across processes under mpirun (moxi logits, generate,
// bench decode and prefill; docs/distributed.md), and what a rank reports.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "moxi/model/layers/weights.h"
#include "moxi/model/model.h"
#include "moxi/model/parallel.h"

namespace moxi::dist {

struct parallel_flags {
  model::parallel_sizes sizes;
  double rank_timeout = 300;  // seconds an MPI call may wait for the other ranks once they are loaded
  // Adds --tp, --ep and --pp to cmd.
  void add(CLI::App* cmd);
  // Whether this process runs as one rank of several: a size above 1, or started by mpirun.
  bool distributed() const;
  // Starts MPI and returns the load options of this rank (no parallel layout when not distributed).
  model::load_options load_options() const;
  // Once the model is loaded: waits for every rank, then arms the hang detector (dist::watch_calls) with
  // --rank-timeout. A no-op in one process.
  void loaded() const;
};

// True in a single process and on world rank 0: the rank that prints results and writes files.
bool output_rank(const model::load_options& opts);

// Across processes, one stderr line per rank: its place in the layout, the checkpoint bytes it read, its
// resident memory and what it sent through MPI so far. Nothing in one process.
void report_rank(const model::model& m, const std::string& what);

// Resident set of this process in bytes (VmRSS of /proc/self/status), 0 when unreadable.
uint64_t resident_bytes();

}  // namespace moxi::dist
