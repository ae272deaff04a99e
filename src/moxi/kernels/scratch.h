// Grow-only scratch: a buffer (usually thread_local in the op that owns it) that is resized only when a call
// needs more than any call before, so steady-state calls allocate nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace moxi::kernels {

// v's storage with room for at least n elements. The contents are not kept: a buffer that must grow is
// released before the larger one is made, so the old and new never coexist (every caller fills what it
// reads).
// Per-thread scratch kept between calls is given back after a call that grew it past this (a one-off forward
// over a very long prompt), so such a call does not pin its memory for the life of the thread.
inline constexpr size_t kKeepScratchBytes = size_t(1) << 30;

template <class T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) {
    v = std::vector<T>();
    v.resize(n);
  }
  return v.data();
}

}  // namespace moxi::kernels
