// Sharded checkpoints: write with checkpoint_writer then read through the index, shard balancing, the
// atomic-publish guarantees, and index validation (every failure names the tensor and shard).
#include "moxi/formats/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/shard-plan.h"

namespace moxi::formats {
namespace {

namespace fs = std::filesystem;

class checkpoint_test : public moxi::testing::temp_dir_test {};

std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 29 + 3) & 0xff);
  return v;
}

size_t spec_bytes(const tensor_spec& s) {
  size_t n = dtype_size(s.type);
  for (int64_t d : s.shape) n *= static_cast<size_t>(d);
  return n;
}

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

// Runs f, expects a moxi::error whose message contains every needle.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected moxi::error";
  } catch (const moxi::error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::vector<tensor_spec> model_specs() {
  return {
      {"model.embed_tokens.weight", dtype::BF16, {64, 32}},
      {"model.layers.0.input_layernorm.weight", dtype::F32, {32}},
      {"model.layers.0.self_attn.A_log", dtype::F32, {4}},
      {"model.layers.0.block_sparse_moe.experts.0.w1.weight_blocks", dtype::U8, {16, 2, 16}},
      {"model.layers.0.block_sparse_moe.experts.0.w1.weight_scales", dtype::F8_E8M0, {16, 2}},
      {"model.layers.0.block_sparse_moe.gate.e_score_correction_bias", dtype::F32, {8}},
      {"model.layers.1.self_attn.q_a_proj.weight", dtype::BF16, {16, 32}},
      {"model.layers.1.mlp.gate_proj.weight", dtype::F16, {48, 32}},
      {"model.norm.weight", dtype::F32, {32}},
      {"model.step", dtype::I64, {}},
      {"model.empty", dtype::I32, {0, 4}},
      {"lm_head.weight", dtype::BF16, {64, 32}},
  };
}

TEST_F(checkpoint_test, ShardedWriteThenOpenViaIndex) {
  const auto specs = model_specs();
  std::map<std::string, std::vector<std::byte>> data;
  for (size_t i = 0; i < specs.size(); ++i) data[specs[i].name] = pattern(spec_bytes(specs[i]), unsigned(i));
  const std::string out = path("ck");
  {
    checkpoint_writer w(out, specs, 3, {{"format", "pt"}});
    EXPECT_EQ(w.num_shards(), 3);
    EXPECT_TRUE(fs::is_directory(w.temp_dir()));
    EXPECT_FALSE(fs::exists(out));
    for (auto it = specs.rbegin(); it != specs.rend(); ++it)  // any order
      w.write(it->name, data[it->name].data(), data[it->name].size());
    w.add_file("config.json", "{\"model_type\": \"kimi_linear\"}\n");
    w.commit();
    EXPECT_FALSE(fs::exists(w.temp_dir()));
  }
  ASSERT_TRUE(fs::is_directory(out));
  EXPECT_EQ(read_all(out + "/config.json"), "{\"model_type\": \"kimi_linear\"}\n");

  auto ck = checkpoint::open(out);
  EXPECT_EQ(ck.dir(), out);
  std::vector<std::string> expected_names;
  for (const auto& s : specs) expected_names.push_back(s.name);
  std::sort(expected_names.begin(), expected_names.end());
  EXPECT_EQ(ck.names(), expected_names);
  EXPECT_EQ(ck.shard_paths(), (std::vector<std::string>{out + "/model-00001-of-00003.safetensors",
                                                        out + "/model-00002-of-00003.safetensors",
                                                        out + "/model-00003-of-00003.safetensors"}));
  EXPECT_EQ(ck.metadata().at("format"), "pt");
  for (const auto& s : specs) {
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(ck.contains(s.name));
    auto v = ck.view(s.name);
    EXPECT_EQ(v.type, s.type);
    EXPECT_EQ(v.shape, s.shape);
    ASSERT_EQ(v.nbytes, data[s.name].size());
    if (v.nbytes) {
      EXPECT_EQ(std::memcmp(v.data, data[s.name].data(), v.nbytes), 0);
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(s.type), 0u);
    EXPECT_EQ(ck.entry(s.name).end - ck.entry(s.name).begin, v.nbytes);
  }

  // The index is HF's: total_size = sum of tensor bytes, weight_map = name -> shard file.
  auto index = nlohmann::json::parse(read_all(out + "/model.safetensors.index.json"));
  size_t total = 0;
  for (const auto& s : specs) total += spec_bytes(s);
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);
  ASSERT_EQ(index["weight_map"].size(), specs.size());
  for (const auto& s : specs)
    EXPECT_EQ(out + "/" + index["weight_map"][s.name].get<std::string>(), ck.shard_of(s.name));
  // Contiguous groups in spec order: shard numbers never decrease along the spec list.
  std::string prev;
  for (const auto& s : specs) {
    EXPECT_GE(ck.shard_of(s.name), prev);
    prev = ck.shard_of(s.name);
  }
}

