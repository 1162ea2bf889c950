#ifndef TRELLIS_DATA_INTERNAL_PARQUET_READER_H_
#define TRELLIS_DATA_INTERNAL_PARQUET_READER_H_

// One Parquet file's examples, read with Apache Arrow's Parquet reader. This
// header names no Arrow type: parquet_reader.cc is the one file that
// includes Arrow (docs/data.md).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/dataset.h"

namespace trellis::data::internal {

// The columns that hold a row's prompt, answer and chat (data.columns).
struct ParquetColumns {
  std::string prompt;
  std::string answer;
  std::string messages;
  // Supervised examples: a chat's file may have no answer column.
  bool chat_target_optional = false;
};

// Appends the rows of the Parquet file `path` to *out, a row group at a
// time, each row's id its index in *out. A row is a chat when the file has
// the messages column, a prompt otherwise. Errors (not a Parquet file, a
// corrupt page, a missing column or one of the wrong type, a null where a
// string is required, a row past the bounds of data/dataset.h) name the
// file, the column and the row group or row.
[[nodiscard]] absl::Status AppendParquetFile(const std::string& path, const ParquetColumns& columns,
                                             std::vector<Example>* out);

}  // namespace trellis::data::internal

#endif  // TRELLIS_DATA_INTERNAL_PARQUET_READER_H_
