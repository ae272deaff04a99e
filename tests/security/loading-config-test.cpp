// Issue 14 C2 and C3 through the moxi binary: a config.json with absurd sizes (the probe's
// num_nextn_predict_layers 1000000 made `moxi inspect` grow to ~7 GB, num_experts 1e6 ran past 30 s,
// max_position_embeddings 2^62 / 2^35 / 2^31 reached the server) fails in every tool with the same
// clear error naming the field, inside bounded memory (4 GiB address space) and CPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/temp-dir.h"
#include "security/loading-util.h"

namespace moxi {
namespace {

using json = nlohmann::json;
using moxi::testing::expect_clean_error;
using moxi::testing::run_moxi_bounded;

struct probe {
  std::string field;  // dotted path into config.json
  json value;
};

void set_path(json& doc, const std::string& path, const json& v) {
  json* cur = &doc;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    cur = &(*cur)[path.substr(start, dot - start)];
  (*cur)[path.substr(start)] = v;
}

const std::vector<probe>& probes() {
  static const std::vector<probe> p = {
      {"num_nextn_predict_layers", 1000000},
      {"num_experts", 1e6},
      {"max_position_embeddings", int64_t(1) << 62},
      {"max_position_embeddings", int64_t(1) << 35},
      {"max_position_embeddings", int64_t(1) << 31},
      {"num_hidden_layers", 1000000000},
      {"vocab_size", int64_t(1) << 40},
      {"hidden_size", int64_t(1) << 33},
      {"intermediate_size", 1e12},
      {"moe_intermediate_size", int64_t(1) << 40},
      {"linear_attn_config.num_heads", 10000000},
      {"linear_attn_config.short_conv_kernel_size", int64_t(1) << 40},
      {"kv_lora_rank", int64_t(1) << 50},
      {"index_topk", int64_t(1) << 60},
  };
  return p;
}

class loading_config_test : public moxi::testing::temp_dir_test {};

TEST_F(loading_config_test, EveryToolRejectsAbsurdSizesNamingTheField) {
  int i = 0;
  for (const auto& p : probes()) {
    SCOPED_TRACE(p.field + " = " + p.value.dump());
    const std::string model = moxi::testing::tiny_model_copy(dir_, "m" + std::to_string(i++));
    moxi::testing::edit_json(model + "/config.json", [&](json& d) { set_path(d, p.field, p.value); });
    const std::string needle = "field '" + p.field + "'";
    const std::vector<std::string> commands = {
        "inspect " + model,
        "plan --config " + model + "/config.json",
        "generate --model " + model + " --prompt hi --max-tokens 1",
        "serve --model " + model + " --port 0",
    };
    for (const auto& cmd : commands) {
      SCOPED_TRACE(cmd);
      expect_clean_error(run_moxi_bounded(cmd, dir_), {model + "/config.json", needle, "plausibility limit"});
    }
    // chat reads the conversation from stdin.
    expect_clean_error(run_moxi_bounded("chat --model " + model, dir_, "hello\n"),
                       {needle, "plausibility limit"});
  }
}

}  // namespace
}  // namespace moxi
