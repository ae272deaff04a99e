// dtype <-> fp32 element conversions (memcpy for unaligned sources: safetensors only promises 8-byte
// alignment of the data section, not of each tensor).
#include "moxi/formats/convert.h"

#include <cstring>

#include "moxi/base/error.h"
#include "moxi/base/half.h"
#include "moxi/base/mx.h"

namespace moxi::formats {

bool convertible_to_f32(dtype t) {
  switch (t) {
    case dtype::F64:
    case dtype::F32:
    case dtype::F16:
    case dtype::BF16:
    case dtype::F8_E4M3:
    case dtype::F8_E5M2:
      return true;
    default:
      return false;
  }
}

void to_f32(dtype t, const void* src, size_t n, float* dst) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case dtype::F32:
      std::memcpy(dst, p, n * 4);
      return;
    case dtype::F64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        dst[i] = float(d);
      }
      return;
    case dtype::F16:
    case dtype::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = t == dtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case dtype::F8_E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = mx::fp8_e4m3_to_f32(p[i]);
      return;
    case dtype::F8_E5M2:
      for (size_t i = 0; i < n; ++i) dst[i] = mx::fp8_e5m2_to_f32(p[i]);
      return;
    default:
      throw error(std::string("cannot convert ") + std::string(dtype_name(t)) + " tensors to F32");
  }
}

void from_f32(dtype t, const float* src, size_t n, void* dst) {
  auto* p = static_cast<unsigned char*>(dst);
  switch (t) {
    case dtype::F32:
      std::memcpy(p, src, n * 4);
      return;
    case dtype::F16:
    case dtype::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = t == dtype::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    default:
      throw error(std::string("cannot write F32 values as ") + std::string(dtype_name(t)));
  }
}

}  // namespace moxi::formats
