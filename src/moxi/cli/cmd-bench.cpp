// `moxi bench <name>`: the benchmarks in bench/. Each benchmark adds its own subcommand through an
// `add_*_bench(CLI::App&)` function; adding one is an include and one line in kBenches.
#include "bench/header-bench.h"
#include "bench/json-mask-bench.h"
#include "bench/kernels-bench.h"
#include "bench/model-bench.h"
#include "bench/sandbox-bench.h"
#include "bench/serve-bench.h"
#include "moxi/cli/command.h"

namespace moxi::cli {
namespace {

struct bench_entry {
  const char* name;
  void (*add)(CLI::App& bench);
};

constexpr bench_entry kBenches[] = {
    {"sandbox", bench::add_sandbox_bench},
    {"membw", bench::add_membw_bench},
    {"gemv", bench::add_gemv_bench},
    {"gemm", bench::add_gemm_bench},
    {"pool", bench::add_pool_bench},
    {"decode", bench::add_decode_bench},
    {"prefill", bench::add_prefill_bench},
    {"serve", bench::add_serve_bench},
    {"header", bench::add_header_bench},
    {"json-mask", bench::add_json_mask_bench},
};

void setup(CLI::App& root) {
  auto* bench = root.add_subcommand("bench", "Benchmarks; every figure is a ratio measured in the same run");
  bench->require_subcommand(1);
  for (const auto& b : kBenches) b.add(*bench);
}

MOXI_COMMAND("bench", setup);

}  // namespace
}  // namespace moxi::cli
