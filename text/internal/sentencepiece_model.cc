#include "text/internal/sentencepiece_model.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::text::internal {
namespace {

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;

// libsentencepiece carries its own copy of protobuf-lite and exports it:
// linked like any library, its symbols and libprotobuf's replace one
// another and the process crashes before main. So it is opened with
// RTLD_LOCAL | RTLD_DEEPBIND (it binds to its own copy, nothing else sees
// it), and the few functions called outside the processor's vtable are
// looked up by name: its constructor, Status's destructor and message.
struct Library {
  Library() {
    handle = dlopen(TRELLIS_SENTENCEPIECE_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      error = dlerror();
      return;
    }
    construct = reinterpret_cast<void (*)(SentencePieceProcessor*)>(
        dlsym(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    destroy_status =
        reinterpret_cast<void (*)(Status*)>(dlsym(handle, "_ZN13sentencepiece4util6StatusD1Ev"));
    status_message = reinterpret_cast<const char* (*)(const Status*)>(
        dlsym(handle, "_ZNK13sentencepiece4util6Status13error_messageEv"));
    if (construct == nullptr || destroy_status == nullptr || status_message == nullptr) {
      error = "a SentencePiece function is missing from " TRELLIS_SENTENCEPIECE_LIBRARY;
    }
  }
  void* handle = nullptr;
  std::string error;
  void (*construct)(SentencePieceProcessor*) = nullptr;
  void (*destroy_status)(Status*) = nullptr;
  const char* (*status_message)(const Status*) = nullptr;
};

const Library& Lib() {
  static const Library* library = new Library();
  return *library;
}

// A Status returned by the library, destroyed by the library.
class StatusHolder {
 public:
  template <typename Call>
  explicit StatusHolder(Call call) {
    new (storage_) Status(call());
  }
  ~StatusHolder() { Lib().destroy_status(status()); }
  bool Check(std::string* error) {
    if (status()->ok()) return true;
    *error = Lib().status_message(status());
    return false;
  }

 private:
  Status* status() { return std::launder(reinterpret_cast<Status*>(storage_)); }
  alignas(Status) unsigned char storage_[sizeof(Status)];
};

class Processor final : public SentencePieceModel {
 public:
  Processor() : processor_(static_cast<SentencePieceProcessor*>(::operator new(sizeof(SentencePieceProcessor)))) {
    Lib().construct(processor_);
  }
  ~Processor() override { delete processor_; }  // the library's virtual destructor

  bool Load(const std::string& path, std::string* error) {
    return StatusHolder([&] { return processor_->Load(path); }).Check(error);
  }

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    return StatusHolder([&] { return processor_->Encode(text, ids); }).Check(error);
  }
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const override {
    return StatusHolder([&] { return processor_->Decode(ids, text); }).Check(error);
  }
  int size() const override { return processor_->GetPieceSize(); }
  int PieceToId(std::string_view piece) const override {
    const int id = processor_->PieceToId(piece);
    // SentencePiece answers the unknown piece's id for any piece it lacks.
    return id == processor_->unk_id() && processor_->IdToPiece(id) != piece ? -1 : id;
  }
  int bos_id() const override { return processor_->bos_id(); }
  int eos_id() const override { return processor_->eos_id(); }
  int pad_id() const override { return processor_->pad_id(); }
  bool IsControlOrUnknown(int id) const override {
    return processor_->IsControl(id) || processor_->IsUnknown(id);
  }

 private:
  SentencePieceProcessor* processor_;
};

}  // namespace

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  if (!Lib().error.empty()) {
    *error = Lib().error;
    return nullptr;
  }
  auto processor = std::make_unique<Processor>();
  if (!processor->Load(path, error)) return nullptr;
  return processor;
}

}  // namespace trellis::text::internal
