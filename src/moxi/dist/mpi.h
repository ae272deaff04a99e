// Multi-process runs over MPI (Debian's OpenMPI; docs/distributed.md): the process's MPI session and the
// model's process groups (model/parallel.h) as MPI communicators. Launch with
//   mpirun -np N moxi logits|generate ... --tp T --ep E --pp P
// Only the main thread of a process calls MPI (MPI_THREAD_SERIALIZED is asked for).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "moxi/model/parallel.h"

namespace moxi::dist {

// True when mpirun (or another PMIx/PMI launcher) started this process.
bool launched_by_mpi();

// Starts MPI once per process (MPI_Finalize runs at exit) and builds this rank's layout for `sizes` over
// all the launched ranks: stages of world / pp consecutive ranks, tp and ep blocks of consecutive ranks in
// a stage. Throws moxi::error when the world does not split that way (model::check_layout checks the
// model's side).
std::shared_ptr<const model::parallel_layout> start(const model::parallel_sizes& sizes);

// Whether start() ran in this process.
bool running();

// What this process has handed to MPI since start (all groups): payload bytes it sent to other ranks (an
// all-reduce counts its buffer once, an all-gather its own part once per other rank, a broadcast root its
// buffer once per other rank, all-to-all what goes to other ranks), and wall seconds spent inside MPI calls
// (waiting for slower ranks included).
struct traffic {
  uint64_t bytes_sent = 0;
  double seconds = 0;
  int64_t calls = 0;
};
traffic traffic_so_far();

// Every rank waits for all (MPI_Barrier on the world); a no-op without MPI.
void barrier();

// The hang detector: from now on, an MPI call of this process that has waited more than `seconds` for the
// other ranks (one died, hangs or was stopped) ends this process with status 75 and a message on stderr;
// mpirun then ends every other rank. Call it once the ranks are loaded (loading times differ a lot between
// ranks); 0 turns it off. A no-op without MPI.
void watch_calls(double seconds);

// What the hang detector runs, on its own thread, before it ends the process: the server fails its
// in-flight requests and turns /health to 503 (serve::server::fail_group). It gets the message printed.
void on_hang(std::function<void(const std::string&)> fn);

// Ends the whole job at once with `code` (MPI_Abort) when MPI runs with more than one rank, so that no
// rank waits forever in a collective for one that stopped on an error; returns when MPI does not run.
void abort_job(int code);

}  // namespace moxi::dist
