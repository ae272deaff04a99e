// Images through the OpenAI API (docs/vision.md "Serving"): image_url parts with data: URLs on a tiny random
// checkpoint with a vision tower (configs/tiny-seed.json). The served greedy tokens equal an independent
// path (the model's contiguous-cache forward with the image rows placed at the expanded placeholders, no
// scheduler, paging, chunking or prefix cache) while prefill runs in chunks of 8 tokens that split an image;
// the same image reuses the prefix cache and a different one does not; usage counts the image tokens; bad
// URLs, bad data, too many images and images for a text-only model are 400s; remote URLs are fetched only
// from allowed hosts.
#include <gtest/gtest.h>

#include <httplib.h>

#include <fstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/base/base64.h"
#include "moxi/formats/chat-template.h"
#include "moxi/image/image.h"
#include "moxi/model/model.h"
#include "moxi/runtime/multimodal.h"
#include "moxi/runtime/sampler.h"
#include "serve/http-test-util.h"

namespace moxi::serve {
namespace {

using namespace moxi::serve::testing;

std::string base64(const std::string& in) {
  return moxi::base64_encode(in);  // RFC 4648 (tests/base/base64-test.cpp)
}

class vision_serve : public moxi::testing::temp_dir_test {
 protected:
  static void SetUpTestSuite() {
    auto c = tiny_config();
    c.max_batch_tokens = 8;  // prefill in chunks that split an image's placeholders
    c.max_images_per_request = 2;
    srv_ = start_server(c).release();
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  // A PNG of w x h noise (seeded), written by Pillow (the tests' reference encoder).
  std::string png(int w, int h, int seed) {
    const std::string path = dir_ + "/img-" + std::to_string(w) + "x" + std::to_string(h) + "-" +
                             std::to_string(seed) + ".png";
    const auto r = moxi::testing::run_shell(
        "/usr/bin/python3 -c \"import random; from PIL import Image; random.seed(" + std::to_string(seed) +
        "); im = Image.new('RGB', (" + std::to_string(w) + ", " + std::to_string(h) +
        ")); im.putdata([tuple(random.randrange(256) for _ in range(3)) for _ in range(" + std::to_string(w * h) +
        ")]); im.save('" + path + "')\"");
    EXPECT_EQ(r.code, 0) << r.out;
    return moxi::testing::read_file(path);
  }
  static json chat_body(const std::vector<std::string>& images, const std::string& text) {
    json parts = json::array();
    for (const auto& im : images)
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64(im)}}}});
    parts.push_back({{"type", "text"}, {"text", text}});
    return {{"messages", {{{"role", "user"}, {"content", parts}}}},
            {"max_tokens", 6},
            {"temperature", 0},
            {"logprobs", true},
            {"return_tokens_as_token_ids", true}};
  }
  static json_reply post_chat(const json& body) {
    auto c = client_for(*srv_);
    return post(*c, "/v1/chat/completions", body);
  }
  static server* srv_;
};
server* vision_serve::srv_ = nullptr;

std::vector<int64_t> served_ids(const json& choice) {
  std::vector<int64_t> v;
  for (const auto& t : choice["logprobs"]["content"]) v.push_back(std::stoll(t["token"].get<std::string>().substr(9)));
  return v;
}

