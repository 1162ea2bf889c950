#ifndef TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_MODEL_H_
#define TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::text::internal {

// SentencePiece's processor behind an interface free of its headers:
// Debian's sentencepiece_processor.h declares absl::string_view itself,
// which clashes with Abseil's, so only sentencepiece_model.cc includes it
// (and no Abseil header). Immutable and thread-safe once loaded.
class SentencePieceModel {
 public:
  // Null with `error` set when the file cannot be read or parsed.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  virtual ~SentencePieceModel() = default;

  // False with `error` set when SentencePiece fails.
  virtual bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  virtual bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const = 0;
  virtual int size() const = 0;
  // -1 where absent.
  virtual int PieceToId(std::string_view piece) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  // Control symbols (<s>, </s>) and the unknown piece, which SentencePiece
  // never matches in text; a user-defined or ordinary piece it encodes itself.
  virtual bool IsControlOrUnknown(int id) const = 0;
};

}  // namespace trellis::text::internal

#endif  // TRELLIS_TEXT_INTERNAL_SENTENCEPIECE_MODEL_H_
