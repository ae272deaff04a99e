// Vision tasks (docs/tasks.md "Vision"): generated pictures a tiny vision tower can learn to read. Each is
// an 84 x 84 RGB PNG (6 x 6 patches of 14 pixels, 9 image tokens after the 2 x 2 merge) of coloured squares
// on a dark background with faint noise; the answer is one word. Train and test share the templates and the
// phrasings; the test split is held out by its pictures: drawn from its own random stream, and for `count`
// with square sizes train never uses (train 10 or 14 pixels, test 12).
#include <algorithm>

#include "moxi/eval/task-generator-detail.h"
#include "moxi/image/image.h"

namespace moxi::eval::detail {

namespace {

constexpr int64_t kSide = 84;

struct colour {
  const char* name;
  uint8_t r, g, b;
};

const std::vector<colour>& colours() {
  static const std::vector<colour> c = {{"red", 220, 40, 40},     {"green", 40, 190, 60},
                                        {"blue", 50, 90, 230},    {"yellow", 230, 210, 40},
                                        {"white", 240, 240, 240}, {"purple", 160, 60, 200}};
  return c;
}

image::rgb_image canvas(rng& r) {
  image::rgb_image im;
  im.width = im.height = kSide;
  im.rgb.resize(size_t(kSide * kSide * 3));
  for (auto& v : im.rgb) v = uint8_t(24 + r.range(0, 12));  // dark, faintly noisy
  return im;
}

void fill_square(image::rgb_image& im, int64_t x0, int64_t y0, int64_t side, const colour& c) {
  for (int64_t y = y0; y < y0 + side; ++y)
    for (int64_t x = x0; x < x0 + side; ++x) {
      uint8_t* p = im.rgb.data() + (y * kSide + x) * 3;
      p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
}

// n squares of `side` pixels at random places at least 2 pixels apart (rejection sampling on a grid that
// always has room for 6 of the largest).
void place_squares(rng& r, image::rgb_image& im, int64_t n, int64_t side) {
  std::vector<std::pair<int64_t, int64_t>> at;
  while (int64_t(at.size()) < n) {
    const int64_t x = r.range(2, kSide - side - 2), y = r.range(2, kSide - side - 2);
    const bool clear = std::all_of(at.begin(), at.end(), [&](const auto& p) {
      return x + side + 2 <= p.first || p.first + side + 2 <= x || y + side + 2 <= p.second ||
             p.second + side + 2 <= y;
    });
    if (!clear) continue;
    at.emplace_back(x, y);
    fill_square(im, x, y, side, r.pick(colours()));
  }
}

const std::map<std::string, std::vector<std::string>>& vision_phrasings() {
  static const std::map<std::string, std::vector<std::string>> p = {
      {"count",
       {"How many squares are in the picture?", "Count the squares in the image.",
        "how many squares do you see?", "How many squares are there? Answer with a number."}},
      {"colour",
       {"What colour is the square?", "Which colour is the square in the picture?", "what color is the square?",
        "Name the colour of the square."}},
  };
  return p;
}

}  // namespace

const std::vector<template_info>& vision_templates() {
  static const std::vector<template_info> t = {
      {"count", false, "unseen pictures; test squares are 12 px, train 10 or 14 px"},
      {"colour", false, "unseen pictures"},
  };
  return t;
}

task make_vision(rng& r, split s, const std::string& tmpl) {
  task t;
  auto im = canvas(r);
  if (tmpl == "count") {
    const int64_t n = r.range(1, 6);
    const int64_t side = s == split::test ? 12 : r.pick(std::vector<int64_t>{10, 14});
    place_squares(r, im, n, side);
    t.answer = S(n);
    t.params = {{"squares", n}, {"side", side}};
  } else {
    const colour& c = r.pick(colours());
    const int64_t side = r.range(16, 28);
    fill_square(im, r.range(2, kSide - side - 2), r.range(2, kSide - side - 2), side, c);
    t.answer = c.name;
    t.params = {{"colour", c.name}, {"side", side}};
  }
  t.prompt = r.pick(vision_phrasings().at(tmpl));
  t.reference = t.answer;
  t.images.push_back(image::encode_png(im));
  return t;
}

}  // namespace moxi::eval::detail