// The independent path: template -> tokens -> placeholders expanded -> one contiguous-cache forward with
// the image rows, then greedy decode token by token.
std::vector<int64_t> reference(const std::vector<std::string>& pngs, const std::string& text, int64_t n,
                               int64_t* image_tokens = nullptr, std::vector<token_id>* prompt_out = nullptr) {
  static const auto m = model::model::load(tiny_model_dir());
  static const auto tok = formats::tokenizer::from_hf_json_file(tiny_model_dir() + "/tokenizer.json");
  static const auto tpl = formats::load_chat_template(tiny_model_dir());
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  std::vector<runtime::prompt_image> ims;
  for (const auto& p : pngs) {
    parts.push_back({{"type", "image"}});
    ims.push_back(runtime::prepare_image(
        m, image::decode(std::span(reinterpret_cast<const uint8_t*>(p.data()), p.size()))));
  }
  parts.push_back({{"type", "text"}, {"text", text}});
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", parts}});
  formats::render_options ro;
  ro.add_generation_prompt = true;
  auto prompt = runtime::expand_image_placeholders(tok.encode(tpl->render(msgs, ro)),
                                                   token_id(*m.config().media_placeholder_token_id), ims);
  if (prompt_out) *prompt_out = prompt;
  if (image_tokens) {
    *image_tokens = 0;
    for (const auto& im : ims) *image_tokens += im.tokens;
  }
  const auto media = runtime::encode_images(m, ims);
  auto cache = m.new_cache();
  model::forward_options o;
  o.last_only = true;
  o.media = media;
  auto logits = m.forward(prompt, *cache, o);
  runtime::sampling_params sp;
  sp.temperature = 0;
  runtime::sampler smp(sp, prompt);
  std::vector<int64_t> out;
  const token_id eos = token_id(*m.config().eos_token_id);
  for (int64_t i = 0; i < n; ++i) {
    const token_id t = smp.sample(logits);
    smp.accept(t);
    out.push_back(t);
    if (t == eos) break;
    model::forward_options d;
    d.last_only = true;
    const token_id next[1] = {t};
    logits = m.forward(next, *cache, d);
  }
  return out;
}

TEST_F(vision_serve, ImagesGiveTheTokensOfTheDirectForwardAndUsageCountsThem) {
  const auto a = png(56, 84, 1);   // 4 x 6 patches -> 6 image tokens
  const auto b = png(100, 30, 2);  // center-cropped to 84 x 28 -> 6 x 2 patches -> 3 image tokens
  for (const auto& images : {std::vector<std::string>{a}, std::vector<std::string>{a, b}}) {
    int64_t image_tokens = 0;
    const auto want = reference(images, "What is in the picture?", 6, &image_tokens);
    const auto r = post_chat(chat_body(images, "What is in the picture?"));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(served_ids(r.body["choices"][0]), want) << images.size() << " image(s)";
    EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["image_tokens"], image_tokens);
  }
}

TEST_F(vision_serve, OnlyTheSameImageReusesTheCachedPrefix) {
  const auto a = png(112, 112, 3), b = png(112, 112, 4);  // 8 x 8 patches -> 16 tokens each
  const std::string text = "Describe it in detail, please.";
  const auto first = post_chat(chat_body({a}, text));
  const auto again = post_chat(chat_body({a}, text));
  const auto other = post_chat(chat_body({b}, text));
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(again.status, 200);
  ASSERT_EQ(other.status, 200);
  const int64_t prompt = first.body["usage"]["prompt_tokens"];
  const int64_t hit = again.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  const int64_t other_hit = other.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  std::vector<token_id> tokens;
  EXPECT_EQ(served_ids(other.body["choices"][0]), reference({b}, text, 6, nullptr, &tokens));
  ASSERT_EQ(int64_t(tokens.size()), prompt);
  const auto pad = std::find(tokens.begin(), tokens.end(), token_id(507));  // tiny-seed's <|media_pad|>
  ASSERT_NE(pad, tokens.end());
  const int64_t before_image = 16 * ((pad - tokens.begin()) / 16);  // whole blocks before the image
  EXPECT_GE(hit, 16 * ((prompt - 1) / 16) - 16) << "the same image: most of the prompt is reused";
  EXPECT_GT(hit, before_image + 16) << "the same image: blocks holding it are reused";
  EXPECT_LE(other_hit, before_image) << "a different image shares only the blocks before it";
  EXPECT_EQ(served_ids(again.body["choices"][0]), served_ids(first.body["choices"][0]));
}

