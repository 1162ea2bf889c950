// ReadExamples: a job's data path as JSON lines or as Parquet shards.

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/internal/parquet_reader.h"

namespace trellis::data {
namespace {

namespace fs = std::filesystem;

// The files of a directory whose names match `pattern`, in name order.
absl::StatusOr<std::vector<std::string>> Matching(const fs::path& dir, const std::string& pattern,
                                                  const std::string& path) {
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", path, ": ", ec.message()));
  std::vector<std::string> files;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (fnmatch(pattern.c_str(), name.c_str(), FNM_PERIOD) == 0)
      files.push_back(it->path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", path, ": ", ec.message()));
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no Parquet files (", pattern, ") found"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The Parquet files `path` names, or an empty list for a JSON-lines file.
absl::StatusOr<std::vector<std::string>> ParquetFiles(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return Matching(p, "*.parquet", path);
  const std::string name = p.filename().string();
  if (absl::StrContains(name, '*')) return Matching(p.parent_path(), name, path);
  if (absl::EndsWith(name, ".parquet")) return std::vector<std::string>{path};
  return std::vector<std::string>{};
}

}  // namespace

absl::StatusOr<std::vector<Example>> ReadExamples(const std::string& path,
                                                  const v1::DataColumns& columns, bool sft) {
  absl::StatusOr<std::vector<std::string>> files = ParquetFiles(path);
  if (!files.ok()) return files.status();
  if (files->empty()) return sft ? ReadSftJsonl(path) : ReadJsonl(path);
  const internal::ParquetColumns cols{columns.prompt(), columns.answer(), columns.messages(), sft};
  std::vector<Example> examples;
  for (const std::string& file : *files) {
    if (absl::Status s = internal::AppendParquetFile(file, cols, &examples); !s.ok()) return s;
  }
  return examples;
}

}  // namespace trellis::data
