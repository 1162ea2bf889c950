// tokenizer.json parsing (text/internal/tokenizer_json.h): any text parses
// into a byte-level BPE tokenizer or fails with a status; a parsed one
// encodes a sample text and decodes its ids and arbitrary ids.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/internal/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string text = in.ConsumeRandomLengthString(256);
  const std::string json = in.ConsumeRemainingBytesAsString();
  auto tokenizer = trellis::text::internal::ParseTokenizerJson(json, "fuzz/tokenizer.json");
  if (!tokenizer.ok()) return 0;
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
  if (ids.ok()) (void)(*tokenizer)->Decode(*ids);
  std::vector<int32_t> any;
  for (unsigned char c : text) any.push_back(static_cast<int32_t>(c) * 37 - 1000);
  (void)(*tokenizer)->Decode(any);
  return 0;
}
