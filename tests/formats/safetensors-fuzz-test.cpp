// Hostile safetensors input: a hand-made corpus with one bad file per validation rule (each error must name
// the file and the tensor or field), then a deterministic mutation fuzzer: open() either succeeds with every
// view in bounds or throws moxi::error, and never crashes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/safetensors.h"

namespace moxi::formats {
namespace {

namespace fs = std::filesystem;

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

std::string file_of(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

void write_raw(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  ASSERT_TRUE(out.good()) << p;
}

class safetensors_fuzz_test : public moxi::testing::temp_dir_test {};

// Opens a file that open() accepted and checks what a consumer relies on: every view lies inside the
// file's data section, the tensors tile it, and every byte can be read (a bad bound would fault here).
uint64_t check_accepted(const safetensors_file& f) {
  uint64_t covered = 0, sum = 0;
  EXPECT_LE(f.data_offset(), f.file_size());
  for (const auto& e : f.tensors()) {
    auto v = f.view(e);
    EXPECT_EQ(v.nbytes, e.end - e.begin) << e.name;
    EXPECT_LE(f.data_offset() + e.end, f.file_size()) << e.name;
    EXPECT_EQ(static_cast<uint64_t>(v.numel()) * dtype_size(v.type), v.nbytes) << e.name;
    EXPECT_EQ(f.find(e.name), &e);
    const volatile std::byte* p = v.data;
    for (size_t i = 0; i < v.nbytes; ++i) sum += static_cast<uint64_t>(p[i]);
    covered += v.nbytes;
  }
  EXPECT_EQ(covered, f.file_size() - f.data_offset());
  return sum;
}

struct bad_case {
  std::string label;
  std::string bytes;
  std::vector<std::string> needles;  // besides the path, which every message must name
};

std::vector<bad_case> corpus() {
  const std::string w = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  auto entry = [](const std::string& body) { return "{\"w\":{" + body + "}}"; };
  auto with_dtype = [&](const std::string& d) {
    return entry("\"dtype\":\"" + d + "\",\"shape\":[2],\"data_offsets\":[0,8]");
  };
  auto with_shape = [&](const std::string& s) {
    return entry("\"dtype\":\"F32\",\"shape\":" + s + ",\"data_offsets\":[0,8]");
  };
  auto with_offsets = [&](const std::string& o) {
    return entry("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + o);
  };
  std::vector<bad_case> c = {
      // Length field and size.
      {"empty file", "", {"not a safetensors file", "0 bytes", "shorter than the 8-byte"}},
      {"short file",
       std::string("\x02\x00\x00", 3),
       {"not a safetensors file", "3 bytes", "shorter than the 8-byte"}},
      {"header over cap and past EOF", le64(100'000'001) + "{}", {"not a safetensors file", "do not fit"}},
      {"text with a brace at offset 8", "README: {\"a\": 1}", {"not a safetensors file", "do not fit"}},
      {"header past EOF", le64(1000) + "{}", {"header length 1000", "runs past the end of the file"}},
      {"header length zero", le64(0) + w, {"not a safetensors file"}},
      {"header not an object", le64(4) + "[]  ", {"not a safetensors file"}},
      {"only whitespace", le64(4) + "    ", {"not a safetensors file"}},
      {"header length one too long", le64(w.size() + 1) + w + std::string(8, 'A'), {"not valid JSON"}},
      {"header length one too short", le64(w.size() - 1) + w + std::string(8, 'A'), {"not valid JSON"}},
      // JSON shape.
      {"malformed JSON", file_of("{\"w\":", 0), {"not valid JSON"}},
      {"trailing garbage", file_of("{}  x", 0), {"not valid JSON"}},
      {"NUL padding", file_of(std::string("{}") + std::string(6, '\0'), 0), {"NUL byte at header offset 2"}},
      {"NUL then junk", file_of(std::string("{}\0junk!!", 8), 0), {"NUL byte"}},
      {"invalid UTF-8", file_of("{\"w\xff\":{}}", 0), {"not valid JSON"}},
      {"top-level array", file_of("[]", 0), {"not a safetensors file", "no JSON header object"}},
      {"top-level string", file_of("\"x\"", 0), {"not a safetensors file", "no JSON header object"}},
      {"deep nesting", file_of("{\"__metadata__\":{\"k\":[[[[[[[[[[1]]]]]]]]]]}}", 0), {"nested deeper"}},
      {"duplicate tensor",
       file_of(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
               R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
               2),
       {"duplicate key 'w'"}},
      {"duplicate field",
       file_of(R"({"w":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})", 1),
       {"duplicate key 'dtype'", "in 'w'"}},
      {"duplicate metadata key",
       file_of(R"({"__metadata__":{"k":"a","k":"b"}})", 0),
       {"duplicate key 'k'", "__metadata__"}},
      // __metadata__.
      {"metadata not object", file_of(R"({"__metadata__":3})", 0), {"__metadata__ must be an object"}},
      {"metadata number value",
       file_of(R"({"__metadata__":{"k":1}})", 0),
       {"__metadata__ key 'k'", "string"}},
      {"metadata object value",
       file_of(R"({"__metadata__":{"k":{}}})", 0),
       {"__metadata__ key 'k'", "string"}},
      // Entry fields.
      {"entry not object", file_of(R"({"w":[1]})", 0), {"tensor 'w'", "entry must be an object"}},
      {"missing dtype",
       file_of(entry(R"("shape":[2],"data_offsets":[0,8])"), 8),
       {"tensor 'w'", "missing dtype"}},
      {"missing shape",
       file_of(entry(R"("dtype":"F32","data_offsets":[0,8])"), 8),
       {"tensor 'w'", "missing shape"}},
      {"missing offsets",
       file_of(entry(R"("dtype":"F32","shape":[2])"), 8),
       {"tensor 'w'", "missing data_offsets"}},
      {"extra field",
       file_of(entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1)"), 8),
       {"tensor 'w'", "unexpected key 'extra'"}},
      {"dtype not string",
       file_of(entry(R"("dtype":4,"shape":[2],"data_offsets":[0,8])"), 8),
       {"tensor 'w'", "dtype must be a string"}},
      {"unknown dtype", file_of(with_dtype("X99"), 8), {"tensor 'w'", "'X99'", "not a known"}},
      {"lowercase dtype", file_of(with_dtype("f32"), 8), {"tensor 'w'", "'f32'", "not a known"}},
      {"shape not array", file_of(with_shape("2"), 8), {"tensor 'w'", "shape must be an array"}},
      {"negative dim", file_of(with_shape("[-2]"), 8), {"tensor 'w'", "shape [-2]", "non-negative"}},
      {"float dim", file_of(with_shape("[2.0]"), 8), {"tensor 'w'", "shape [2.0]"}},
      {"string dim", file_of(with_shape("[\"2\"]"), 8), {"tensor 'w'", "shape"}},
      {"dim 2^63", file_of(with_shape("[9223372036854775808]"), 8), {"tensor 'w'", "below 2^63"}},
      {"dim 2^64", file_of(with_shape("[18446744073709551616]"), 8), {"tensor 'w'", "shape"}},
      {"numel overflow",
       file_of(with_shape("[4294967296,4294967296,2]"), 8),
       {"tensor 'w'", "more elements"}},
      {"bytes overflow", file_of(with_shape("[1152921504606846976,4]"), 8), {"tensor 'w'", "more bytes"}},
      {"offsets not array", file_of(with_offsets("8"), 8), {"tensor 'w'", "data_offsets 8", "[begin, end]"}},
      {"offsets one value", file_of(with_offsets("[0]"), 8), {"tensor 'w'", "[begin, end]"}},
      {"offsets three values", file_of(with_offsets("[0,8,8]"), 8), {"tensor 'w'", "[begin, end]"}},
      {"negative offset", file_of(with_offsets("[-1,8]"), 8), {"tensor 'w'", "[begin, end]"}},
      {"float offset", file_of(with_offsets("[0,8.0]"), 8), {"tensor 'w'", "[begin, end]"}},
      {"begin after end", file_of(with_offsets("[8,0]"), 8), {"tensor 'w'", "begin after end"}},
      {"size mismatch", file_of(with_offsets("[0,4]"), 4), {"tensor 'w'", "span 4 bytes, expected 8"}},
      {"huge offsets",
       file_of(with_offsets("[18446744073709551607,18446744073709551615]"), 8),
       {"tensor 'w'", "hole"}},
      // Layout of the data section.
      {"overlap",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               12),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"same range twice",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
               8),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {"hole",
       file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
               20),
       {"tensor 'b'", "hole of 4 bytes", "tensor 'a' ends"}},
      {"first not at 0",
       file_of(with_offsets("[4,12]"), 12),
       {"tensor 'w'", "begins at 4", "data section starts"}},
      {"bytes after last tensor", file_of(w, 12), {"12 bytes", "cover only 8", "'w'", "end of file"}},
      {"data but no tensors", file_of("{}", 3), {"3 bytes", "cover only 0"}},
      {"last past EOF", file_of(w, 4), {"tensor 'w'", "past the end of the data section", "truncated"}},
  };
  for (const char* d : {"F4", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "U16", "U32", "U64", "C64"})
    c.push_back({std::string("unsupported ") + d,
                 file_of(with_dtype(d), 8),
                 {"tensor 'w'", std::string("dtype '") + d + "'", "does not support", "supported: F64"}});
  return c;
}

TEST_F(safetensors_fuzz_test, CorruptCorpusNamesFileAndField) {
  const auto cases = corpus();
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string p = dir_ + "/bad-" + std::to_string(i++) + ".safetensors";
    write_raw(p, c.bytes);
    try {
      auto f = safetensors_file::open(p);
      ADD_FAILURE() << "accepted a bad file";
    } catch (const moxi::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      for (const auto& n : c.needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
  EXPECT_GE(cases.size(), 50u);
}

// Files of other formats (issue 15): the message says "not a safetensors file" with the path, and never
// quotes a "header length" decoded from the file's first 8 bytes of text.
TEST_F(safetensors_fuzz_test, OtherFormatsSayNotASafetensorsFile) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"text", "hello, this is a text file and not a checkpoint\n"},
      {"json", R"({"model_type": "kimi_linear", "hidden_size": 7168})"},
      {"short json", "{}"},
      {"jsonl", "{\"a\": 1}\n{\"a\": 2}\n"},
      {"zip (torch .bin)", std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + std::string(64, 'z')},
      {"gzip", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + std::string(64, 'g')},
      {"ELF", std::string("\x7f"
                          "ELF\x02\x01\x01\x00",
                          8) +
                  std::string(120, '\0')},
      {"GGUF", std::string("GGUF\x03\x00\x00\x00", 8) + std::string(64, '\x01')},
      {"zeros", std::string(4096, '\0')},
      {"all 0xff", std::string(4096, '\xff')},
      {"pickle", std::string("\x80\x02}q\x00(X\x01\x00\x00\x00"
                             "aq",
                             14) +
                     std::string(32, 'p')},
  };
  int i = 0;
  for (const auto& [label, bytes] : files) {
    SCOPED_TRACE(label);
    const std::string p = dir_ + "/other-" + std::to_string(i++) + ".bin";
    write_raw(p, bytes);
    try {
      auto f = safetensors_file::open(p);
      ADD_FAILURE() << "accepted a " << label << " file";
    } catch (const moxi::error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find("not a safetensors file"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("header length"), std::string::npos) << msg;
    }
    // Through the checkpoint reader too, as `moxi inspect FILE` opens it.
    try {
      checkpoint::open(p);
      ADD_FAILURE() << "checkpoint accepted a " << label << " file";
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find("not a safetensors file"), std::string::npos) << e.what();
    }
  }
}

