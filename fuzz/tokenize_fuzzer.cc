// Encoding and decoding with real tokenizers: the character tokenizer
// (text/tokenizer.h, with the default alphabet and one made of the input)
// and the fixture directories' byte-level BPE tokenizers
// (text/hf_tokenizer.h). The first byte picks the tokenizer; the rest is
// the text, and, read as int32s, ids to decode. Not SentencePiece: its
// library is opened with RTLD_DEEPBIND (text/internal/sentencepiece_model.cc
// says why), which AddressSanitizer cannot load.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "text/hf_tokenizer.h"
#include "text/tokenizer.h"

namespace {

using trellis::text::Tokenizer;

std::vector<std::unique_ptr<Tokenizer>>* Tokenizers() {
  static auto* all = [] {
    auto* t = new std::vector<std::unique_ptr<Tokenizer>>();
    t->push_back(trellis::text::NewCharTokenizer());
    for (const char* name : {"gpt2", "llama3", "qwen2"}) {
      auto hf = trellis::text::LoadHfTokenizer(
          std::string(TRELLIS_SOURCE_DIR "/tests/fixtures/tokenizers/") + name);
      if (!hf.ok()) abort();  // the fixtures load (text/hf_tokenizer_test.cc)
      t->push_back(*std::move(hf));
    }
    return t;
  }();
  return all;
}

void Exercise(const Tokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) abort();  // Encode gives vocabulary ids
    }
    (void)tokenizer.Decode(*ids);
  }
  std::vector<int32_t> any(text.size() / sizeof(int32_t));
  if (!any.empty()) memcpy(any.data(), text.data(), any.size() * sizeof(int32_t));
  (void)tokenizer.Decode(any);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tokenizers = *Tokenizers();
  const size_t pick = data[0] % (tokenizers.size() + 1);
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (pick == tokenizers.size()) {
    // A character tokenizer over the text's own bytes as its alphabet.
    Exercise(*trellis::text::NewCharTokenizer(text.substr(0, text.size() / 2)),
             text.substr(text.size() / 2));
  } else {
    Exercise(*tokenizers[pick], text);
  }
  return 0;
}
