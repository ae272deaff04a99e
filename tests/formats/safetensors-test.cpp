// safetensors reader/writer: round trips for every dtype and edge shape, and a hand-assembled file read
// independently of moxi's writer.
#include "moxi/formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/checkpoint.h"

namespace moxi::formats {
namespace {

namespace fs = std::filesystem;

class safetensors_test : public moxi::testing::temp_dir_test {};

// Bytes that differ per tensor and per position, so a misplaced tensor cannot compare equal.
std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed * 17 + 7) & 0xff);
  return v;
}

void write_raw(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

constexpr int kNumDtypes = static_cast<int>(dtype::BOOL) + 1;

TEST_F(safetensors_test, RoundTripEachDtype) {
  for (int i = 0; i < kNumDtypes; ++i) {
    const dtype t = static_cast<dtype>(i);
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto bytes = pattern(3 * 5 * dtype_size(t), static_cast<unsigned>(i));
    const std::string p = path(std::string(dtype_name(t)) + ".safetensors");
    write_safetensors(p, {{{"w", t, {3, 5}}, bytes.data()}});
    auto f = safetensors_file::open(p);
    ASSERT_EQ(f->tensors().size(), 1u);
    const auto* e = f->find("w");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->type, t);
    EXPECT_EQ(e->shape, (std::vector<int64_t>{3, 5}));
    auto v = f->view(*e);
    EXPECT_EQ(v.type, t);
    EXPECT_EQ(v.numel(), 15);
    ASSERT_EQ(v.nbytes, bytes.size());
    EXPECT_EQ(std::memcmp(v.data, bytes.data(), bytes.size()), 0);
    EXPECT_EQ(f->data_offset() % 8, 0u);
  }
}

TEST_F(safetensors_test, AllDtypesInOneFileAreNaturallyAligned) {
  std::vector<std::vector<std::byte>> data;
  std::vector<std::pair<tensor_spec, const void*>> tensors;
  for (int i = 0; i < kNumDtypes; ++i) {
    const dtype t = static_cast<dtype>(i);
    data.push_back(
        pattern(7 * dtype_size(t), static_cast<unsigned>(i)));  // odd count: misaligns if unordered
  }
  for (int i = 0; i < kNumDtypes; ++i)
    tensors.push_back({{"t." + std::string(dtype_name(static_cast<dtype>(i))), static_cast<dtype>(i), {7}},
                       data[i].data()});
  const std::string p = path("all.safetensors");
  write_safetensors(p, tensors, {{"format", "pt"}});
  auto f = safetensors_file::open(p);
  ASSERT_EQ(f->tensors().size(), static_cast<size_t>(kNumDtypes));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  for (size_t k = 1; k < f->tensors().size(); ++k) EXPECT_EQ(f->tensors()[k - 1].end, f->tensors()[k].begin);
  for (int i = 0; i < kNumDtypes; ++i) {
    const dtype t = static_cast<dtype>(i);
    auto v = f->view(*f->find("t." + std::string(dtype_name(t))));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(t), 0u) << dtype_name(t);
    ASSERT_EQ(v.nbytes, data[i].size());
    EXPECT_EQ(std::memcmp(v.data, data[i].data(), v.nbytes), 0) << dtype_name(t);
  }
}

TEST_F(safetensors_test, EmptyAndScalarTensors) {
  const float scalar = 2.5f;
  const double pair[2] = {1.0, -3.0};
  std::vector<std::pair<tensor_spec, const void*>> tensors = {
      {{"scalar", dtype::F32, {}}, &scalar},
      {{"empty1", dtype::BF16, {0}}, nullptr},
      {{"empty3", dtype::F64, {4, 0, 3}}, nullptr},
      {{"pair", dtype::F64, {2}}, pair},
      {{"empty_huge_dims", dtype::I64, {int64_t(1) << 40, int64_t(1) << 40, 0}}, nullptr},
  };
  const std::string p = path("edge.safetensors");
  write_safetensors(p, tensors);
  auto f = safetensors_file::open(p);
  ASSERT_EQ(f->tensors().size(), 5u);
  auto s = f->view(*f->find("scalar"));
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  ASSERT_EQ(s.nbytes, 4u);
  float got;
  std::memcpy(&got, s.data, 4);
  EXPECT_EQ(got, 2.5f);
  for (const char* name : {"empty1", "empty3", "empty_huge_dims"}) {
    auto v = f->view(*f->find(name));
    EXPECT_EQ(v.nbytes, 0u) << name;
    EXPECT_EQ(v.numel(), 0) << name;
  }
  auto pv = f->view(*f->find("pair"));
  ASSERT_EQ(pv.nbytes, sizeof pair);
  EXPECT_EQ(std::memcmp(pv.data, pair, sizeof pair), 0);
}

TEST_F(safetensors_test, NoTensorsAtAll) {
  const std::string p = path("none.safetensors");
  write_safetensors(p, {}, {{"k", "v"}});
  auto f = safetensors_file::open(p);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().at("k"), "v");
  EXPECT_EQ(f->file_size(), f->data_offset());
}

