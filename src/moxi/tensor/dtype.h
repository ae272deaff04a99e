// Element types of stored tensors, with the safetensors dtype strings (huggingface/safetensors
// safetensors/src/tensor.rs, enum Dtype) as their names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moxi {

enum class dtype : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, I64, I32, I16, I8, U8, BOOL };

// Size of one element in bytes (all supported dtypes are whole bytes).
size_t dtype_size(dtype t);
// The safetensors name ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(dtype t);
// Parses a safetensors name; nullopt for names moxi does not support.
std::optional<dtype> dtype_from_name(std::string_view name);
bool dtype_is_float(dtype t);

}  // namespace moxi