TEST_F(checkpoint_test, ShardsAreBalancedContiguousAndNonEmpty) {
  std::vector<tensor_spec> same;
  for (int i = 0; i < 12; ++i) same.push_back({"t" + std::to_string(100 + i), dtype::F32, {25}});
  {
    checkpoint_writer w(path("a"), same, 4);
    for (int i = 0; i < 12; ++i)
      EXPECT_EQ(w.shard_name_of(same[i].name),
                "model-0000" + std::to_string(i / 3 + 1) + "-of-00004.safetensors");
  }
  {
    // More shards than tensors: clamped, one tensor each.
    checkpoint_writer w(path("b"), {same[0], same[1]}, 5);
    EXPECT_EQ(w.num_shards(), 2);
    EXPECT_EQ(w.shard_name_of(same[1].name), "model-00002-of-00002.safetensors");
  }
  {
    // One large tensor first: it fills a shard by itself, the small ones share the rest, none is empty.
    std::vector<tensor_spec> skew = {{"big", dtype::F32, {1000}}};
    for (int i = 0; i < 6; ++i) skew.push_back({"s" + std::to_string(i), dtype::F32, {10}});
    checkpoint_writer w(path("c"), skew, 3);
    EXPECT_EQ(w.shard_name_of("big"), "model-00001-of-00003.safetensors");
    std::map<std::string, int> count;
    for (const auto& s : skew) ++count[w.shard_name_of(s.name)];
    EXPECT_EQ(count.size(), 3u);
    // The writer's split is the one `moxi plan` predicts.
    std::vector<uint64_t> sizes;
    for (const auto& s : skew) sizes.push_back(spec_bytes(s));
    const auto plan = plan_shards(sizes, 3);
    for (size_t i = 0; i < skew.size(); ++i)
      EXPECT_EQ(w.shard_name_of(skew[i].name),
                "model-0000" + std::to_string(plan[i] + 1) + "-of-00003.safetensors");
  }
  {
    // All zero-byte tensors still give non-empty shards.
    std::vector<tensor_spec> empty;
    for (int i = 0; i < 5; ++i) empty.push_back({"e" + std::to_string(i), dtype::F32, {0}});
    checkpoint_writer w(path("d"), empty, 3);
    std::map<std::string, int> count;
    for (const auto& s : empty) ++count[w.shard_name_of(s.name)];
    EXPECT_EQ(count.size(), 3u);
  }
  for (const char* d : {"a", "b", "c", "d"}) {
    EXPECT_FALSE(fs::exists(path(d)));
    EXPECT_TRUE(fs::is_empty(dir_)) << "temp dir left behind for " << d;
  }
}

TEST_F(checkpoint_test, SingleShardAndSingleFileForms) {
  const float x[3] = {1, 2, 3};
  {
    checkpoint_writer w(path("one"), {{"x", dtype::F32, {3}}}, 1);
    w.write("x", x, sizeof x);
    w.commit();
  }
  auto ck = checkpoint::open(path("one"));
  EXPECT_EQ(ck.shard_paths(), (std::vector<std::string>{path("one") + "/model-00001-of-00001.safetensors"}));

  // A directory with only model.safetensors, and the bare file itself.
  fs::create_directories(path("plain"));
  write_safetensors(path("plain/model.safetensors"), {{{"x", dtype::F32, {3}}, x}});
  auto ck2 = checkpoint::open(path("plain"));
  EXPECT_EQ(ck2.dir(), path("plain"));
  EXPECT_EQ(ck2.shard_of("x"), path("plain") + "/model.safetensors");
  auto ck3 = checkpoint::open(path("plain/model.safetensors"));
  EXPECT_EQ(ck3.dir(), path("plain"));
  EXPECT_EQ(std::memcmp(ck3.view("x").data, x, sizeof x), 0);
}

TEST_F(checkpoint_test, ViewsSurviveMovingTheCheckpoint) {
  const int64_t v = 42;
  write_safetensors(path("m.safetensors"), {{{"v", dtype::I64, {}}, &v}});
  auto ck = checkpoint::open(path("m.safetensors"));
  auto view = ck.view("v");
  checkpoint moved = std::move(ck);
  EXPECT_EQ(moved.view("v").data, view.data);
  int64_t got;
  std::memcpy(&got, view.data, 8);
  EXPECT_EQ(got, 42);
}

