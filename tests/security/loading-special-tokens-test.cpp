// Issue 14 C4 through the moxi binary and the server: a special token id outside the vocabulary
// (bos_token_id, eos/pad, generation_config.json's ids, tokenizer.json's special tokens) is refused when
// the model loads, naming the file and the field, instead of being accepted and failing a request later
// (an empty prompt starts from BOS, which returned 500).
#include <gtest/gtest.h>

#include <string>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/serve/server.h"
#include "security/loading-util.h"

namespace moxi {
namespace {

using json = nlohmann::json;
using moxi::testing::edit_json;
using moxi::testing::expect_clean_error;
using moxi::testing::run_moxi_bounded;

class loading_special_tokens_test : public moxi::testing::temp_dir_test {
 protected:
  // Every loading path refuses the directory with these needles in the message.
  void expect_refused(const std::string& model, std::initializer_list<std::string> needles) {
    for (const std::string& cmd : {"generate --model " + model + " --prompt ''", "inspect " + model,
                                   "serve --model " + model + " --port 0"}) {
      SCOPED_TRACE(cmd);
      expect_clean_error(run_moxi_bounded(cmd, dir_), needles);
    }
    serve::server_config c;
    c.model_dir = model;
    c.port = 0;
    try {
      serve::server s(c);
      ADD_FAILURE() << "the server loaded " << model;
    } catch (const moxi::error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
};

TEST_F(loading_special_tokens_test, TheBundledModelGeneratesFromAnEmptyPrompt) {
  // The control: with valid ids an empty prompt starts from BOS and generates.
  const std::string model = moxi::testing::tiny_model_copy(dir_, "ok");
  const auto r = run_moxi_bounded("generate --model " + model + " --prompt '' --max-tokens 3 --seed 1", dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("generation:"), std::string::npos) << r.err;
}

TEST_F(loading_special_tokens_test, ConfigIdsOutsideTheVocabulary) {
  int i = 0;
  for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    for (const json& v : {json(1024), json(-1), json(int64_t(1) << 40)}) {
      SCOPED_TRACE(std::string(field) + " = " + v.dump());
      const std::string model = moxi::testing::tiny_model_copy(dir_, "c" + std::to_string(i++));
      edit_json(model + "/config.json", [&](json& d) { d[field] = v; });
      expect_refused(model,
                     {model + "/config.json", std::string("'") + field + "'", "outside the vocabulary"});
    }
  }
}

TEST_F(loading_special_tokens_test, GenerationConfigIdsOutsideTheVocabulary) {
  int i = 0;
  for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    SCOPED_TRACE(field);
    const std::string model = moxi::testing::tiny_model_copy(dir_, "g" + std::to_string(i++));
    edit_json(model + "/generation_config.json", [&](json& d) { d[field] = json::array({2, 4096}); });
    expect_refused(model, {model + "/generation_config.json", std::string("'") + field + "'", "4096"});
  }
}

TEST_F(loading_special_tokens_test, TokenizerSpecialsOutsideTheVocabulary) {
  const std::string model = moxi::testing::tiny_model_copy(dir_, "t");
  // Move the end-of-turn chat special past the model's 1024 ids.
  edit_json(model + "/tokenizer.json", [](json& t) {
    for (auto& a : t["added_tokens"])
      if (a["content"] == "<|end|>") a["id"] = 5000;
  });
  expect_refused(model, {model + "/tokenizer.json", "<|end|>", "5000", "outside the vocabulary"});

  const std::string model2 = moxi::testing::tiny_model_copy(dir_, "t2");
  edit_json(model2 + "/tokenizer_config.json", [](json& t) {
    t["added_tokens_decoder"]["1024"] = {{"content", "<|x|>"}, {"special", true}};
  });
  expect_refused(model2, {model2 + "/tokenizer_config.json", "added_tokens_decoder", "1024"});
}

}  // namespace
}  // namespace moxi
