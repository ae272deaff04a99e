// validate_model_dir (issue 14 C4): every token id a model directory's tokenizer.json, generation_config.json
// and tokenizer_config.json can hand out must be inside config.json's vocabulary; each violation is a
// moxi::error naming the file, the field and the id. Starts from moxi-tiny's real files, edited.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/model-config-validate.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"

namespace moxi::formats {
namespace {

// Configs are read as every tool reads them: the common fields here, the model type's through the registry.
using model::load_model_config;
using model::parse_model_config;

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kTiny = std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";

class model_dir_validate_test : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override {
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      fs::copy_file(kTiny + "/" + f, path(f));
  }
  json read(const std::string& f) { return json::parse(std::ifstream(path(f))); }
  void write(const std::string& f, const json& j) { std::ofstream(path(f), std::ios::trunc) << j.dump(1); }
  void edit(const std::string& f, const std::function<void(json&)>& fn) {
    json j = read(f);
    fn(j);
    write(f, j);
  }
  // The moxi::error message of validating the directory, "" when it passes.
  std::string error_of() {
    try {
      validate_model_dir(load_model_config(dir_), dir_);
    } catch (const moxi::error& e) {
      return e.what();
    }
    return "";
  }
  void expect_error(std::initializer_list<std::string> needles) {
    const std::string msg = error_of();
    ASSERT_FALSE(msg.empty()) << "accepted";
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
};

TEST_F(model_dir_validate_test, MoxiTinyPasses) {
  EXPECT_EQ(error_of(), "");
  EXPECT_NO_THROW(validate_model_dir(load_model_config(kTiny), kTiny));
}

TEST_F(model_dir_validate_test, GenerationConfigIds) {
  const int64_t V = load_model_config(dir_).vocab_size;
  for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}) {
    for (const json& v : {json(V), json(-1), json::array({2, V + 7}), json(int64_t(1) << 40)}) {
      SCOPED_TRACE(std::string(field) + " = " + v.dump());
      fs::copy_file(kTiny + "/generation_config.json", path("generation_config.json"),
                    fs::copy_options::overwrite_existing);
      edit("generation_config.json", [&](json& j) { j[field] = v; });
      expect_error(
          {path("generation_config.json"), std::string("'") + field + "'", "outside the vocabulary"});
    }
  }
}

TEST_F(model_dir_validate_test, TokenizerIds) {
  const int64_t V = load_model_config(dir_).vocab_size;
  const json original = read("tokenizer.json");
  json t = original;
  t["added_tokens"].push_back({{"id", V},
                               {"content", "<|extra|>"},
                               {"special", true},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false},
                               {"normalized", false}});
  write("tokenizer.json", t);
  expect_error({path("tokenizer.json"), "<|extra|>", std::to_string(V), "outside the vocabulary"});

  t = original;
  t["model"]["vocab"]["zzz-new"] = V + 100;
  write("tokenizer.json", t);
  expect_error({path("tokenizer.json"), "zzz-new", std::to_string(V + 100)});

  write("tokenizer.json", original);
  edit("tokenizer_config.json", [&](json& j) {
    j["added_tokens_decoder"][std::to_string(V)] = {{"content", "<|x|>"}, {"special", true}};
  });
  expect_error({path("tokenizer_config.json"), "added_tokens_decoder", std::to_string(V)});
}

TEST_F(model_dir_validate_test, ConfigSpecialIds) {
  // config.json's own ids are checked when it is parsed, before anything else reads the directory.
  edit("config.json", [](json& j) { j["bos_token_id"] = j["vocab_size"]; });
  try {
    load_model_config(dir_);
    FAIL() << "accepted bos_token_id == vocab_size";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("'bos_token_id'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moxi::formats