TEST_F(checkpoint_test, AbsentTensorErrorsNameIt) {
  const int64_t v = 1;
  write_safetensors(path("m.safetensors"), {{{"v", dtype::I64, {}}, &v}});
  auto ck = checkpoint::open(path("m.safetensors"));
  EXPECT_FALSE(ck.contains("missing.weight"));
  expect_error([&] { ck.view("missing.weight"); }, {"missing.weight", path("m.safetensors")});
  expect_error([&] { ck.entry("missing.weight"); }, {"missing.weight"});
  expect_error([&] { ck.shard_of("missing.weight"); }, {"missing.weight"});
}

// gpt-oss style 0-based names: shards are found only through weight_map, never by guessing a pattern.
TEST_F(checkpoint_test, ResolvesZeroBasedShardNamesThroughWeightMap) {
  const std::string d = path("zb");
  fs::create_directories(d);
  const float a[2] = {1, 2};
  const uint8_t b[3] = {7, 8, 9};
  write_safetensors(d + "/model-00000-of-00002.safetensors", {{{"a", dtype::F32, {2}}, a}});
  write_safetensors(d + "/model-00001-of-00002.safetensors", {{{"b", dtype::U8, {3}}, b}});
  write_text(d + "/model.safetensors.index.json",
             R"({"metadata": {"total_size": 11}, "weight_map": {"a": "model-00000-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors"}})");
  auto ck = checkpoint::open(d);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.shard_of("a"), d + "/model-00000-of-00002.safetensors");
  EXPECT_EQ(ck.shard_of("b"), d + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(std::memcmp(ck.view("b").data, b, 3), 0);
  EXPECT_EQ(ck.shard_paths().size(), 2u);
}

