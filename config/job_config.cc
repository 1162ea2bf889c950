// YAML → JobConfig through protobuf reflection: the reader knows nothing
// about individual fields, only about field types, so a field added to
// job.proto is readable from YAML without touching this file.

#include "config/job_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/internal/scalars.h"
#include "env/regular_file.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
// yaml-cpp 0.7's node headers trip GCC 12's -Wdangling-pointer (a false
// positive in the library's own inline code).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include "yaml-cpp/yaml.h"
#pragma GCC diagnostic pop
#else
#include "yaml-cpp/yaml.h"
#endif

namespace trellis::config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// "a map", "a list", or the quoted scalar text (shortened), for messages
// that say what was found.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return internal::Quote(node.Scalar());
    default: return "nothing";
  }
}

// A job or config document's bounds (docs/jobs.md): its text, and what
// reading it walks, each alias counted at every use, so that a small file
// of aliases to one large string cannot expand into gigabytes.
constexpr size_t kMaxDocumentBytes = size_t{4} << 20;
constexpr int64_t kMaxExpandedBytes = int64_t{4} << 20;
constexpr int64_t kMaxExpandedValues = 100'000;

std::string Join(const std::string& path, absl::string_view name) {
  return path.empty() ? std::string(name) : absl::StrCat(path, ".", name);
}

class YamlReader {
 public:
  explicit YamlReader(const std::string& source) : source_(source) {}

  // Fills `msg` from the mapping `node`; `path` is the message's field path
  // ("" for the job itself).
  absl::Status ReadMessage(const YAML::Node& node, const std::string& path, Message* msg) {
    const Descriptor* d = msg->GetDescriptor();
    absl::flat_hash_set<int> seen;
    for (const auto& entry : node) {
      // Copies: a yaml-cpp iterator's `->` yields a temporary, which a
      // reference to its members would outlive.
      const YAML::Node key = entry.first;
      const YAML::Node value = entry.second;
      if (absl::Status s = Expand(key, path); !s.ok()) return s;
      if (!key.IsScalar()) {
        return Error(key, path.empty() ? "job" : path,
                     absl::StrCat("expected a field name, found ", Describe(key)));
      }
      const std::string& name = key.Scalar();
      const FieldDescriptor* f = d->FindFieldByName(name);
      const std::string field_path = Join(path, name);
      if (f == nullptr) return UnknownField(key, field_path, path, d);
      if (!seen.insert(f->number()).second) {
        return Error(key, field_path, "field given twice");
      }
      absl::Status s = ReadField(key, value, field_path, f, msg);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Error(const YAML::Node& at, const std::string& path,
                     absl::string_view what) const {
    const int line = at.Mark().line;
    std::string where = line >= 0 ? absl::StrCat(source_, ":", line + 1, ": ")
                                  : absl::StrCat(source_, ": ");
    return absl::InvalidArgumentError(
        absl::StrCat(where, path.empty() ? "" : path + ": ", what));
  }

 private:
  absl::Status UnknownField(const YAML::Node& key, const std::string& field_path,
                            const std::string& parent, const Descriptor* d) const {
    std::vector<std::string> known;
    for (int i = 0; i < d->field_count(); ++i) known.push_back(d->field(i)->name());
    std::string hint;
    const std::string near = internal::ClosestName(key.Scalar(), known);
    if (!near.empty()) hint = absl::StrCat(" (did you mean ", near, "?)");
    return Error(key, field_path,
                 absl::StrCat("unknown field", hint, "; known fields of ",
                              parent.empty() ? "the job" : parent, ": ",
                              absl::StrJoin(known, ", ")));
  }

  // `key` locates errors when the value is empty.
  absl::Status ReadField(const YAML::Node& key, const YAML::Node& value,
                         const std::string& path, const FieldDescriptor* f, Message* msg) {
    const YAML::Node& at = value.IsNull() ? key : value;
    if (f->is_map()) return Error(at, path, "map fields are not supported in YAML");
    if (!f->is_repeated()) return ReadValue(at, value, path, f, msg);
    msg->GetReflection()->ClearField(msg, f);
    if (value.IsNull()) return absl::OkStatus();
    if (!value.IsSequence()) {
      return Error(at, path, absl::StrCat("expected a list, found ", Describe(value)));
    }
    for (size_t i = 0; i < value.size(); ++i) {
      const YAML::Node& item = value[i];
      absl::Status s =
          ReadValue(item, item, absl::StrCat(path, "[", i, "]"), f, msg);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // One value of `f` (the field itself, or one element when repeated).
  absl::Status ReadValue(const YAML::Node& at, const YAML::Node& value,
                         const std::string& path, const FieldDescriptor* f, Message* msg) {
    if (absl::Status s = Expand(value, path); !s.ok()) return s;
    const auto* r = msg->GetReflection();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = f->is_repeated() ? r->AddMessage(msg, f) : r->MutableMessage(msg, f);
      if (value.IsNull()) return absl::OkStatus();
      if (!value.IsMap()) {
        return Error(at, path, absl::StrCat("expected a map of ", f->message_type()->name(),
                                            " fields, found ", Describe(value)));
      }
      return ReadMessage(value, path, sub);
    }
    std::string text;
    if (value.IsScalar()) {
      text = value.Scalar();
    } else if (!(value.IsNull() && f->cpp_type() == FieldDescriptor::CPPTYPE_STRING)) {
      return Error(at, path, absl::StrCat("expected ", internal::TypeName(f),
                                          ", found ", Describe(value)));
    }
    absl::Status s = internal::SetScalar(text, f, msg);
    return s.ok() ? s : Error(at, path, s.message());
  }

  // Counts `node` (and its text) against the document's bounds.
  absl::Status Expand(const YAML::Node& node, const std::string& path) {
    ++values_;
    if (node.IsScalar()) bytes_ += static_cast<int64_t>(node.Scalar().size());
    if (values_ <= kMaxExpandedValues && bytes_ <= kMaxExpandedBytes) return absl::OkStatus();
    return Error(node, path,
                 absl::StrCat("the document expands past its bounds (", kMaxExpandedValues,
                              " values, ", kMaxExpandedBytes,
                              " bytes of text; every use of a YAML alias counts)"));
  }

  const std::string& source_;
  int64_t values_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

absl::Status ParseYamlInto(const std::string& text, const std::string& source,
                           google::protobuf::Message* message) {
  YamlReader reader(source);
  if (text.size() > kMaxDocumentBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": more than ", kMaxDocumentBytes, " bytes, the most a job or config file holds"));
  }
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return absl::OkStatus();
    if (!root.IsMap()) {
      return reader.Error(root, "", absl::StrCat("expected a map of ",
                                                 message->GetDescriptor()->name(),
                                                 " fields, found ", Describe(root)));
    }
    return reader.ReadMessage(root, "", message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": bad YAML: ", e.msg));
  }
}

