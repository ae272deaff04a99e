// `moxi logits -m DIR --tokens 1,2,3 --out FILE.safetensors [--dump NAME,...] [--chunk N] [--force]`: runs
// the forward pass (the kernel backend of this machine; MOXI_KERNELS=ref for the scalar reference) and writes
// the logits (F32 [T, vocab]) plus requested named intermediates, for golden tests against other
// implementations.
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <sstream>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/dist/flags.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/model/model.h"

namespace moxi::cli {
namespace {

std::vector<token_id> parse_tokens(const std::string& s) {
  std::vector<token_id> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < INT32_MIN || v > INT32_MAX)
      throw error("--tokens: '" + item + "' is not a token id");
    out.push_back(token_id(v));
  }
  if (out.empty()) throw error("--tokens: no token ids given");
  return out;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void setup_logits(CLI::App& root) {
  auto* cmd = root.add_subcommand("logits", "Run the forward pass and write logits (+ named intermediates)");
  struct args {
    std::string model, tokens, out, dump;
    int64_t chunk = 0;
    dist::parallel_flags parallel;
  };
  auto a = std::make_shared<args>();
  add_model_option(cmd, a->model, /*required=*/true);
  cmd->add_option("--tokens", a->tokens, "comma-separated token ids")->required();
  auto outs = std::make_shared<output_paths>(cmd);
  outs->add("--out", a->out, "output .safetensors file (written atomically)", output_paths::kind::file)
      ->required();
  cmd->add_option(
      "--dump", a->dump,
      "comma-separated intermediate names or shell patterns (e.g. layers.3.attn_out,layers.*.out); "
      "see docs/model.md");
  cmd->add_option("--chunk", a->chunk, "feed the tokens in chunks of N through the cache (0: one call)")
      ->check(integer_in(0, int64_t(1) << 30));
  a->parallel.add(cmd);
  set_examples(
      cmd,
      {"moxi logits -m models/moxi-small --tokens 1,72,101,108 --out logits.safetensors",
       "moxi logits -m /tmp/tiny --tokens 1,2,3,4,5,6 --chunk 2 --dump 'layers.*.out' --out l.safetensors "
       "--force",
       "mpirun -np 4 moxi logits -m /tmp/tiny --tokens 1,2,3 --tp 2 --ep 2 --pp 2 --out l.safetensors"},
      "docs/model.md");
  cmd->callback([a, outs] {
    outs->check();
    const auto tokens = parse_tokens(a->tokens);
    const auto patterns = split_names(a->dump);
    if (a->parallel.distributed())
      for (const auto& p : patterns)
        if (p != "logits")
          throw usage_error("--dump " + p + ": across processes each rank holds slices of the intermediates; "
                            "only logits can be dumped");
    const auto opts = a->parallel.load_options();
    const auto m = model::model::load(a->model, opts);
    a->parallel.loaded();
    auto cache = m.new_cache();

    // Dumps of several chunks are concatenated along the first (token) dimension.
    std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> dumps;
    model::dump_sink sink;
    sink.wants = [&](std::string_view name) {
      const std::string n(name);
      for (const auto& p : patterns)
        if (fnmatch(p.c_str(), n.c_str(), 0) == 0) return true;
      return false;
    };
    sink.put = [&](const std::string& name, const std::vector<int64_t>& shape, const float* data) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      auto& [s, v] = dumps[name];
      if (s.empty()) {
        s = shape;
      } else {
        if (!std::equal(s.begin() + 1, s.end(), shape.begin() + 1, shape.end()))
          throw error("--dump: '" + name + "' changes shape between chunks; dump it without --chunk");
        s[0] += shape[0];
      }
      v.insert(v.end(), data, data + n);
    };
    model::forward_options fo;
    if (!patterns.empty()) fo.dump = &sink;

    const int64_t T = int64_t(tokens.size()), V = m.config().vocab_size;
    const int64_t step = a->chunk > 0 ? a->chunk : T;
    std::vector<float> logits;
    logits.reserve(size_t(T * V));
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < T; i += step) {
      const int64_t n = std::min(step, T - i);
      const auto part = m.forward(std::span(tokens).subspan(size_t(i), size_t(n)), *cache, fo);
      logits.insert(logits.end(), part.begin(), part.end());
    }
    const double secs = seconds_since(t0);

    std::vector<std::pair<formats::tensor_spec, const void*>> out;
    out.push_back({{"logits", dtype::F32, {T, V}}, logits.data()});
    for (const auto& [name, sv] : dumps)
      if (name != "logits") out.push_back({{name, dtype::F32, sv.first}, sv.second.data()});
    for (const auto& p : patterns) {
      bool hit = false;
      for (const auto& [name, sv] : dumps) hit = hit || fnmatch(p.c_str(), name.c_str(), 0) == 0;
      if (!hit && p != "logits")
        throw error("--dump: no intermediate is named '" + p + "' (see docs/model.md)");
    }
    dist::report_rank(m, "logits");
    if (!dist::output_rank(opts)) return;  // rank 0 writes the file
    formats::write_safetensors(a->out, out);
    std::cerr << "logits: " << T << " tokens in " << secs << " s (" << double(T) / secs
              << " tokens/s), wrote " << out.size() << " tensor(s) to " << a->out << "\n";
  });
}

MOXI_COMMAND("logits", setup_logits);

}  // namespace
}  // namespace moxi::cli
