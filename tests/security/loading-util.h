// Shared by tests/security/loading-*-test.cpp: running the moxi binary bounded in memory, CPU and wall time,
// and scratch model directories made from the bundled moxi-tiny.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/run-moxi.h"

namespace moxi::testing {

// Bounds for one hostile-input run of the binary: 4 GiB of address space (the unbounded runs grew to
// ~7 GB before bad_alloc), 60 s of CPU, 120 s of wall time. A run that hits one of them dies by a signal
// or a bad_alloc, which the tests below report as a failure: the clear error must come first.
inline constexpr const char* kBounded = "ulimit -v 4194304 && ulimit -t 60 && exec timeout -s KILL 120";

inline command_result run_moxi_bounded(const std::string& args, const std::string& dir,
                                       const std::string& input = "") {
  return run_moxi(args, input, dir, kBounded);
}

// A model directory at dir/name: moxi-tiny's JSON files copied (to be edited) and its safetensors linked.
inline std::string tiny_model_copy(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string src = std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";
  const std::string out = dir + "/" + name;
  fs::create_directories(out);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(src + "/" + f, out + "/" + f, fs::copy_options::overwrite_existing);
  fs::create_symlink(src + "/model.safetensors", out + "/model.safetensors");
  return out;
}

inline void edit_json(const std::string& file, const std::function<void(nlohmann::json&)>& fn) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  fn(j);
  std::ofstream(file, std::ios::trunc) << j.dump(1);
}

// Expects a run that failed cleanly: exit status 1 (moxi::error), not a signal, a timeout or a bad_alloc,
// with every needle in stderr.
inline void expect_clean_error(const command_result& r, std::initializer_list<std::string> needles) {
  EXPECT_EQ(r.code, 1) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("moxi: error:"), std::string::npos) << r.err;
  for (const auto& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
}

}  // namespace moxi::testing
