// Test scaffolding for forward-pass tests: a random `moxi init` checkpoint of a bundled config and random
// token ids.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"

namespace moxi::testing {

// Writes a random checkpoint of configs/<config_name> (BF16 floats; MXFP4 experts when the config says so)
// to dir/<config_name>.ckpt and returns its path.
inline std::string init_test_checkpoint(const std::string& dir, const std::string& config_name,
                                        uint64_t seed) {
  const std::string out = dir + "/" + config_name + ".ckpt";
  model::init_options o;
  o.seed = seed;
  o.show_progress = false;
  model::init_checkpoint(model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/" + config_name),
                         out, o);
  return out;
}

// n token ids in [0, vocab), a pure function of seed.
inline std::vector<token_id> random_token_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<token_id> t(static_cast<size_t>(n));
  for (auto& x : t) x = token_id(rng() % uint64_t(vocab));
  return t;
}

}  // namespace moxi::testing
