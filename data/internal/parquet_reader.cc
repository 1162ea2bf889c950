// Parquet datasets through Apache Arrow's Parquet reader: the file's schema
// is checked against the job's columns first, then each row group is read
// (only those columns) and turned into examples before the next is read.

#include "data/internal/parquet_reader.h"

#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "arrow/array.h"
#include "arrow/io/file.h"
#include "arrow/memory_pool.h"
#include "arrow/scalar.h"
#include "arrow/table.h"
#include "arrow/type.h"
#include "env/regular_file.h"
#include "nlohmann/json.hpp"
#include "parquet/arrow/reader.h"
#include "parquet/arrow/schema.h"
#include "parquet/file_reader.h"
#include "parquet/metadata.h"

namespace trellis::data::internal {
namespace {

using Json = nlohmann::ordered_json;

bool IsString(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING ||
         t.id() == arrow::Type::STRING_VIEW;
}

bool IsNumber(const arrow::DataType& t) {
  return arrow::is_integer(t.id()) || arrow::is_floating(t.id());
}

// REQUIRES: IsString(a.type()), a is not null at i.
std::string_view StringAt(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case arrow::Type::STRING: return static_cast<const arrow::StringArray&>(a).GetView(i);
    case arrow::Type::LARGE_STRING:
      return static_cast<const arrow::LargeStringArray&>(a).GetView(i);
    default: return static_cast<const arrow::StringViewArray&>(a).GetView(i);
  }
}

// A number answer as text, as a JSON line's: integers (also 3.0) without a
// fraction. REQUIRES: IsNumber(a.type()), a is not null at i.
std::string NumberAt(const arrow::Array& a, int64_t i) {
  if (a.type_id() == arrow::Type::DOUBLE || a.type_id() == arrow::Type::FLOAT) {
    const double d = a.type_id() == arrow::Type::DOUBLE
                         ? static_cast<const arrow::DoubleArray&>(a).Value(i)
                         : static_cast<const arrow::FloatArray&>(a).Value(i);
    if (std::trunc(d) == d && std::fabs(d) < 1e15) return absl::StrCat(static_cast<int64_t>(d));
  }
  return a.GetScalar(i).ValueOrDie()->ToString();
}

// Row i of a list column L: its first item in values, its length.
struct ListSpan {
  int64_t begin = 0;
  int64_t length = 0;
  std::shared_ptr<arrow::Array> values;
};
template <typename L>
ListSpan SpanOf(const arrow::Array& a, int64_t i) {
  const auto& list = static_cast<const L&>(a);
  return {list.value_offset(i), list.value_length(i), list.values()};
}

// The chat column's type: a list of structs with a string "role" and, if
// any, a string "content".
bool IsChat(const arrow::DataType& t) {
  if (t.id() != arrow::Type::LIST && t.id() != arrow::Type::LARGE_LIST) return false;
  const arrow::DataType& item = *static_cast<const arrow::BaseListType&>(t).value_type();
  if (item.id() != arrow::Type::STRUCT) return false;
  const auto& st = static_cast<const arrow::StructType&>(item);
  const std::shared_ptr<arrow::Field> role = st.GetFieldByName("role");
  const std::shared_ptr<arrow::Field> content = st.GetFieldByName("content");
  return role != nullptr && IsString(*role->type()) &&
         (content == nullptr || IsString(*content->type()));
}

// One column the job reads: its name, the data.columns field naming it, and
// its index in the file's schema (-1 where the file has none).
struct Column {
  std::string name;
  const char* field;
  int index = -1;
  // Its Parquet leaf columns (what ReadRowGroup reads).
  std::vector<int> leaves;
  std::string Where() const {
    return absl::StrCat("column \"", name, "\" (data.columns.", field, ")");
  }
};

class FileReader {
 public:
  FileReader(const std::string& path, const ParquetColumns& columns, std::vector<Example>* out)
      : path_(path),
        out_(out),
        prompt_{columns.prompt, "prompt"},
        answer_{columns.answer, "answer"},
        messages_{columns.messages, "messages"},
        chat_target_optional_(columns.chat_target_optional) {}

