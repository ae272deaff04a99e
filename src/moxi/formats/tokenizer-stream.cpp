// Streaming detokenization and the UTF-8 boundary rules it rests on: hold back only a tail that could still
// become a valid character, pass everything else through, so streamed text == decode() byte for byte.
#include "moxi/formats/tokenizer.h"

namespace moxi::formats {
namespace {

// Expected sequence length for a lead byte, 0 when the byte cannot start a sequence.
int utf8_sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;  // continuation byte, C0/C1 (overlong) or F5..FF (beyond U+10FFFF)
}

// Valid range of the second byte (narrower than 80..BF for E0, ED, F0, F4: no overlongs or surrogates).
bool second_byte_ok(unsigned char lead, unsigned char c) {
  switch (lead) {
    case 0xE0:
      return c >= 0xA0 && c <= 0xBF;
    case 0xED:
      return c >= 0x80 && c <= 0x9F;
    case 0xF0:
      return c >= 0x90 && c <= 0xBF;
    case 0xF4:
      return c >= 0x80 && c <= 0x8F;
    default:
      return c >= 0x80 && c <= 0xBF;
  }
}

bool continuation(unsigned char c) {
  return c >= 0x80 && c <= 0xBF;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view bytes) {
  const size_t n = bytes.size();
  // The last sequence starts at most 3 bytes before the end; find its lead byte.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const size_t start = n - back;
    const auto lead = static_cast<unsigned char>(bytes[start]);
    if (continuation(lead)) continue;
    const int len = utf8_sequence_length(lead);
    if (len <= int(back)) return n;  // complete, ASCII, or an invalid lead: nothing to wait for
    // Incomplete: hold it back only if every byte so far fits a valid sequence.
    for (size_t k = 1; k < back; ++k) {
      const auto c = static_cast<unsigned char>(bytes[start + k]);
      if (k == 1 ? !second_byte_ok(lead, c) : !continuation(c)) return n;
    }
    return start;
  }
  return n;
}

bool utf8_valid(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int len = utf8_sequence_length(lead);
    if (len == 0 || i + size_t(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if (k == 1 ? !second_byte_ok(lead, c) : !continuation(c)) return false;
    }
    i += size_t(len);
  }
  return true;
}

stream_decoder::stream_decoder(const tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string stream_decoder::push(token_id id) {
  const token_id one[1] = {id};
  pending_ += tok_.decode(one, skip_special_);  // range-checks the id
  const size_t ready = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string stream_decoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace moxi::formats