TEST_F(checkpoint_test, DestroyBeforeCommitLeavesNothing) {
  const std::string out = path("crashed");
  std::string temp;
  {
    checkpoint_writer w(out, model_specs(), 2);
    temp = w.temp_dir();
    EXPECT_EQ(temp, out + ".tmp-" + std::to_string(::getpid()));
    const auto bytes = pattern(64 * 32 * 2, 0);
    w.write("model.embed_tokens.weight", bytes.data(), bytes.size());
    w.add_file("config.json", "{}");
    ASSERT_TRUE(fs::exists(temp));
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(checkpoint_test, CommitRefusesExistingOutDir) {
  const std::string out = path("taken");
  const float x = 1;
  fs::create_directories(out);
  expect_error([&] { checkpoint_writer w(out, {{"x", dtype::F32, {}}}, 1); }, {out, "already exists"});
  fs::remove(out);

  // Appears between construction and commit (another writer won the race): commit refuses, the empty
  // directory is left alone, and the temp dir goes away with the writer.
  std::string temp;
  {
    checkpoint_writer w(out, {{"x", dtype::F32, {}}}, 1);
    temp = w.temp_dir();
    w.write("x", &x, sizeof x);
    fs::create_directories(out);
    expect_error([&] { w.commit(); }, {out, "already exists"});
  }
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_TRUE(fs::is_empty(out));
  EXPECT_FALSE(fs::exists(temp));
}

TEST_F(checkpoint_test, CommitRefusesMissingTensor) {
  const std::string out = path("partial");
  const float x = 1;
  {
    checkpoint_writer w(out, {{"x", dtype::F32, {}}, {"y.weight", dtype::F32, {2}}}, 2);
    w.write("x", &x, sizeof x);
    expect_error([&] { w.commit(); }, {out, "'y.weight'", "never written"});
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(checkpoint_test, WriterRejectsMisuse) {
  const std::string out = path("misuse");
  const float x[2] = {1, 2};
  expect_error([&] { checkpoint_writer w(out, {}, 1); }, {out, "no tensors"});
  expect_error([&] { checkpoint_writer w(out, {{"x", dtype::F32, {}}}, 0); }, {"num_shards"});
  expect_error(
      [&] {
        checkpoint_writer w(out, {{"x", dtype::F32, {}}, {"x", dtype::F16, {}}}, 1);
      },
      {"'x'", "twice"});
  expect_error([&] { checkpoint_writer w(out, {{"x", dtype::F32, {-2}}}, 1); }, {"'x'", "negative"});
  EXPECT_TRUE(fs::is_empty(dir_));

  checkpoint_writer w(out, {{"x", dtype::F32, {2}}}, 1);
  expect_error([&] { w.write("x", x, 4); }, {"'x'", "4 bytes", "expected 8"});
  expect_error([&] { w.write("nope", x, 8); }, {"'nope'"});
  expect_error([&] { w.add_file("../evil", "x"); }, {"../evil"});
  expect_error([&] { w.add_file("sub/dir.json", "x"); }, {"sub/dir.json"});
  expect_error([&] { w.add_file("model.safetensors.index.json", "x"); }, {"clashes"});
  expect_error([&] { w.add_file("model-00001-of-00001.safetensors", "x"); }, {"clashes"});
  w.add_file("config.json", "{}");
  expect_error([&] { w.add_file("config.json", "{}"); }, {"clashes"});
  w.write("x", x, 8);
  expect_error([&] { w.write("x", x, 8); }, {"'x'", "twice"});
  w.commit();
  expect_error([&] { w.write("x", x, 8); }, {"after commit"});
  expect_error([&] { w.commit(); }, {"twice"});
  EXPECT_EQ(std::memcmp(checkpoint::open(out).view("x").data, x, 8), 0);
}

TEST_F(checkpoint_test, StaleTempDirIsReported) {
  const std::string out = path("stale");
  fs::create_directories(out + ".tmp-" + std::to_string(::getpid()));
  expect_error([&] { checkpoint_writer w(out, {{"x", dtype::F32, {}}}, 1); }, {".tmp-", "already exists"});
}

// A valid two-shard directory the index tests below then break one way each.
class checkpoint_index_test : public checkpoint_test {
 protected:
  void SetUp() override {
    checkpoint_test::SetUp();
    ck_ = path("ck");
    fs::create_directories(ck_);
    const float a[2] = {1, 2};
    const uint8_t b[3] = {7, 8, 9};
    write_safetensors(ck_ + "/s1.safetensors", {{{"a", dtype::F32, {2}}, a}});
    write_safetensors(ck_ + "/s2.safetensors", {{{"b", dtype::U8, {3}}, b}, {{"c", dtype::U8, {1}}, b}});
  }
  void index(const std::string& json) { write_text(ck_ + "/model.safetensors.index.json", json); }
  std::string index_path() const { return ck_ + "/model.safetensors.index.json"; }

  std::string ck_;
};

TEST_F(checkpoint_index_test, ValidIndexOpens) {
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}})");
  EXPECT_EQ(checkpoint::open(ck_).names(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(checkpoint_index_test, RejectsMalformedIndex) {
  index("{\"weight_map\": {");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "not valid JSON"});
  index("[1, 2]");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "object"});
  index(R"({"metadata": {}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "missing weight_map"});
  index(R"({"weight_map": ["a"]})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "weight_map must be an object"});
  index(R"({"weight_map": {}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "empty"});
  index(R"({"weight_map": {"a": 3}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "'a'", "string"});
  index(R"({"metadata": 5, "weight_map": {"a": "s1.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "metadata"});
  index(R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "duplicate key 'a'"});
}

TEST_F(checkpoint_index_test, RejectsShardNamesThatAreNotPlainFiles) {
  for (const char* bad : {"../s1.safetensors", "sub/s1.safetensors", "/etc/passwd", "..", ".", ""}) {
    index(std::string(R"({"weight_map": {"a": ")") + bad + R"("}})");
    expect_error([&] { checkpoint::open(ck_); }, {index_path(), "'a'", "plain file name"});
  }
}

TEST_F(checkpoint_index_test, RejectsMissingShard) {
  index(R"({"weight_map": {"a": "s1.safetensors", "z": "gone.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "'gone.safetensors'", "'z'", "missing"});
}

TEST_F(checkpoint_index_test, RejectsTensorAbsentFromItsShard) {
  index(R"({"weight_map": {"a": "s2.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); }, {index_path(), "tensor 'a'", "shard 's2.safetensors'"});
}

TEST_F(checkpoint_index_test, RejectsShardTensorTheIndexDoesNotList) {
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); },
               {index_path(), "'s2.safetensors'", "tensor 'c'", "does not list"});
}

TEST_F(checkpoint_index_test, RejectsTensorStoredInTwoShards) {
  const float a[2] = {1, 2};
  write_safetensors(ck_ + "/s3.safetensors", {{{"a", dtype::F32, {2}}, a}, {{"d", dtype::F32, {1}}, a}});
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors",
            "d": "s3.safetensors"}})");
  expect_error([&] { checkpoint::open(ck_); },
               {"'s3.safetensors'", "tensor 'a'", "maps to shard 's1.safetensors'"});
}

TEST_F(checkpoint_index_test, CorruptShardErrorNamesTheShardFile) {
  index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}})");
  fs::resize_file(ck_ + "/s2.safetensors", fs::file_size(ck_ + "/s2.safetensors") - 1);
  expect_error([&] { checkpoint::open(ck_); }, {ck_ + "/s2.safetensors"});
}

TEST_F(checkpoint_index_test, DirectoryWithoutIndexOrModelFile) {
  expect_error([&] { checkpoint::open(ck_); }, {ck_, "model.safetensors.index.json", "model.safetensors"});
  expect_error([&] { checkpoint::open(path("nowhere")); }, {path("nowhere")});
}

}  // namespace
}  // namespace moxi::formats
