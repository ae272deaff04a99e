// Vision tasks (eval/task-generator-vision.cpp, docs/tasks.md "Vision"): each picture decodes to what its
// answer says, read back by an independent pixel analysis here (squares counted as 4-connected components
// of pixels brighter than the background; the colour is the square's pixel value against the palette the
// docs state); test pictures are held out (their own stream, 12-pixel squares for `count`); the JSONL form
// keeps the PNG bytes; the checker takes one word, case and a full stop aside.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/temp-dir.h"
#include "moxi/base/base64.h"
#include "moxi/base/error.h"
#include "moxi/eval/check.h"
#include "moxi/eval/evaluate.h"
#include "moxi/eval/task-generator.h"
#include "moxi/image/image.h"

namespace moxi::eval {
namespace {

image::rgb_image picture(const task& t) {
  EXPECT_EQ(t.images.size(), 1u);
  const auto& png = t.images.at(0);
  return image::decode(std::span(reinterpret_cast<const uint8_t*>(png.data()), png.size()));
}

bool lit(const image::rgb_image& im, int64_t x, int64_t y) {
  const uint8_t* p = im.rgb.data() + (y * im.width + x) * 3;
  return int(p[0]) + p[1] + p[2] > 3 * 60;  // the background is at most 36 per channel
}

// 4-connected components of lit pixels, each with its size in pixels and its bounding box side.
struct blob {
  int64_t pixels = 0, w = 0, h = 0;
  std::array<uint8_t, 3> rgb{};
};
std::vector<blob> blobs(const image::rgb_image& im) {
  std::vector<int> seen(size_t(im.width * im.height), 0);
  std::vector<blob> out;
  for (int64_t y0 = 0; y0 < im.height; ++y0)
    for (int64_t x0 = 0; x0 < im.width; ++x0) {
      if (seen[size_t(y0 * im.width + x0)] || !lit(im, x0, y0)) continue;
      blob b;
      int64_t minx = x0, maxx = x0, miny = y0, maxy = y0;
      std::vector<std::pair<int64_t, int64_t>> stack = {{x0, y0}};
      seen[size_t(y0 * im.width + x0)] = 1;
      const uint8_t* p = im.rgb.data() + (y0 * im.width + x0) * 3;
      b.rgb = {p[0], p[1], p[2]};
      while (!stack.empty()) {
        auto [x, y] = stack.back();
        stack.pop_back();
        ++b.pixels;
        minx = std::min(minx, x), maxx = std::max(maxx, x), miny = std::min(miny, y), maxy = std::max(maxy, y);
        for (auto [dx, dy] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
          const int64_t nx = x + dx, ny = y + dy;
          if (nx < 0 || ny < 0 || nx >= im.width || ny >= im.height) continue;
          if (seen[size_t(ny * im.width + nx)] || !lit(im, nx, ny)) continue;
          seen[size_t(ny * im.width + nx)] = 1;
          stack.emplace_back(nx, ny);
        }
      }
      b.w = maxx - minx + 1;
      b.h = maxy - miny + 1;
      out.push_back(b);
    }
  return out;
}

TEST(VisionTasks, PicturesShowWhatTheAnswersSay) {
  const std::map<std::string, std::array<uint8_t, 3>> palette = {
      {"red", {220, 40, 40}},     {"green", {40, 190, 60}},   {"blue", {50, 90, 230}},
      {"yellow", {230, 210, 40}}, {"white", {240, 240, 240}}, {"purple", {160, 60, 200}}};
  for (const split s : {split::train, split::test}) {
    std::set<std::string> answers_count, answers_colour;
    for (const auto& t : generate_tasks(domain::vision, s, 300, 5)) {
      const auto im = picture(t);
      ASSERT_EQ(im.width, 84);
      ASSERT_EQ(im.height, 84);
      const auto found = blobs(im);
      if (t.template_name == "count") {
        EXPECT_EQ(std::to_string(found.size()), t.answer) << t.id;
        for (const auto& b : found) {
          EXPECT_EQ(b.w, b.h) << t.id;  // squares
          EXPECT_EQ(b.pixels, b.w * b.h) << t.id;
          if (s == split::test) {
            EXPECT_EQ(b.w, 12) << t.id;
          } else {
            EXPECT_TRUE(b.w == 10 || b.w == 14) << t.id;
          }
        }
        answers_count.insert(t.answer);
      } else {
        ASSERT_EQ(t.template_name, "colour");
        ASSERT_EQ(found.size(), 1u) << t.id;
        EXPECT_EQ(found[0].rgb, palette.at(t.answer)) << t.id;
        answers_colour.insert(t.answer);
      }
      EXPECT_EQ(t.reference, t.answer);
    }
    EXPECT_EQ(answers_count.size(), 6u);  // 1..6 all occur
    EXPECT_EQ(answers_colour.size(), palette.size());
  }
}

TEST(VisionTasks, TestPicturesAreNotTrainPictures) {
  std::set<std::string> train;
  for (const auto& t : generate_tasks(domain::vision, split::train, 500, 1)) train.insert(t.images[0]);
  for (const auto& t : generate_tasks(domain::vision, split::test, 500, 1))
    EXPECT_FALSE(train.count(t.images[0])) << t.id;
}

TEST(VisionTasks, JsonlKeepsThePicturesAndTheUserTurnShowsThem) {
  moxi::testing::temp_dir dir("moxi-vision-tasks");
  const auto tasks = generate_tasks(domain::vision, split::train, 20, 3);
  const std::string path = dir / "v.jsonl";
  write_file_atomic(path, to_jsonl(tasks));
  const auto back = read_jsonl(path);
  ASSERT_EQ(back.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ(back[i].images, tasks[i].images);
    EXPECT_EQ(back[i].answer, tasks[i].answer);
  }
  const auto j = to_json(tasks[0]);
  EXPECT_EQ(base64_decode(j["images"][0].get<std::string>()), tasks[0].images[0]);
  const auto content = task_user_content(tasks[0]);
  ASSERT_TRUE(content.is_array());
  EXPECT_EQ(content[0]["type"], "image");
  EXPECT_EQ(content[1]["text"], tasks[0].prompt);
  EXPECT_EQ(task_user_content(generate_tasks(domain::math, split::train, 1, 1)[0]),
            generate_tasks(domain::math, split::train, 1, 1)[0].prompt);
  // A vision task without its picture is refused by name.
  auto j2 = to_json(tasks[0]);
  j2.erase("images");
  EXPECT_THROW(task_from_json(j2, "x.jsonl:1"), error);
}

TEST(VisionTasks, CheckerTakesOneWordCaseAndFullStopAside) {
  auto t = generate_tasks(domain::vision, split::train, 1, 2, {"colour"})[0];
  checker c;
  auto pass = [&](const std::string& reply) { return c.check(t, reply).pass; };
  EXPECT_TRUE(pass(t.answer));
  std::string upper = t.answer;
  upper[0] = char(std::toupper(static_cast<unsigned char>(upper[0])));
  EXPECT_TRUE(pass(upper + "."));
  EXPECT_TRUE(pass("  " + t.answer + "\n"));
  EXPECT_FALSE(pass("the square is " + t.answer));
  EXPECT_FALSE(pass(t.answer == "red" ? "blue" : "red"));
  EXPECT_FALSE(pass(""));
}

}  // namespace
}  // namespace moxi::eval