namespace {

// The text of a config file; `what` ("job", "config") names it in errors.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, const std::string& what) {
  // A directory, FIFO or device is refused, not waited on.
  if (absl::Status s = env::CheckRegularFile(path); !s.ok()) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " file ", path, ": ", s.message()));
  }
  std::ifstream in(path, std::ios::binary);
  // One byte past the bound: ParseYamlInto refuses a longer text.
  std::string text(kMaxDocumentBytes + 1, '\0');
  if (in) in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in && !in.eof()) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " file ", path, ": ", std::strerror(errno)));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// Whether YAML `text` holds no document content (nothing, or only
// comments); false for text that does not parse (ParseYamlInto says why).
bool IsEmptyYaml(const std::string& text) {
  try {
    return YAML::Load(text).IsNull();
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

absl::Status LoadYamlFile(const std::string& path, google::protobuf::Message* message) {
  const std::string what = message->GetDescriptor()->name() == "JobConfig" ? "job" : "config";
  absl::StatusOr<std::string> text = ReadConfigFile(path, what);
  if (!text.ok()) return text.status();
  return ParseYamlInto(*text, path, message);
}

absl::StatusOr<v1::JobConfig> ParseJobYaml(const std::string& text,
                                           const std::string& source) {
  v1::JobConfig job;
  if (absl::Status s = ParseYamlInto(text, source, &job); !s.ok()) return s;
  return job;
}

absl::StatusOr<v1::JobConfig> LoadJobFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadConfigFile(path, "job");
  if (!text.ok()) return text.status();
  if (IsEmptyYaml(*text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the job file is empty (no fields, at most comments); name the fields to set, "
              "or give no job file for the built-in job"));
  }
  return ParseJobYaml(*text, path);
}

}  // namespace trellis::config
