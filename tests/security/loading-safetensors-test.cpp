// Issue 14 C1 and issue 15 through the moxi binary: a header with as many tensors as the seed checkpoint
// (502,524) opens completely within bounded memory and CPU, and files of other formats are called "not a
// safetensors file" with their path, never described by a "header length" decoded from text bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/formats/safetensors.h"
#include "security/loading-util.h"

namespace moxi {
namespace {

using moxi::testing::run_moxi_bounded;

// n one-byte U8 tensors named like an MoE checkpoint's experts, written directly (not through moxi's
// encoder): names in one order, offsets in another.
std::string write_many(const std::string& path, size_t n) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  for (size_t i = 0; i < n; ++i) {
    const size_t at = (i * 7919) % n;  // a permutation of [0, n): 7919 is prime and does not divide n
    h += ",\"model.layers." + std::to_string(i / 6144) + ".mlp.experts." + std::to_string((i / 6) % 1024) +
         ".w" + std::to_string(i % 6) + ".weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
         std::to_string(at) + "," + std::to_string(at + 1) + "]}";
  }
  h += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  std::ofstream f(path, std::ios::binary);
  f << out << h;
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[(i * 7919) % n] = char(i % 251);
  f << data;
  return h;
}

class loading_safetensors_test : public moxi::testing::temp_dir_test {};

TEST_F(loading_safetensors_test, SeedSizedHeaderOpensCompletely) {
  constexpr size_t n = 502'524;  // the seed checkpoint's tensor count
  static_assert(n % 7919 != 0);
  const std::string p = path("seed-sized.safetensors");
  write_many(p, n);

  auto f = formats::safetensors_file::open(p);
  ASSERT_EQ(f->tensors().size(), n);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  for (size_t i = 0; i < n; i += 4099) {
    const std::string name = "model.layers." + std::to_string(i / 6144) + ".mlp.experts." +
                             std::to_string((i / 6) % 1024) + ".w" + std::to_string(i % 6) + ".weight";
    const auto* e = f->find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->begin, (i * 7919) % n);
    const auto v = f->view(*e);
    EXPECT_EQ(static_cast<unsigned char>(*reinterpret_cast<const char*>(v.data)), i % 251) << name;
  }
  f.reset();

  // The binary, bounded: `moxi inspect` lists it.
  const auto r = run_moxi_bounded("inspect " + p, dir_);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(p + ": 502524 tensors in 1 shard", 0), 0u) << r.out.substr(0, 200);
}

TEST_F(loading_safetensors_test, OtherFormatsAreNamedAsSuch) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"notes.txt", "These are my notes. Not a checkpoint at all.\n"},
      {"config.safetensors", R"({"model_type": "kimi_linear", "vocab_size": 163840})"},
      {"pytorch_model.bin", std::string("PK\x03\x04\x14\x00\x00\x00", 8) + std::string(200, 'x')},
      {"tiny", "ab"},
  };
  for (const auto& [name, bytes] : files) {
    SCOPED_TRACE(name);
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << bytes;
    const auto r = run_moxi_bounded("inspect " + p, dir_);
    moxi::testing::expect_clean_error(r, {p, "not a safetensors file"});
    EXPECT_EQ(r.err.find("header length"), std::string::npos) << r.err;
  }
  // A checkpoint directory whose model.safetensors is text.
  const std::string ck = path("ck");
  std::filesystem::create_directories(ck);
  std::ofstream(ck + "/model.safetensors") << "oops, a text file saved under the wrong name\n";
  const auto r = run_moxi_bounded("inspect " + ck, dir_);
  moxi::testing::expect_clean_error(r, {ck + "/model.safetensors", "not a safetensors file"});
}

}  // namespace
}  // namespace moxi
