// Shared by the image tests: runs tests/image/pillow-reference.py (Pillow, Debian's python3-pil) into a
// temp dir and reads back its cases.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/read-file.h"
#include "moxi/image/image.h"

namespace moxi::image::testing {

struct reference_case {
  std::string name;
  std::vector<int64_t> fields;  // the manifest's numbers after the name
  std::vector<uint8_t> in, out;
};

inline std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Runs the script's `mode` into `dir`; fails the test (with the script's output) when it fails.
inline std::vector<reference_case> run_reference(const std::string& mode, const std::string& dir) {
  // Debian's interpreter, which python3-pil installs into (a python3 earlier on PATH may lack Pillow).
  const std::string log = dir + "/reference.log";
  const std::string cmd = "/usr/bin/python3 " MOXI_SOURCE_DIR "/tests/image/pillow-reference.py " + mode +
                          " " + dir + " > " + log + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "the Pillow reference failed (is python3-pil installed? scripts/setup.sh installs it):\n"
                  << moxi::testing::read_file(log);
    return {};
  }
  std::vector<reference_case> cases;
  std::ifstream manifest(dir + "/cases.txt");
  std::string line;
  while (std::getline(manifest, line)) {
    if (line.empty()) continue;
    std::istringstream ss(line);
    reference_case c;
    ss >> c.name;
    for (int64_t v; ss >> v;) c.fields.push_back(v);
    c.in = bytes_of(moxi::testing::read_file(dir + "/" + c.name + ".in"));
    c.out = bytes_of(moxi::testing::read_file(dir + "/" + c.name + ".out"));
    cases.push_back(std::move(c));
  }
  EXPECT_FALSE(cases.empty()) << "no cases from the Pillow reference in " << dir;
  return cases;
}

inline const reference_case& find_case(const std::vector<reference_case>& cases, const std::string& name) {
  for (const auto& c : cases) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no reference case " + name);
}

// Where two RGB buffers of the same size first differ and by how much at most, for failure messages.
inline std::string describe_diff(const rgb_image& got, const std::vector<uint8_t>& want) {
  if (got.rgb.size() != want.size()) {
    return "size " + std::to_string(got.rgb.size()) + " vs " + std::to_string(want.size());
  }
  size_t first = want.size(), count = 0;
  int max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const int d = std::abs(int{got.rgb[i]} - int{want[i]});
    if (d == 0) continue;
    if (first == want.size()) first = i;
    ++count;
    max_diff = std::max(max_diff, d);
  }
  if (count == 0) return "equal";
  const size_t px = first / 3;
  return std::to_string(count) + " bytes differ, max abs diff " + std::to_string(max_diff) +
         ", first at pixel (" + std::to_string(px % static_cast<size_t>(got.width)) + ", " +
         std::to_string(px / static_cast<size_t>(got.width)) + ") channel " + std::to_string(first % 3);
}

}  // namespace moxi::image::testing
