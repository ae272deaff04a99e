// base64 (base/base64.h) against the test vectors of RFC 4648 §10, every length of a 0..255 byte run both
// ways, and the strict decoder's refusals.
#include "moxi/base/base64.h"

#include <gtest/gtest.h>

namespace moxi {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> v[] = {{"f", "Zg=="},        {"fo", "Zm8="},     {"foo", "Zm9v"},
                                                   {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : v) {
    EXPECT_EQ(base64_encode(plain), coded);
    EXPECT_EQ(base64_decode(coded), plain);
  }
  EXPECT_EQ(base64_encode(""), "");
}

TEST(Base64, EveryLengthRoundTrips) {
  std::string bytes;
  for (int i = 1; i <= 256; ++i) {
    bytes.push_back(char(256 - i));
    const std::string coded = base64_encode(bytes);
    EXPECT_EQ(coded.size(), (bytes.size() + 2) / 3 * 4);
    EXPECT_EQ(base64_decode(coded), bytes) << i;
  }
  EXPECT_FALSE(base64_decode("").has_value());  // empty input is refused (a tiktoken line needs a token)
}

TEST(Base64, StrictDecoderRefusesMalformedInput) {
  for (const char* bad : {"", "Zm9", "Zm9v!", "Zm 9v", "Zm9v\n", "Z===", "@@@@"})
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
}

}  // namespace
}  // namespace moxi