// A header of n one-byte tensors, with names that sort differently from their offsets; "__metadata__" with
// m keys. Returns the file bytes.
std::string many_tensor_file(size_t n, size_t m, const std::string& extra_member = "") {
  std::string h = "{";
  if (m > 0) {
    h += "\"__metadata__\":{";
    for (size_t k = 0; k < m; ++k) h += (k ? "," : "") + ("\"key" + std::to_string(k) + "\":\"v\"");
    h += "},";
  }
  for (size_t i = 0; i < n; ++i) {
    // Offsets in reverse name order, so the reader must sort.
    const size_t at = n - 1 - i;
    h += "\"t." + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1,1,1],\"data_offsets\":[" +
         std::to_string(at) + "," + std::to_string(at + 1) + "]},";
  }
  h += extra_member;
  if (h.back() == ',') h.pop_back();
  h += "}";
  return file_of(h, n);
}

// Issue 14 C1: the header parse must scale with the tensor count (it was quadratic: 40k tensors took 10 s).
// These sizes would take minutes at the old rate; they must parse, with every tensor where it belongs,
// and a duplicate or a bad entry at the very end must still be caught.
TEST_F(safetensors_fuzz_test, LargeHeadersParseCompletely) {
  const size_t n = 150'000;
  {
    const std::string p = path("many.safetensors");
    write_raw(p, many_tensor_file(n, 20'000));
    auto f = safetensors_file::open(p);
    ASSERT_EQ(f->tensors().size(), n);
    EXPECT_EQ(f->metadata().size(), 20'000u);
    for (size_t i = 0; i < n; i += 997) {
      const auto* e = f->find("t." + std::to_string(i));
      ASSERT_NE(e, nullptr) << i;
      EXPECT_EQ(e->begin, n - 1 - i);
      EXPECT_EQ(e->shape, (std::vector<int64_t>{1, 1, 1}));
    }
    EXPECT_EQ(check_accepted(*f), n * 0x5a);  // file_of fills the data section with 0x5a
  }
  const std::vector<std::pair<std::string, std::string>> bad_tails = {
      {R"("t.7":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})", "duplicate key 't.7'"},
      {R"("z":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1})", "unexpected key 'x'"},
      {R"("z":{"dtype":"U8","shape":[1],"data_offsets":[0,2]})", "tensor 'z'"},
  };
  for (const auto& [tail, needle] : bad_tails) {
    const std::string p = path("bad-tail.safetensors");
    fs::remove(p);
    write_raw(p, many_tensor_file(n, 0, tail));
    try {
      safetensors_file::open(p);
      ADD_FAILURE() << "accepted " << tail;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// A header length over the reference MAX_HEADER_SIZE in a file large enough to hold it (sparse, so cheap).
TEST_F(safetensors_fuzz_test, HeaderOverTheCapInALargeFile) {
  const std::string p = path("big.safetensors");
  write_raw(p, le64(100'000'001) + "{}");
  fs::resize_file(p, 100'000'009 + 8);
  try {
    safetensors_file::open(p);
    ADD_FAILURE() << "accepted a header over the cap";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("header length 100000001 exceeds the limit of 100000000"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(safetensors_fuzz_test, ToleratedVariantsOpen) {
  struct good_case {
    std::string label, bytes;
    size_t tensors;
  };
  const std::vector<good_case> cases = {
      {"whitespace both ends",
       file_of(" \n\t {\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}} \r\n ", 2), 1},
      {"spaces inside",
       file_of("{ \"w\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 2 ] , \"dtype\" : \"U8\" } }", 2),
       1},
      {"empty header object", file_of("{}", 0), 0},
      {"empty metadata", file_of(R"({"__metadata__":{}})", 0), 0},
      {"zero-byte tensors only",
       file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
               R"("b":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]}})",
               0),
       2},
      {"zero-byte tensor at EOF",
       file_of(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
               R"("b":{"dtype":"U8","shape":[0],"data_offsets":[1,1]}})",
               1),
       2},
      {"unicode name",
       file_of("{\"\xc3\xa9\xe2\x82\xac\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[0,1]}}", 1), 1},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string p = dir_ + "/good-" + std::to_string(i++) + ".safetensors";
    write_raw(p, c.bytes);
    std::unique_ptr<safetensors_file> f;
    ASSERT_NO_THROW(f = safetensors_file::open(p));
    EXPECT_EQ(f->tensors().size(), c.tensors);
    check_accepted(*f);
  }
}

// A valid file to mutate: several dtypes, a 0-rank and an empty tensor, metadata.
std::string seed_file(const std::string& dir) {
  std::vector<float> a(12, 1.5f);
  std::vector<uint16_t> b(5, 0x3f80);
  std::vector<uint8_t> c(7, 0x7f);
  int64_t d = 9;
  const std::string p = dir + "/seed.safetensors";
  write_safetensors(p,
                    {{{"layers.0.w", dtype::F32, {3, 4}}, a.data()},
                     {{"layers.0.b", dtype::BF16, {5}}, b.data()},
                     {{"scales", dtype::F8_E8M0, {7}}, c.data()},
                     {{"step", dtype::I64, {}}, &d},
                     {{"empty", dtype::U8, {0, 3}}, nullptr}},
                    {{"format", "pt"}});
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One deterministic mutation of a valid file: byte flips, truncation, length-field edits, and JSON edits of
// numbers (offsets, shapes), dtype strings and structure, optionally with the length field kept consistent.
std::string mutate(const std::string& base, std::mt19937_64& rng) {
  auto pick = [&rng](size_t n) { return n == 0 ? size_t(0) : static_cast<size_t>(rng() % n); };
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(base[i]);
  header_len = std::min<uint64_t>(header_len, base.size() - 8);  // base may itself be a mutant
  std::string header = base.substr(8, header_len);
  std::string data = base.substr(8 + header_len);
  bool fix_length = rng() % 2 == 0;
  std::string out;

  switch (rng() % 8) {
    case 0: {  // byte flips, mostly in the length field and header where they matter
      out = base;
      const size_t flips = 1 + pick(4);
      for (size_t k = 0; k < flips; ++k) {
        size_t at = rng() % 10 < 7 ? pick(8 + header_len) : pick(out.size());
        out[at] = static_cast<char>(out[at] ^ static_cast<char>(1u << pick(8)));
      }
      return out;
    }
    case 1:  // truncation
      return base.substr(0, pick(base.size()));
    case 2: {  // length field edits
      static const uint64_t special[] = {0,           1,          7, 8, ~uint64_t(0), uint64_t(1) << 63,
                                         100'000'000, 100'000'001};
      uint64_t n = header_len;
      switch (rng() % 3) {
        case 0:
          n = header_len + pick(33) - 16;
          break;
        case 1:
          n = special[pick(std::size(special))];
          break;
        default:
          n = pick(base.size() + 16);
          break;
      }
      return le64(n) + header + data;
    }
    case 3: {  // replace one number in the JSON (offsets and shapes)
      std::vector<std::pair<size_t, size_t>> runs;
      for (size_t i = 0; i < header.size();) {
        if (isdigit(static_cast<unsigned char>(header[i]))) {
          size_t j = i;
          while (j < header.size() && isdigit(static_cast<unsigned char>(header[j]))) ++j;
          runs.push_back({i, j - i});
          i = j;
        } else {
          ++i;
        }
      }
      if (runs.empty()) return base;
      auto [at, len] = runs[pick(runs.size())];
      const uint64_t old = std::stoull(header.substr(at, std::min<size_t>(len, 19)));
      static const char* weird[] = {"0",
                                    "-1",
                                    "1e3",
                                    "2.5",
                                    "18446744073709551615",
                                    "18446744073709551616",
                                    "9223372036854775807",
                                    "9223372036854775808",
                                    "4294967296",
                                    "null",
                                    "\"3\""};
      std::string rep;
      switch (rng() % 4) {
        case 0:
          rep = std::to_string(old + 1 + pick(8));
          break;
        case 1:
          rep = std::to_string(old > 0 ? old - 1 - pick(std::min<uint64_t>(old, 8)) : 0);
          break;
        case 2:
          rep = std::to_string(old * 2);
          break;
        default:
          rep = weird[pick(std::size(weird))];
          break;
      }
      header.replace(at, len, rep);
      break;
    }
    case 4: {  // swap one dtype for another, supported or not
      static const char* dtypes[] = {"F32", "F16", "BF16", "U8", "I64", "F64", "BOOL",   "F8_E8M0",
                                     "F4",  "U16", "C64",  "",   "f32", "I8",  "F8_E4M3"};
      std::vector<size_t> at;
      for (size_t i = header.find("\"dtype\":\""); i != std::string::npos;
           i = header.find("\"dtype\":\"", i + 1))
        at.push_back(i + 9);
      if (at.empty()) return base;
      size_t s = at[pick(at.size())];
      size_t e = header.find('"', s);
      header.replace(s, e - s, dtypes[pick(std::size(dtypes))]);
      break;
    }
    case 5: {  // structural edits: delete a span or insert a JSON-ish character
      if (rng() % 2 == 0 && !header.empty()) {
        size_t s = pick(header.size());
        header.erase(s, 1 + pick(std::min<size_t>(6, header.size() - s)));
      } else {
        static const char chars[] = "{}[],:\"0-9 e.\\";
        header.insert(pick(header.size() + 1), 1, chars[pick(sizeof chars - 1)]);
      }
      break;
    }
    case 6: {  // another format's bytes where the length field is: text, or text from the start
      static const char* texts[] = {"hello wo", "{\"a\": 1}", "# README",
                                    "PK\x03\x04"
                                    "abcd",
                                    "\x7f"
                                    "ELF\x02\x01\x01\x00"};
      std::string t = texts[pick(std::size(texts))];
      t.resize(8, ' ');
      if (rng() % 2 == 0) return t + header + data;
      return t + std::string("plain text follows, no JSON header object here\n") + data;
    }
    default: {  // data section grows or shrinks
      if (rng() % 2 == 0)
        data.append(1 + pick(16), '\x11');
      else if (!data.empty())
        data.resize(pick(data.size()));
      break;
    }
  }
  out = le64(fix_length ? header.size() : header_len) + header + data;
  return out;
}

// The format's first-byte rule, written out independently of the reader: 8 length bytes, then optional
// JSON whitespace and '{' within the claimed header length.
bool looks_like_safetensors(const std::string& bytes) {
  if (bytes.size() < 8) return false;
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[size_t(i)]);
  for (size_t i = 8; i < bytes.size() && i - 8 < std::min<uint64_t>(len, 100'000'000); ++i) {
    if (bytes[i] == '{') return true;
    if (bytes[i] != ' ' && bytes[i] != '\t' && bytes[i] != '\n' && bytes[i] != '\r') return false;
  }
  return false;
}

TEST_F(safetensors_fuzz_test, RandomMutationsNeverCrash) {
  const std::string base = seed_file(dir_);
  {
    auto f = safetensors_file::open(dir_ + "/seed.safetensors");
    ASSERT_EQ(f->tensors().size(), 5u);
  }
  const std::string p = dir_ + "/mutant.safetensors";
  int accepted = 0, rejected = 0;
  constexpr int kMutations = 4000;
  for (int seed = 0; seed < kMutations; ++seed) {
    std::mt19937_64 rng(0x5afe'7e45ull + static_cast<uint64_t>(seed));
    std::string bytes = mutate(base, rng);
    if (rng() % 4 == 0) bytes = mutate(bytes.size() >= 8 ? bytes : base, rng);  // sometimes stack two
    // Unlink rather than truncate: ext4 flushes a truncated-then-rewritten file on close (auto_da_alloc),
    // which would make this loop disk-bound.
    fs::remove(p);
    write_raw(p, bytes);
    try {
      auto f = safetensors_file::open(p);
      check_accepted(*f);
      ++accepted;
    } catch (const moxi::error& e) {
      ++rejected;
      if (std::string(e.what()).find(p) == std::string::npos)
        ADD_FAILURE() << "seed " << seed << ": " << e.what();
      // No JSON object right after the length field: whatever else is wrong, the file is named as not a
      // safetensors file (issue 15), not described by a "header length" read from its bytes.
      if (!looks_like_safetensors(bytes) &&
          std::string(e.what()).find("not a safetensors file") == std::string::npos)
        ADD_FAILURE() << "seed " << seed << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "seed " << seed << ": exception other than moxi::error: " << e.what();
    }
    if (HasFailure()) {
      ADD_FAILURE() << "first failing seed " << seed;
      break;
    }
  }
  // Both outcomes must be exercised or the fuzzer is not testing anything.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 1000);
  std::printf("mutations: %d accepted, %d rejected\n", accepted, rejected);
}

}  // namespace
}  // namespace moxi::formats
