// The JSONL dataset readers (data/dataset.h): any bytes read as prompts,
// supervised examples and preference pairs, or fail with a status.

#include <cstddef>
#include <cstdint>

#include "data/dataset.h"
#include "fuzz/memfd_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static trellis::fuzz::MemfdFile* file = new trellis::fuzz::MemfdFile();
  const std::string& path = file->Write(data, size);
  (void)trellis::data::ReadJsonl(path);
  (void)trellis::data::ReadSftJsonl(path);
  (void)trellis::data::ReadPreferenceJsonl(path);
  return 0;
}
