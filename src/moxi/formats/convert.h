// Element conversions between stored dtypes and fp32, for tools that read or write float tensors.
#pragma once

#include <cstddef>

#include "moxi/tensor/dtype.h"

namespace moxi::formats {

// True for dtypes to_f32 accepts: F64, F32, F16, BF16, F8_E4M3, F8_E5M2.
bool convertible_to_f32(dtype t);
// Decodes n elements of `src` (any alignment) into dst.
void to_f32(dtype t, const void* src, size_t n, float* dst);
// Encodes n floats as F32, F16 or BF16 (round to nearest even).
void from_f32(dtype t, const float* src, size_t n, void* dst);

}  // namespace moxi::formats
