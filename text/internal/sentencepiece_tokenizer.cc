#include "text/internal/sentencepiece_tokenizer.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "env/regular_file.h"
#include "text/internal/sentencepiece_model.h"

namespace trellis::text::internal {
namespace {

class SentencePieceTokenizer final : public HfTokenizerBase {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model, AddedTokens cut)
      : HfTokenizerBase(std::move(cut)), model_(std::move(model)) {}

  SpecialIds ModelSpecialIds() const override {
    SpecialIds ids;
    if (model_->bos_id() >= 0) ids.bos = model_->bos_id();
    if (model_->eos_id() >= 0) ids.eos.push_back(model_->eos_id());
    if (model_->pad_id() >= 0) ids.pad = model_->pad_id();
    return ids;
  }

 protected:
  absl::Status EncodePlain(absl::string_view text, std::vector<int32_t>* ids) const override {
    std::vector<int> pieces;
    std::string error;
    if (!model_->Encode(std::string_view(text.data(), text.size()), &pieces, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("SentencePiece: ", error));
    }
    ids->insert(ids->end(), pieces.begin(), pieces.end());
    return absl::OkStatus();
  }

  void DecodePlain(absl::Span<const int32_t> ids, std::string* text) const override {
    std::string decoded;
    std::string error;
    // Ids within the model always decode.
    if (model_->Decode(std::vector<int>(ids.begin(), ids.end()), &decoded, &error)) {
      text->append(decoded);
    }
  }

  int32_t ModelSize() const override { return model_->size(); }

  std::optional<int32_t> ModelIdOf(absl::string_view piece) const override {
    const int id = model_->PieceToId(std::string_view(piece.data(), piece.size()));
    if (id < 0) return std::nullopt;
    return id;
  }

 private:
  std::unique_ptr<SentencePieceModel> model_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizerBase>> NewSentencePieceTokenizer(
    const std::string& path, const std::vector<AddedToken>& added) {
  // SentencePiece opens the file itself: a FIFO or device is refused first.
  if (absl::Status s = env::CheckRegularFile(path); !s.ok()) return s;
  std::string error;
  std::unique_ptr<SentencePieceModel> model = SentencePieceModel::Load(path, &error);
  if (model == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": ", error));
  AddedTokens cut;
  std::vector<int32_t> special_pieces;
  for (const AddedToken& token : added) {
    const bool matched_by_model =
        model->PieceToId(token.content) == token.id && !model->IsControlOrUnknown(token.id);
    if (!matched_by_model) {
      cut.Add(token);
    } else if (token.special) {
      special_pieces.push_back(token.id);
    }
  }
  auto tokenizer = std::make_unique<SentencePieceTokenizer>(std::move(model), std::move(cut));
  for (int32_t id : special_pieces) tokenizer->MarkSpecial(id);
  return tokenizer;
}

}  // namespace trellis::text::internal
