// See header-bench.h.
#include "bench/header-bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "moxi/base/error.h"
#include "moxi/formats/safetensors.h"

namespace moxi::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void write_synthetic_header_file(const std::string& path, int64_t n) {
  static const char* const kParts[] = {"w1.weight_blocks", "w1.weight_scales", "w2.weight_blocks",
                                       "w2.weight_scales", "w3.weight_blocks", "w3.weight_scales"};
  std::vector<formats::tensor_entry> entries;
  entries.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t part = i % 6, expert = (i / 6) % 1024, layer = i / (6 * 1024);
    formats::tensor_entry e;
    e.name = "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(expert) +
             "." + kParts[part];
    e.type = dtype::U8;
    e.shape = {1};
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].begin = i;
    entries[i].end = i + 1;
  }
  const std::string head = formats::encode_safetensors_header(entries, {{"format", "pt"}});
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(head.data(), std::streamsize(head.size()));
  const std::string data(size_t(n), '\x01');
  out.write(data.data(), std::streamsize(data.size()));
  if (!out.good()) throw error("bench header: cannot write " + path);
}

std::vector<header_bench_row> run_header_bench(const std::vector<int64_t>& sizes, int runs,
                                               const std::string& dir) {
  std::vector<header_bench_row> rows;
  for (int64_t n : sizes) {
    const std::string path = dir + "/header-" + std::to_string(n) + ".safetensors";
    write_synthetic_header_file(path, n);
    header_bench_row r;
    r.tensors = n;
    r.open_s = r.bare_parse_s = std::numeric_limits<double>::infinity();
    for (int k = 0; k < runs; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      auto f = formats::safetensors_file::open(path);
      r.open_s = std::min(r.open_s, seconds_since(t0));
      if (int64_t(f->tensors().size()) != n) throw error("bench header: tensor count mismatch in " + path);
      r.header_bytes = f->data_offset() - 8;
      // The header text alone, through nlohmann's plain DOM parser (no checks, no duplicate detection).
      std::ifstream in(path, std::ios::binary);
      std::string text(r.header_bytes, '\0');
      in.seekg(8);
      in.read(text.data(), std::streamsize(text.size()));
      t0 = std::chrono::steady_clock::now();
      auto j = nlohmann::json::parse(text);
      r.bare_parse_s = std::min(r.bare_parse_s, seconds_since(t0));
      if (int64_t(j.size()) != n + 1) throw error("bench header: bare parse size mismatch");
    }
    std::filesystem::remove(path);
    r.tensors_per_s = double(n) / r.open_s;
    r.vs_bare_parse = r.open_s / r.bare_parse_s;
    rows.push_back(r);
  }
  return rows;
}

void add_header_bench(CLI::App& bench) {
  struct options {
    std::vector<int64_t> sizes = {62'500, 125'000, 250'000, 500'000};
    int runs = 3;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "header",
      "Opens synthetic safetensors headers of up to 500k tensors (the seed has 502,524): tensors/s");
  cmd->add_option("--sizes", o->sizes, "tensor counts")->delimiter(',')->capture_default_str();
  cmd->add_option("--runs", o->runs, "timings per size (best is reported)")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    if (o->runs < 1) throw error("bench header: --runs must be >= 1");
    for (int64_t n : o->sizes)
      if (n < 1 || n > 5'000'000) throw error("bench header: sizes must be in [1, 5000000]");
    std::string tmpl = (std::filesystem::temp_directory_path() / "moxi-bench-header-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw error("bench header: mkdtemp failed");
    std::vector<header_bench_row> rows;
    try {
      rows = run_header_bench(o->sizes, o->runs, tmpl);
    } catch (...) {
      std::filesystem::remove_all(tmpl);
      throw;
    }
    std::filesystem::remove_all(tmpl);
    if (o->json) {
      nlohmann::json j = {{"bench", "header"}, {"runs", o->runs}, {"rows", nlohmann::json::array()}};
      for (const auto& r : rows)
        j["rows"].push_back({{"tensors", r.tensors},
                             {"header_bytes", r.header_bytes},
                             {"open_s", r.open_s},
                             {"bare_parse_s", r.bare_parse_s},
                             {"tensors_per_s", r.tensors_per_s},
                             {"vs_bare_parse", r.vs_bare_parse}});
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("safetensors header open (mmap + parse + every check), best of %d\n", o->runs);
    std::printf("%10s %12s %10s %14s %14s %10s\n", "tensors", "header MB", "open s", "tensors/s",
                "bare parse s", "vs bare");
    for (const auto& r : rows)
      std::printf("%10lld %12.1f %10.3f %14.0f %14.3f %9.2fx\n", (long long)r.tensors,
                  double(r.header_bytes) / 1e6, r.open_s, r.tensors_per_s, r.bare_parse_s, r.vs_bare_parse);
    if (rows.size() > 1)
      std::printf("tensors/s at %lld vs %lld: %.2f (1.0 is linear; quadratic halves it per doubling)\n",
                  (long long)rows.back().tensors, (long long)rows.front().tensors,
                  rows.back().tensors_per_s / rows.front().tensors_per_s);
  });
}

}  // namespace moxi::bench
