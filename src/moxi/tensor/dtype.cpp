// The dtype table: one row per supported element type.
#include "moxi/tensor/dtype.h"

#include <array>

namespace moxi {
namespace {

struct dtype_info {
  dtype type;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr std::array<dtype_info, 13> kDtypes = {{
    {dtype::F64, "F64", 8, true},
    {dtype::F32, "F32", 4, true},
    {dtype::F16, "F16", 2, true},
    {dtype::BF16, "BF16", 2, true},
    {dtype::F8_E4M3, "F8_E4M3", 1, true},
    {dtype::F8_E5M2, "F8_E5M2", 1, true},
    {dtype::F8_E8M0, "F8_E8M0", 1, true},
    {dtype::I64, "I64", 8, false},
    {dtype::I32, "I32", 4, false},
    {dtype::I16, "I16", 2, false},
    {dtype::I8, "I8", 1, false},
    {dtype::U8, "U8", 1, false},
    {dtype::BOOL, "BOOL", 1, false},
}};

const dtype_info& info(dtype t) {
  return kDtypes[static_cast<size_t>(t)];
}

}  // namespace

size_t dtype_size(dtype t) {
  return info(t).size;
}
std::string_view dtype_name(dtype t) {
  return info(t).name;
}
bool dtype_is_float(dtype t) {
  return info(t).is_float;
}

std::optional<dtype> dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

}  // namespace moxi
