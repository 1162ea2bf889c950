// The safetensors reader (model/safetensors.h): any file opens or fails
// with a status, and every tensor it lists reads (as stored and converted
// to float32) or fails with a status.

#include <cstddef>
#include <cstdint>

#include "fuzz/memfd_file.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static trellis::fuzz::MemfdFile* file = new trellis::fuzz::MemfdFile();
  const std::string& path = file->Write(data, size);
  auto reader = trellis::model::SafetensorsReader::Open(path);
  if (!reader.ok()) return 0;
  for (const auto& info : (*reader)->tensors()) {
    (void)(*reader)->Read(info);
    (void)(*reader)->Read(info, torch::kFloat32);
  }
  return 0;
}
