#include "text/internal/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::text::internal {
namespace {

class Processor final : public SentencePieceModel {
 public:
  bool Load(const std::string& path, std::string* error) {
    return Check(processor_.Load(path), error);
  }

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    return Check(processor_.Encode(text, ids), error);
  }
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const override {
    return Check(processor_.Decode(ids, text), error);
  }
  int size() const override { return processor_.GetPieceSize(); }
  int PieceToId(std::string_view piece) const override {
    const int id = processor_.PieceToId(piece);
    // SentencePiece answers the unknown piece's id for any piece it lacks.
    return id == processor_.unk_id() && processor_.IdToPiece(id) != piece ? -1 : id;
  }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }
  int pad_id() const override { return processor_.pad_id(); }
  bool IsControlOrUnknown(int id) const override {
    return processor_.IsControl(id) || processor_.IsUnknown(id);
  }

 private:
  static bool Check(const sentencepiece::util::Status& status, std::string* error) {
    if (status.ok()) return true;
    *error = status.ToString();
    return false;
  }

  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  auto processor = std::make_unique<Processor>();
  if (!processor->Load(path, error)) return nullptr;
  return processor;
}

}  // namespace trellis::text::internal
