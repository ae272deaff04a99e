// `moxi bench <name>`: the benchmarks in bench/. Each benchmark adds its own subcommand through an
// `add_*_bench(CLI::App&)` function; adding one is an include and one line in kBenches.
#include "bench/context-bench.h"
#include "bench/header-bench.h"
#include "bench/json-mask-bench.h"
#include "bench/kernels-bench.h"
#include "bench/model-bench.h"
#include "bench/sandbox-bench.h"
#include "bench/serve-bench.h"
#include "bench/vision-bench.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"

namespace moxi::cli {
namespace {

struct bench_entry {
  const char* name;
  void (*add)(CLI::App& bench);
  const char* example;  // for the EXAMPLES section of its --help
  const char* doc;
};

constexpr bench_entry kBenches[] = {
    {"sandbox", bench::add_sandbox_bench, "moxi bench sandbox --n 50", "docs/sandbox.md"},
    {"membw", bench::add_membw_bench, "moxi bench membw --mib 1024 --json", "docs/kernels-mxfp4.md"},
    {"gemv", bench::add_gemv_bench, "moxi bench gemv --m 4096 --k 4096 --format mxfp4",
     "docs/kernels-mxfp4.md"},
    {"gemm", bench::add_gemm_bench, "moxi bench gemm --m 4096 --k 4096 --n 128 --format bf16",
     "docs/kernels-mxfp4.md"},
    {"indexer", bench::add_indexer_bench, "moxi bench indexer --keys 131072 --heads 4 --dim 64",
     "docs/kernels.md"},
    {"pool", bench::add_pool_bench, "moxi bench pool --jobs 10000", "docs/kernels-mxfp4.md"},
    {"decode", bench::add_decode_bench, "moxi bench decode --config configs/bench-1.5b.json --batch 8",
     "docs/kernels-mxfp4.md"},
    {"prefill", bench::add_prefill_bench, "moxi bench prefill --config configs/bench-1.5b.json --prompt 256",
     "docs/kernels-mxfp4.md"},
    {"context", bench::add_context_bench,
     "moxi bench context --config configs/bench-1.5b.json --contexts 4096,32768,131072",
     "docs/kernels-mxfp4.md"},
    {"serve", bench::add_serve_bench,
     "moxi bench serve -m models/moxi-small --concurrency 1,4,16 --multi-turn", "docs/serving.md"},
    {"header", bench::add_header_bench, "moxi bench header --sizes 1000,100000 --json",
     "docs/checkpoints.md"},
    {"json-mask", bench::add_json_mask_bench, "moxi bench json-mask -m models/moxi-small", "docs/serving.md"},
    {"vision", bench::add_vision_bench, "moxi bench vision --sizes 448,1024", "docs/vision.md"},
};

void setup(CLI::App& root) {
  auto* bench = root.add_subcommand("bench", "Benchmarks; every figure is a ratio measured in the same run");
  bench->require_subcommand(1);
  for (const auto& b : kBenches) {
    b.add(*bench);
    set_examples(bench->get_subcommand(b.name), {b.example}, b.doc);
  }
  set_examples(
      bench, {"moxi bench gemv --m 4096 --k 4096", "moxi bench serve -m models/moxi-small --concurrency 1,4"},
      "README.md (the bench row lists each benchmark's doc)");
}

MOXI_COMMAND("bench", setup);

}  // namespace
}  // namespace moxi::cli
