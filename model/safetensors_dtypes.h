#ifndef TRELLIS_MODEL_SAFETENSORS_DTYPES_H_
#define TRELLIS_MODEL_SAFETENSORS_DTYPES_H_

// The safetensors header's dtype names and the LibTorch types they stand
// for, shared by the writer (model/safetensors.cc), the reader
// (model/safetensors_reader.cc) and the flat shards' layouts
// (model/shard_layout.h FlatUnit::dtype). Only c10's ScalarType.

#include <optional>
#include <string_view>

#include <c10/core/ScalarType.h>

namespace trellis::model {

struct SafetensorsDtype {
  const char* name;
  c10::ScalarType type;
};
inline constexpr SafetensorsDtype kSafetensorsDtypes[] = {
    {"F32", c10::ScalarType::Float},     {"F16", c10::ScalarType::Half},
    {"BF16", c10::ScalarType::BFloat16}, {"F64", c10::ScalarType::Double},
    {"I64", c10::ScalarType::Long},      {"I32", c10::ScalarType::Int},
    {"I16", c10::ScalarType::Short},     {"I8", c10::ScalarType::Char},
    {"U8", c10::ScalarType::Byte},       {"BOOL", c10::ScalarType::Bool},
};

// The header name of `type`; null when safetensors has none here.
inline const char* SafetensorsDtypeName(c10::ScalarType type) {
  for (const auto& d : kSafetensorsDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

inline std::optional<c10::ScalarType> SafetensorsDtypeOf(std::string_view name) {
  for (const auto& d : kSafetensorsDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_SAFETENSORS_DTYPES_H_