TEST_F(vision_serve, BadImagePartsAre400sAndTheServerKeepsServing) {
  auto with_url = [](const std::string& url) {
    return json{{"messages",
                 {{{"role", "user"},
                   {"content", {{{"type", "image_url"}, {"image_url", {{"url", url}}}}, {{"type", "text"}, {"text", "hi"}}}}}}},
                {"max_tokens", 2}};
  };
  auto expect_400 = [](const json_reply& r, const std::string& needle) {
    EXPECT_EQ(r.status, 400) << r.body.dump();
    EXPECT_NE(r.body.dump().find(needle), std::string::npos) << r.body.dump();
  };
  expect_400(post_chat(with_url("https://example.com/cat.png")), "only data: URLs");
  expect_400(post_chat(with_url("data:image/png;base64,@@@@")), "invalid base64");
  expect_400(post_chat(with_url("data:image/png,rawbytes")), "base64");
  expect_400(post_chat(with_url("data:image/png;base64," + base64("GIF89a not a png"))), "image 1");
  const auto png_bytes = png(28, 28, 5);
  expect_400(post_chat(with_url("data:image/png;base64," + base64(png_bytes.substr(0, png_bytes.size() / 2)))),
             "image 1");
  expect_400(post_chat(chat_body({png_bytes, png_bytes, png_bytes}, "three")), "limit is 2");
  EXPECT_EQ(post_chat(chat_body({png_bytes}, "still serving")).status, 200);
}

// Remote image URLs: fetched only from hosts given in allowed_media_domains (--allowed-media-domains), with
// the image limits; a local HTTP server plays the remote host.
TEST(vision_serve_remote, OnlyAllowedHostsAreFetched) {
  moxi::testing::temp_dir dir("moxi-vision-remote");
  const std::string path = dir / "pic.png";
  const auto r = moxi::testing::run_shell(
      "/usr/bin/python3 -c \"from PIL import Image; Image.new('RGB', (56, 56), (200, 30, 30)).save('" + path +
      "')\" 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string png = moxi::testing::read_file(path);
  httplib::Server host;
  host.Get("/pic.png", [&](const httplib::Request&, httplib::Response& res) { res.set_content(png, "image/png"); });
  host.Get("/moved", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/pic.png"); });
  host.Get("/big", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(17u << 20, 'x'), "image/png");
  });
  const int port = host.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { host.listen_after_bind(); });
  auto cfg = tiny_config();
  cfg.allowed_media_domains = {"127.0.0.1"};
  auto srv = start_server(cfg);
  auto c = client_for(*srv);
  auto body = [](const std::string& url) {
    return json{{"messages",
                 {{{"role", "user"},
                   {"content", {{{"type", "image_url"}, {"image_url", {{"url", url}}}}, {{"type", "text"}, {"text", "hi"}}}}}}},
                {"max_tokens", 2}};
  };
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const auto ok = post(*c, "/v1/chat/completions", body(base + "/pic.png"));
  EXPECT_EQ(ok.status, 200) << ok.body.dump();
  EXPECT_EQ(ok.body["usage"]["prompt_tokens_details"]["image_tokens"], 4);  // 4 x 4 patches
  auto expect_400 = [&](const std::string& url, const std::string& needle) {
    const auto res = post(*c, "/v1/chat/completions", body(url));
    EXPECT_EQ(res.status, 400) << url;
    EXPECT_NE(res.body.dump().find(needle), std::string::npos) << res.body.dump();
  };
  expect_400("http://localhost:" + std::to_string(port) + "/pic.png", "not in --allowed-media-domains");
  expect_400("http://user@127.0.0.1:" + std::to_string(port) + "/pic.png", "no plain host");
  expect_400(base + "/moved", "HTTP 302");
  expect_400(base + "/missing.png", "HTTP 404");
  expect_400(base + "/big", "over 16777216 bytes");
  host.stop();
  serving.join();
}

TEST(vision_serve_text_only, ImagesForATextOnlyModelAre400) {
  auto srv = start_server(bundled_config());  // moxi-tiny: no vision_config
  auto c = client_for(*srv);
  const json body = {{"messages",
                      {{{"role", "user"},
                        {"content",
                         {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,iVBORw0KGgo="}}}}}}}}},
                     {"max_tokens", 2}};
  const auto r = post(*c, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.dump().find("no vision encoder"), std::string::npos) << r.body.dump();
}

}  // namespace
}  // namespace moxi::serve
