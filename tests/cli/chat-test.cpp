// `moxi chat` driven through a pipe on a random tiny checkpoint with moxi-tiny's template (moxi init writes
// it): every turn's prompt is the template's rendering of the whole history (rendered here from the
// checkpoint's tokenizer_config.json), turns after the first reuse the sequence cache, and the replies equal
// those of a chat that prefills the whole conversation every turn; /reset, /exit, EOF and the default model.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/chat-turns.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"

namespace {

using result = moxi::testing::command_result;

// Runs `moxi args` with `input` on stdin; stdout and stderr apart.
result run(const std::string& args, const std::string& input, const std::string& dir,
           const std::string& env = "") {
  return moxi::testing::run_moxi(args, input, dir, env);
}

using moxi::testing::chat_turns;

class Chat : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override {
    const auto r = run("init --config " + std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json --out " +
                           path("m") + " --seed 4",
                       "", dir_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  std::string render(const nlohmann::ordered_json& messages, bool generation_prompt = true) const {
    const auto tpl =
        moxi::formats::chat_template::from_tokenizer_config(path("m") + "/tokenizer_config.json");
    moxi::formats::render_options o;
    o.add_generation_prompt = generation_prompt;
    return tpl.render(messages, o);
  }
  static nlohmann::ordered_json msg(const char* role, const std::string& content) {
    return {{"role", role}, {"content", content}};
  }
};

TEST_F(Chat, EachTurnSeesTheWholeHistoryAndCacheReuseChangesNoReply) {
  const std::string input = "count the lines in notes.txt\nand the words?\n/reset\nhello\n";
  const auto reuse = run("chat --model " + path("m") + " --max-tokens 12 --show-prompt", input, dir_);
  ASSERT_EQ(reuse.code, 0) << reuse.err;
  const auto t = chat_turns(reuse.err);
  ASSERT_EQ(t.size(), 3u) << reuse.err;

  const std::string r1 = t[0].at("reply");
  auto conv = nlohmann::ordered_json::array({msg("user", "count the lines in notes.txt")});
  EXPECT_EQ(t[0].at("prompt").get<std::string>(), render(conv));
  EXPECT_EQ(t[0].at("reused_tokens").get<int>(), 0);
  conv.push_back(msg("assistant", r1));
  conv.push_back(msg("user", "and the words?"));
  EXPECT_EQ(t[1].at("prompt").get<std::string>(), render(conv));
  // After /reset the conversation starts again.
  EXPECT_EQ(t[2].at("prompt").get<std::string>(),
            render(nlohmann::ordered_json::array({msg("user", "hello")})));
  EXPECT_EQ(t[2].at("reused_tokens").get<int>(), 0);

  // Turn 2 reuses at least the first turn's history (what the template renders before the generation prompt).
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(path("m") + "/tokenizer.json");
  const auto first_history =
      tok.encode(render(nlohmann::ordered_json::array({msg("user", "count the lines in notes.txt")}), false));
  EXPECT_GE(t[1].at("reused_tokens").get<size_t>(), first_history.size());
  EXPECT_EQ(t[1].at("reused_tokens").get<size_t>() + t[1].at("prefilled_tokens").get<size_t>(),
            t[1].at("prompt_tokens").get<size_t>());
  EXPECT_EQ(t[1].at("prompt_tokens").get<size_t>(), tok.encode(t[1].at("prompt").get<std::string>()).size());

  // The same conversation prefilled from scratch every turn gives the same greedy replies.
  const auto fresh =
      run("chat --model " + path("m") + " --max-tokens 12 --show-prompt --no-cache-reuse", input, dir_);
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  const auto f = chat_turns(fresh.err);
  ASSERT_EQ(f.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f[i].at("reply"), t[i].at("reply")) << "turn " << i + 1;
    EXPECT_EQ(f[i].at("prompt"), t[i].at("prompt")) << "turn " << i + 1;
    EXPECT_EQ(f[i].at("reused_tokens").get<int>(), 0);
  }
  EXPECT_EQ(fresh.out, reuse.out);
  EXPECT_NE(reuse.err.find("tokens/s"), std::string::npos) << reuse.err;
}

TEST_F(Chat, SystemMessageExitAndEof) {
  auto r = run("chat --model " + path("m") + " --max-tokens 4 --show-prompt --system 'Be brief.'",
               "first\n/exit\nnever read\n", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  auto t = chat_turns(r.err);
  ASSERT_EQ(t.size(), 1u) << r.err;
  EXPECT_EQ(t[0].at("prompt").get<std::string>(),
            render(nlohmann::ordered_json::array({msg("system", "Be brief."), msg("user", "first")})));

  // EOF without a trailing newline still sends the last line; blank lines are skipped; unknown commands
  // are reported, not sent.
  r = run("chat --model " + path("m") + " --max-tokens 4 --show-prompt", "\n/frobnicate\nlast line", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  t = chat_turns(r.err);
  ASSERT_EQ(t.size(), 1u) << r.err;
  EXPECT_EQ(t[0].at("prompt").get<std::string>(),
            render(nlohmann::ordered_json::array({msg("user", "last line")})));
  EXPECT_NE(r.err.find("unknown command /frobnicate"), std::string::npos) << r.err;
}

TEST_F(Chat, RepliesStayInsideTheModelsContext) {
  // The same tiny config with a 40-token context.
  std::stringstream ss;
  ss << std::ifstream(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json").rdbuf();
  auto config = nlohmann::json::parse(ss.str());
  config["max_position_embeddings"] = 40;
  std::ofstream(path("short.json")) << config.dump();
  auto r = run("init --config " + path("short.json") + " --out " + path("short") + " --seed 4", "", dir_);
  ASSERT_EQ(r.code, 0) << r.err;

  const std::string long_line(60, 'x');
  r = run("chat --model " + path("short") + " --max-tokens 100 --show-prompt", long_line + "\nhi\n", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the model's context is 40: /reset"), std::string::npos) << r.err;
  const auto t = chat_turns(r.err);
  ASSERT_EQ(t.size(), 1u) << "the long line is dropped from the conversation, 'hi' is answered";
  EXPECT_EQ(t[0].at("prompt").get<std::string>(), render(nlohmann::ordered_json::array({msg("user", "hi")})));
  // The reply ran to the end of the context (this checkpoint does not emit a stop token before it).
  EXPECT_EQ(t[0].at("finish_reason"), "length");
  EXPECT_EQ(t[0].at("prompt_tokens").get<int>() + t[0].at("reply_tokens").get<int>(), 40);
}

// moxi-small's template: a past reply renders exactly as the generation prompt followed by what the model
// generated and its end marker, so the rendered history of turn n is a prefix of turn n+1's prompt, and
// `moxi chat` prefills only what follows the previous reply (the end marker and the new user turn).
TEST_F(Chat, MoxiSmallTemplateSecondTurnPrefillsOnlyTheNewMessage) {
  {
    std::ifstream in(path("m") + "/tokenizer_config.json");
    auto cfg = nlohmann::json::parse(in);
    std::stringstream t;
    t << std::ifstream(std::string(MOXI_SOURCE_DIR) + "/configs/chat-templates/moxi-small.jinja").rdbuf();
    cfg["chat_template"] = t.str();
    std::ofstream(path("m") + "/tokenizer_config.json") << cfg.dump();
  }
  // The template alone, on conversations with a system turn and several exchanges. The expected text of
  // the first one is written out by hand.
  auto conv =
      nlohmann::ordered_json::array({msg("system", "Be brief."), msg("user", "count lines in a.txt")});
  EXPECT_EQ(render(conv),
            "<|bos|><|system|>Be brief.<|end|>\n<|user|>count lines in a.txt<|end|>\n<|assistant|>");
  for (const std::string reply : {"wc -l a.txt", "Hello! I run shell commands.", "x"}) {
    const std::string prompt = render(conv);
    auto next = conv;
    next.push_back(msg("assistant", reply));
    const std::string history = render(next, false);
    EXPECT_EQ(history, prompt + reply + "<|end|>\n") << "a past reply is the generation prompt + the reply";
    next.push_back(msg("user", "and the words?"));
    EXPECT_EQ(render(next).substr(0, history.size()), history) << "turn n's history prefixes turn n+1";
    conv = next;
  }

  const std::string input = "count the lines in notes.txt\nand the words?\n";
  const auto r = run("chat --model " + path("m") + " --max-tokens 3 --show-prompt", input, dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto t = chat_turns(r.err);
  ASSERT_EQ(t.size(), 2u) << r.err;
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(path("m") + "/tokenizer.json");
  const std::string first = t[0].at("prompt").get<std::string>() + t[0].at("reply").get<std::string>();
  const std::string second = t[1].at("prompt").get<std::string>();
  ASSERT_EQ(second.substr(0, first.size()), first);
  // What is prefilled is the text after the first prompt and reply, plus at most the reply's last token:
  // a reply cut by the length limit ends with a token that was sampled but never fed (a stopped reply's
  // last token is the end marker, part of that text).
  const size_t suffix = tok.encode(second.substr(first.size())).size();
  const size_t cut = t[0].at("finish_reason") == "length" ? 1 : 0;
  EXPECT_GE(t[1].at("prefilled_tokens").get<size_t>(), suffix) << r.err;
  EXPECT_LE(t[1].at("prefilled_tokens").get<size_t>(), suffix + cut) << r.err;
  EXPECT_EQ(t[1].at("reused_tokens").get<size_t>() + t[1].at("prefilled_tokens").get<size_t>(),
            tok.encode(second).size());
}

TEST_F(Chat, MissingDefaultModelIsAClearError) {
  for (const char* sub : {"chat", "generate --prompt hi"}) {
    const auto r = run(sub, "hi\n", dir_, "MOXI_MODEL=" + path("nowhere"));
    EXPECT_EQ(r.code, 1) << sub;
    EXPECT_NE(r.err.find("no model at " + path("nowhere")), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  }
  // A model directory without a chat template cannot chat.
  std::remove((path("m") + "/tokenizer_config.json").c_str());
  const auto r = run("chat --model " + path("m"), "hi\n", dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
}

}  // namespace
