#include "moxi/cli/parallel-flags.h"

#include "moxi/cli/options.h"
#include "moxi/dist/mpi.h"

namespace moxi::cli {

void parallel_flags::add(CLI::App* cmd) {
  cmd->add_option("--tp", sizes.tp, "tensor-parallel ranks (attention heads, dense and shared FFN); run under mpirun")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--ep", sizes.ep, "expert-parallel ranks (routed experts, all-to-all); run under mpirun")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  cmd->add_option("--pp", sizes.pp, "pipeline stages (contiguous layer ranges); run under mpirun")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
}

bool parallel_flags::distributed() const {
  return sizes.tp > 1 || sizes.ep > 1 || sizes.pp > 1 || dist::launched_by_mpi();
}

model::load_options parallel_flags::load_options() const {
  model::load_options o;
  if (distributed()) o.parallel = dist::start(sizes);
  return o;
}

bool output_rank(const model::load_options& opts) { return !opts.parallel || opts.parallel->world_rank == 0; }

}  // namespace moxi::cli