  absl::Status Read() {
    arrow::Result<std::shared_ptr<arrow::io::ReadableFile>> file =
        arrow::io::ReadableFile::Open(path_);
    if (!file.ok()) return Error(absl::StrCat("cannot open: ", file.status().message()));
    arrow::Result<std::unique_ptr<parquet::arrow::FileReader>> reader =
        parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
    if (!reader.ok()) {
      return Error(absl::StrCat("not a Parquet file: ", reader.status().message()));
    }
    reader_ = *std::move(reader);
    if (absl::Status s = CheckSchema(); !s.ok()) return s;
    const int groups = reader_->num_row_groups();
    for (int g = 0; g < groups; ++g) {
      if (absl::Status s = ReadRowGroup(g); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  }

  // Finds the columns and checks their types.
  absl::Status CheckSchema() {
    std::shared_ptr<arrow::Schema> schema;
    if (arrow::Status s = reader_->GetSchema(&schema); !s.ok()) {
      return Error(absl::StrCat("unreadable schema: ", s.message()));
    }
    std::vector<std::string> names;
    for (const auto& f : schema->fields()) names.push_back(absl::StrCat("\"", f->name(), "\""));
    const std::string has = absl::StrCat("; the file's columns: ", absl::StrJoin(names, ", "));
    for (Column* c : {&prompt_, &answer_, &messages_}) {
      if (schema->GetAllFieldIndices(c->name).size() > 1) {
        return Error(absl::StrCat(c->Where(), " appears more than once"));
      }
      c->index = schema->GetFieldIndex(c->name);
    }
    chat_ = messages_.index >= 0;
    if (chat_ && prompt_.index >= 0) {
      return Error(
          absl::StrCat("both ", prompt_.Where(), " and ", messages_.Where(), ": expected one"));
    }
    if (!chat_ && prompt_.index < 0) {
      return Error(absl::StrCat("no ", prompt_.Where(), " nor ", messages_.Where(), has));
    }
    if (answer_.index < 0 && !(chat_ && chat_target_optional_)) {
      return Error(absl::StrCat("no ", answer_.Where(), has));
    }
    const Column& input = chat_ ? messages_ : prompt_;
    const arrow::DataType& input_type = *schema->field(input.index)->type();
    if (chat_ ? !IsChat(input_type) : !IsString(input_type)) {
      return Error(absl::StrCat(
          input.Where(), " is ", input_type.ToString(), "; expected ",
          chat_ ? "a list of structs with string fields \"role\" and \"content\"" : "a string"));
    }
    if (answer_.index >= 0) {
      const arrow::DataType& t = *schema->field(answer_.index)->type();
      if (!IsString(t) && !IsNumber(t)) {
        return Error(
            absl::StrCat(answer_.Where(), " is ", t.ToString(), "; expected a string or a number"));
      }
    }
    for (Column* c : {&prompt_, &answer_, &messages_}) {
      if (c->index >= 0) AddLeaves(reader_->manifest().schema_fields[c->index], &c->leaves);
    }
    return absl::OkStatus();
  }

  absl::Status ReadRowGroup(int g) {
    const std::string where = absl::StrCat("row group ", g);
    const int64_t bytes = reader_->parquet_reader()->metadata()->RowGroup(g)->total_byte_size();
    if (bytes > static_cast<int64_t>(kMaxRowGroupBytes)) {
      return Error(absl::StrCat(where, " is ", bytes, " bytes; a row group holds at most ",
                                kMaxRowGroupBytes));
    }
    const Column& input = chat_ ? messages_ : prompt_;
    std::shared_ptr<arrow::Array> in;
    std::shared_ptr<arrow::Array> answer;
    if (absl::Status s = ReadColumn(g, input, &in); !s.ok()) return s;
    if (answer_.index >= 0) {
      if (absl::Status s = ReadColumn(g, answer_, &answer); !s.ok()) return s;
    }
    for (int64_t i = 0; i < in->length(); ++i) {
      Example ex;
      ex.id = out_->size();
      const std::string row = absl::StrCat(where, ", row ", first_row_ + i);
      absl::Status s =
          chat_ ? Messages(*in, i, &ex.messages_json) : Text(*in, i, input, &ex.prompt);
      if (s.ok() && answer != nullptr) s = Answer(*answer, i, &ex.answer);
      if (s.ok() && ex.prompt.size() + ex.answer.size() > kMaxLineBytes) {
        s = absl::InvalidArgumentError(absl::StrCat("prompt and answer hold ",
                                                    ex.prompt.size() + ex.answer.size(),
                                                    " bytes; a row holds at most ", kMaxLineBytes));
      }
      if (!s.ok()) return Error(absl::StrCat(row, ": ", s.message()));
      out_->push_back(std::move(ex));
    }
    first_row_ += in->length();
    return absl::OkStatus();
  }

  // The Parquet leaf columns under a field: what ReadRowGroup reads.
  static void AddLeaves(const parquet::arrow::SchemaField& field, std::vector<int>* out) {
    if (field.is_leaf()) out->push_back(field.column_index);
    for (const parquet::arrow::SchemaField& child : field.children) AddLeaves(child, out);
  }

  // Row group g's column c as one array.
  absl::Status ReadColumn(int g, const Column& c, std::shared_ptr<arrow::Array>* out) const {
    const std::string where = absl::StrCat("row group ", g, ", ", c.Where());
    std::shared_ptr<arrow::ChunkedArray> col;
    try {
      arrow::Result<std::shared_ptr<arrow::Table>> read = reader_->ReadRowGroup(g, c.leaves);
      if (read.ok()) read = (*read)->CombineChunks();
      if (!read.ok()) return Error(absl::StrCat(where, ": ", read.status().message()));
      col = (*read)->column(0);
    } catch (const std::exception& e) {  // parquet::ParquetException from a corrupt page
      return Error(absl::StrCat(where, ": ", e.what()));
    }
    *out = col->num_chunks() > 0 ? col->chunk(0) : arrow::MakeEmptyArray(col->type()).ValueOrDie();
    return absl::OkStatus();
  }

  static absl::Status Text(const arrow::Array& a, int64_t i, const Column& c, std::string* out) {
    if (a.IsNull(i))
      return absl::InvalidArgumentError(absl::StrCat(c.Where(), " is null; expected a string"));
    *out = std::string(StringAt(a, i));
    return absl::OkStatus();
  }

  absl::Status Answer(const arrow::Array& a, int64_t i, std::string* out) const {
    if (a.IsNull(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(answer_.Where(), " is null; expected a string or a number"));
    }
    *out = IsString(*a.type()) ? std::string(StringAt(a, i)) : NumberAt(a, i);
    return absl::OkStatus();
  }

  // The chat at row i as compact JSON, [{"role": ..., "content": ...}, ...]
  // (a null content left out), within the bounds of data/dataset.h.
  absl::Status Messages(const arrow::Array& a, int64_t i, std::string* out) const {
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(messages_.Where(), ": ", what));
    };
    if (a.IsNull(i)) return bad("null; expected a non-empty list of turns");
    const auto [begin, length, values] = a.type_id() == arrow::Type::LIST
                                             ? SpanOf<arrow::ListArray>(a, i)
                                             : SpanOf<arrow::LargeListArray>(a, i);
    if (length == 0) return bad("an empty list; expected a non-empty list of turns");
    if (length > static_cast<int64_t>(kMaxChatMessages)) {
      return bad(absl::StrCat(length, " turns; a chat holds at most ", kMaxChatMessages));
    }
    const auto& turns = static_cast<const arrow::StructArray&>(*values);
    const std::shared_ptr<arrow::Array> role = turns.GetFieldByName("role");
    const std::shared_ptr<arrow::Array> content = turns.GetFieldByName("content");
    Json chat = Json::array();
    for (int64_t k = 0; k < length; ++k) {
      const int64_t j = begin + k;
      if (turns.IsNull(j) || role->IsNull(j)) {
        return bad(absl::StrCat("messages[", k, "] has a null \"role\"; expected a string"));
      }
      Json turn = {{"role", std::string(StringAt(*role, j))}};
      if (content != nullptr && !content->IsNull(j))
        turn["content"] = std::string(StringAt(*content, j));
      const size_t bytes = turn.dump().size();
      if (bytes > kMaxMessageBytes) {
        return bad(absl::StrCat("messages[", k, "] is ", bytes,
                                " bytes of JSON; a message holds at most ", kMaxMessageBytes));
      }
      chat.push_back(std::move(turn));
    }
    *out = chat.dump();
    return absl::OkStatus();
  }

  const std::string& path_;
  std::vector<Example>* out_;
  Column prompt_;
  Column answer_;
  Column messages_;
  bool chat_target_optional_;
  bool chat_ = false;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  int64_t first_row_ = 0;
};

}  // namespace

absl::Status AppendParquetFile(const std::string& path, const ParquetColumns& columns,
                               std::vector<Example>* out) {
  // A FIFO or device is refused, not waited on.
  if (absl::Status s = env::CheckRegularFile(path); !s.ok()) return s;
  try {
    return FileReader(path, columns, out).Read();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

}  // namespace trellis::data::internal