TEST_F(safetensors_test, HeaderIsPaddedToEightForEveryNameLength) {
  const uint8_t b = 1;
  for (int len = 1; len <= 17; ++len) {
    const std::string p = path("pad" + std::to_string(len) + ".safetensors");
    write_safetensors(p, {{{std::string(len, 'x'), dtype::U8, {1}}, &b}});
    auto f = safetensors_file::open(p);
    EXPECT_EQ(f->data_offset() % 8, 0u) << len;
    // Padding is spaces after the JSON, the form the reference writer uses.
    std::ifstream in(p, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(all[8], '{');
    EXPECT_NE(all[f->data_offset() - 1], '\0');
  }
}

// Assembled byte by byte here (8-byte LE length, JSON, data), so the reader is checked against the format,
// not against moxi's own writer. Offsets are deliberately not in name order, whitespace pads both ends.
TEST_F(safetensors_test, ReadsHandAssembledFile) {
  const std::string header =
      "  \n{\"__metadata__\":{\"format\":\"pt\",\"note\":\"hand made\"},"
      "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[4,20]},"
      "\"a.bias\":{\"shape\":[2],\"data_offsets\":[0,4],\"dtype\":\"BF16\"},"
      "\"c.empty\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[20,20]},"
      "\"d.idx\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[20,28]}}\t ";
  std::string data;
  data += std::string("\x80\x3f\x00\x40", 4);  // BF16 1.0, 2.0 (LE)
  const float f32[4] = {1.5f, -2.0f, 0.25f, 1e6f};
  for (float x : f32) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    for (int i = 0; i < 4; ++i) data += static_cast<char>((u >> (8 * i)) & 0xff);
  }
  data += le64(0x0102030405060708ull);
  const std::string p = path("hand.safetensors");
  write_raw(p, le64(header.size()) + header + data);

  auto f = safetensors_file::open(p);
  EXPECT_EQ(f->path(), p);
  EXPECT_EQ(f->file_size(), 8 + header.size() + data.size());
  EXPECT_EQ(f->data_offset(), 8 + header.size());
  EXPECT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata().at("note"), "hand made");
  ASSERT_EQ(f->tensors().size(), 4u);
  // Offset order; the zero-byte tensor at 20 sorts before the one that starts there.
  EXPECT_EQ(f->tensors()[0].name, "a.bias");
  EXPECT_EQ(f->tensors()[1].name, "b.weight");
  EXPECT_EQ(f->tensors()[2].name, "c.empty");
  EXPECT_EQ(f->tensors()[3].name, "d.idx");

  auto a = f->view(*f->find("a.bias"));
  EXPECT_EQ(a.type, dtype::BF16);
  ASSERT_EQ(a.nbytes, 4u);
  EXPECT_EQ(std::memcmp(a.data, "\x80\x3f\x00\x40", 4), 0);
  auto b = f->view(*f->find("b.weight"));
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(b.nbytes, 16u);
  float got[4];
  std::memcpy(got, b.data, 16);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], f32[i]);
  auto d = f->view(*f->find("d.idx"));
  int64_t idx;
  std::memcpy(&idx, d.data, 8);
  EXPECT_EQ(idx, 0x0102030405060708ll);
  EXPECT_EQ(f->view(*f->find("c.empty")).nbytes, 0u);
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST_F(safetensors_test, WriteReplacesExistingFileAndLeavesNoTemp) {
  const std::string p = path("x.safetensors");
  const int32_t one = 1, two = 2;
  write_safetensors(p, {{{"v", dtype::I32, {}}, &one}});
  write_safetensors(p, {{{"v", dtype::I32, {}}, &two}});
  auto f = safetensors_file::open(p);
  int32_t got;
  std::memcpy(&got, f->view(*f->find("v")).data, 4);
  EXPECT_EQ(got, 2);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(safetensors_test, WriteRejectsBadSpecs) {
  const std::string p = path("bad.safetensors");
  const float x = 0;
  auto expect_error = [&](const std::vector<std::pair<tensor_spec, const void*>>& t,
                          const std::string& needle) {
    try {
      write_safetensors(p, t);
      ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p));
  };
  expect_error({{{"a", dtype::F32, {}}, &x}, {{"a", dtype::F32, {}}, &x}}, "'a' given twice");
  expect_error({{{"n", dtype::F32, {1}}, nullptr}}, "'n' data is null");
  expect_error({{{"neg", dtype::F32, {-1}}, &x}}, "'neg' has a negative dimension");
  expect_error({{{"", dtype::F32, {}}, &x}}, "empty name");
  expect_error({{{"__metadata__", dtype::F32, {}}, &x}}, "reserved");
  expect_error({{{"big", dtype::F32, {int64_t(1) << 62, 8}}, &x}}, "'big'");
}

TEST_F(safetensors_test, OpenNamesMissingFileAndDirectory) {
  try {
    safetensors_file::open(path("absent.safetensors"));
    ADD_FAILURE();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos) << e.what();
  }
  try {
    safetensors_file::open(dir_);
    ADD_FAILURE();
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_), std::string::npos) << e.what();
  }
}

TEST(safetensors_header, EncodeMatchesReferenceLayout) {
  std::string h = encode_safetensors_header({{"w", dtype::F16, {2}, 0, 4}}, {{"format", "pt"}});
  ASSERT_EQ(h.size() % 8, 0u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(h[i]);
  EXPECT_EQ(n, h.size() - 8);
  EXPECT_EQ(h.substr(8, 1), "{");
  EXPECT_NE(h.find("\"__metadata__\":{\"format\":\"pt\"}"), std::string::npos);
  EXPECT_NE(h.find("\"w\":{\"data_offsets\":[0,4],\"dtype\":\"F16\",\"shape\":[2]}"), std::string::npos) << h;
  EXPECT_THROW(encode_safetensors_header({{"bad\xff", dtype::F16, {2}, 0, 4}}, {}), moxi::error);
}

}  // namespace
}  // namespace moxi::formats
