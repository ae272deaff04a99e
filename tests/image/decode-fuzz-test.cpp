// A deterministic mutation fuzzer over valid PNG and JPEG seeds (bit flips, truncations, byte splices,
// overwritten fields; PNGs also with their CRCs recomputed so mutations reach libpng's decoder and zlib):
// decode() either returns an image whose buffer matches its size or throws moxi::error, and never crashes.
#include <gtest/gtest.h>

#include <random>

#include "common/temp-dir.h"
#include "image/hostile-bytes.h"
#include "image/reference.h"
#include "moxi/base/error.h"
#include "moxi/image/image.h"

namespace moxi::image {
namespace {

using bytes = std::vector<uint8_t>;

bytes mutate(const bytes& seed, const std::vector<bytes>& all, std::mt19937_64& rng) {
  bytes b = seed;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int r = 0; r < rounds && !b.empty(); ++r) {
    switch (rng() % 6) {
      case 0:  // flip one to eight bits
        for (int i = 0, n = 1 + static_cast<int>(rng() % 8); i < n; ++i)
          b[pick(b.size())] ^= 1 << (rng() % 8);
        break;
      case 1:  // truncate
        b.resize(pick(b.size()));
        break;
      case 2: {  // splice in a piece of any seed
        const bytes& from = all[pick(all.size())];
        const size_t at = pick(from.size()), len = 1 + pick(std::min<size_t>(64, from.size() - at));
        const size_t to = pick(b.size());
        b.insert(b.begin() + static_cast<ptrdiff_t>(to), from.begin() + static_cast<ptrdiff_t>(at),
                 from.begin() + static_cast<ptrdiff_t>(at + len));
        break;
      }
      case 3: {  // overwrite a run with an interesting value (sizes, lengths, markers live in such fields)
        static const uint8_t values[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe, 0xd8, 0xda, 0xc0};
        const size_t at = pick(b.size());
        for (size_t i = at, n = 1 + pick(4); i < b.size() && i < at + n; ++i) b[i] = values[rng() % 9];
        break;
      }
      case 4: {  // delete a run
        const size_t at = pick(b.size()), n = std::min<size_t>(1 + pick(32), b.size() - at);
        b.erase(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
        break;
      }
      case 5: {  // duplicate a run in place (repeated segments, chunks, scans)
        const size_t at = pick(b.size()), n = std::min<size_t>(1 + pick(200), b.size() - at);
        const bytes run(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<ptrdiff_t>(at), run.begin(), run.end());
        break;
      }
    }
  }
  return b;
}

TEST(ImageDecodeFuzz, mutations_decode_or_throw_moxi_error) {
  moxi::testing::temp_dir dir("moxi-image-fuzz");
  const auto cases = testing::run_reference("seeds", dir.path());
  std::vector<bytes> seeds;
  for (const auto& c : cases) {
    if (c.name.rfind("seed-", 0) == 0 && c.name != "seed-jpeg-large") seeds.push_back(c.in);
  }
  ASSERT_GE(seeds.size(), 6u);
  // Tight limits keep a mutated header from asking for big (and slow to fill) buffers.
  const decode_limits limits{.max_bytes = 1 << 20, .max_pixels = 1 << 18, .max_side = 2048};
  std::mt19937_64 rng(0x6d6f7869);
  int decoded = 0, refused = 0;
  constexpr int kCases = 12000;
  for (int i = 0; i < kCases; ++i) {
    const size_t s = i % seeds.size();
    bytes b = mutate(seeds[s], seeds, rng);
    const bool png = seeds[s][0] == 0x89;
    if (png && i % 2) testing::fix_png_crcs(b);  // half the PNG cases get past the CRC check
    try {
      const rgb_image img = decode(b, limits, "case " + std::to_string(i));
      ASSERT_GT(img.width, 0) << i;
      ASSERT_GT(img.height, 0) << i;
      ASSERT_LE(img.width * img.height, limits.max_pixels) << i;
      ASSERT_EQ(img.rgb.size(), static_cast<size_t>(img.width * img.height * 3)) << i;
      ++decoded;
    } catch (const moxi::error& e) {
      ASSERT_EQ(std::string(e.what()).rfind("case " + std::to_string(i) + ": ", 0), 0u) << e.what();
      ++refused;
    }
  }
  // Both outcomes must be common, or the mutations are too gentle or too destructive to test much.
  EXPECT_GT(decoded, kCases / 50);
  EXPECT_GT(refused, kCases / 4);
  std::printf("%d decoded, %d refused\n", decoded, refused);
}

}  // namespace
}  // namespace moxi::image
