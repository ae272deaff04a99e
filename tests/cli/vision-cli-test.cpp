// Images through `moxi generate --image` and `moxi chat --image` / `/image` on a random tiny checkpoint with a
// vision tower (configs/tiny-seed.json via moxi init): generate puts an image in front of a prompt without a
// placeholder exactly as if the prompt had Kimi-VL's image text there; a chat turn's prompt is the template's
// rendering of the image parts; a conversation with two images gives the same replies whether turns reuse the
// cache or prefill everything again (each placeholder finds its image's rows either way); models without a
// vision encoder and broken files are clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/chat-turns.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"

namespace {

using moxi::testing::run_moxi;

using moxi::testing::chat_turns;

class VisionCli : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override {
    const auto r = run_moxi("init --config " + std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json --out " +
                                path("m") + " --seed 9",
                            "", dir_);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    // Two noise PNGs (Pillow): 56 x 84 -> 4 x 6 patches -> 6 image tokens; 28 x 28 -> 1 token.
    const auto py = moxi::testing::run_shell(
        "/usr/bin/python3 -c \"import random; from PIL import Image\n"
        "for name, w, h, seed in (('a', 56, 84, 1), ('b', 28, 28, 2)):\n"
        "  random.seed(seed); im = Image.new('RGB', (w, h))\n"
        "  im.putdata([tuple(random.randrange(256) for _ in range(3)) for _ in range(w * h)])\n"
        "  im.save('" + dir_ + "/' + name + '.png')\" 2>&1");
    ASSERT_EQ(py.code, 0) << py.out;
  }
  moxi::testing::command_result run(const std::string& args, const std::string& input = "") {
    return run_moxi(args, input, dir_);
  }
};

TEST_F(VisionCli, GenerateWithoutAPlaceholderPutsTheImageInFront) {
  const std::string common = "generate -m " + path("m") + " --image " + path("a.png") + " --max-tokens 8 --raw ";
  const auto front = run(common + "--prompt 'What is it?'");
  const auto placed =
      run(common + "--prompt '<|media_start|>image<|media_content|><|media_pad|><|media_end|>What is it?'");
  ASSERT_EQ(front.code, 0) << front.err;
  ASSERT_EQ(placed.code, 0) << placed.err;
  EXPECT_EQ(front.out, placed.out);
  // The image text's one <|media_pad|> became the image's 6 placeholder tokens.
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(path("m") + "/tokenizer.json");
  const size_t text = tok.encode("<|media_start|>image<|media_content|><|media_pad|><|media_end|>What is it?").size();
  EXPECT_NE(front.err.find("prompt: " + std::to_string(text - 1 + 6) + " tokens"), std::string::npos) << front.err;
}

TEST_F(VisionCli, ChatRendersImagePartsAndReusesTheCacheWithTheSameReplies) {
  const std::string input = "what is in the picture?\n/image " + path("b.png") + "\nand this one?\n";
  const std::string args = "chat -m " + path("m") + " --image " + path("a.png") + " --max-tokens 6 --show-prompt";
  const auto reuse = run(args, input);
  ASSERT_EQ(reuse.code, 0) << reuse.err;
  const auto t = chat_turns(reuse.err);
  ASSERT_EQ(t.size(), 2u) << reuse.err;
  const auto tpl = moxi::formats::chat_template::from_tokenizer_config(path("m") + "/tokenizer_config.json");
  auto parts = [](int images, const std::string& text) {
    nlohmann::ordered_json p = nlohmann::ordered_json::array();
    for (int i = 0; i < images; ++i) p.push_back({{"type", "image"}});
    p.push_back({{"type", "text"}, {"text", text}});
    return p;
  };
  nlohmann::ordered_json conv = nlohmann::ordered_json::array();
  conv.push_back({{"role", "user"}, {"content", parts(1, "what is in the picture?")}});
  moxi::formats::render_options ro;
  ro.add_generation_prompt = true;
  EXPECT_EQ(t[0].at("prompt").get<std::string>(), tpl.render(conv, ro));
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(path("m") + "/tokenizer.json");
  // The template writes one placeholder per image; it becomes the image's 6 tokens.
  EXPECT_EQ(t[0].at("prompt_tokens").get<size_t>(), tok.encode(tpl.render(conv, ro)).size() + 5);
  conv.push_back({{"role", "assistant"}, {"content", t[0].at("reply")}});
  conv.push_back({{"role", "user"}, {"content", parts(1, "and this one?")}});
  EXPECT_EQ(t[1].at("prompt").get<std::string>(), tpl.render(conv, ro));
  EXPECT_GT(t[1].at("reused_tokens").get<size_t>(), 0u);

  const auto fresh = run(args + " --no-cache-reuse", input);
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  const auto f = chat_turns(fresh.err);
  ASSERT_EQ(f.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(f[i].at("reply"), t[i].at("reply")) << "turn " << i + 1;
}

TEST_F(VisionCli, ImagesForATextModelAndBrokenFilesAreClearErrors) {
  const std::string tiny = std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";
  const auto text_only = run("generate -m " + tiny + " --image " + path("a.png") + " --prompt hi");
  EXPECT_EQ(text_only.code, 1);
  EXPECT_NE(text_only.err.find("no vision encoder"), std::string::npos) << text_only.err;
  std::ofstream(path("bad.png")) << "\x89PNG\r\n\x1a\nnot really";
  const auto broken = run("generate -m " + path("m") + " --image " + path("bad.png") + " --prompt hi");
  EXPECT_EQ(broken.code, 1);
  EXPECT_NE(broken.err.find("bad.png"), std::string::npos) << broken.err;
  // In chat a bad /image is reported and the chat goes on.
  const auto chat = run("chat -m " + path("m") + " --max-tokens 2", "/image " + path("bad.png") + "\nhello\n");
  EXPECT_EQ(chat.code, 0) << chat.err;
  EXPECT_NE(chat.err.find("bad.png"), std::string::npos) << chat.err;
}

}  // namespace

namespace {

// `moxi bench vision` on the tiny config: it runs, and its FLOP count is the encoder's, counted here from
// the config (tiny-seed: width 64, FFN 128, 2 blocks, patch 14, 2 x 2 merge, text width 128).
TEST_F(VisionCli, BenchVisionReportsTheEncodersWork) {
  const auto r = run("bench vision --config " + std::string(MOXI_SOURCE_DIR) +
                     "/configs/tiny-seed.json --sizes 56,112 --ref-size 28 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["sizes"].size(), 2u);
  const double d = 64, I = 128, blocks = 2, P = 14 * 14 * 3, text = 128;
  for (const auto& [i, side] : {std::pair{0, 56}, {1, 112}}) {
    const auto& s = j["sizes"][size_t(i)];
    const double L = (side / 14) * (side / 14), N = L / 4;
    EXPECT_EQ(s["tokens"], int64_t(N));
    const double flop = 2 * (L * P * d + blocks * (L * (4 * d * d + 2 * d * I) + 2 * L * L * d) +
                             N * (4 * d * 4 * d + 4 * d * text));
    EXPECT_NEAR(s["gflop"].get<double>(), flop / 1e9, 1e-12);
    EXPECT_GT(s["images_per_s"].get<double>(), 0);
  }
  EXPECT_GT(j["reference"]["speedup_vs_ref"].get<double>(), 0);
  EXPECT_EQ(j["tower_params"].get<int64_t>() + j["projector_params"].get<int64_t>() > 0, true);
}

}  // namespace
