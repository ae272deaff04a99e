// SplitMix64 (Steele, Lea and Flood, 2014; the constants of Vigna's reference splitmix64.c): the small
// deterministic generator behind moxi's seeded choices (init values, data order), identical everywhere.
#pragma once

#include <cstdint>

namespace moxi {

// Advances `state` and returns the next 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace moxi
