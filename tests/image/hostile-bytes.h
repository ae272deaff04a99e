// Shared by the hostile-input image tests: PNG chunk and JPEG marker surgery on valid seed files.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace moxi::image::testing {

inline uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

inline void put_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

inline uint32_t get_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct png_chunk_pos {
  size_t start = 0;  // of the length field
  uint32_t length = 0;
  std::string type;
  size_t data() const { return start + 8; }
  size_t crc() const { return start + 8 + length; }
};

// The chunks of a well-formed PNG, in order (stops at the first one that does not fit).
inline std::vector<png_chunk_pos> png_chunks(const std::vector<uint8_t>& b) {
  std::vector<png_chunk_pos> out;
  for (size_t pos = 8; pos + 12 <= b.size();) {
    png_chunk_pos c{pos, get_be32(&b[pos]), std::string(reinterpret_cast<const char*>(&b[pos + 4]), 4)};
    if (c.crc() + 4 > b.size()) break;
    out.push_back(c);
    pos = c.crc() + 4;
  }
  return out;
}

// Recomputes every chunk's CRC, so that a mutation reaches the decoder behind the CRC check.
inline void fix_png_crcs(std::vector<uint8_t>& b) {
  for (const auto& c : png_chunks(b)) put_be32(&b[c.crc()], crc32(&b[c.start + 4], c.length + 4));
}

inline const png_chunk_pos& first_chunk(const std::vector<png_chunk_pos>& chunks, const std::string& type) {
  for (const auto& c : chunks) {
    if (c.type == type) return c;
  }
  throw std::runtime_error("no " + type + " chunk");
}

// Offset of the first marker `code` (0xc0 for SOF0, 0xda for SOS) of a JPEG, walking the segments.
inline size_t jpeg_marker(const std::vector<uint8_t>& b, uint8_t code) {
  for (size_t pos = 2; pos + 4 <= b.size();) {
    if (b[pos] != 0xff) throw std::runtime_error("not at a marker");
    if (b[pos + 1] == code) return pos;
    pos += 2 + ((size_t{b[pos + 2]} << 8) | b[pos + 3]);
  }
  throw std::runtime_error("no JPEG marker " + std::to_string(code));
}

}  // namespace moxi::image::testing
