#ifndef TRELLIS_DATA_DATASET_H_
#define TRELLIS_DATA_DATASET_H_

// Datasets of (prompt, answer) examples: JSONL or Parquet files, or the
// built-in arithmetic task.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trellis/v1/job.pb.h"

namespace trellis::data {

struct Example {
  // Stable within the dataset: the example's 0-based line index (JSONL) or
  // its index among the distinct generated problems (arithmetic).
  uint64_t id = 0;
  std::string prompt;
  std::string answer;
  // Any further JSON fields of the line, as compact JSON text ("{}" if none).
  std::string metadata_json = "{}";
  // A chat instead of a prompt: the line's "messages" (role and content
  // turns, tool calls included) as compact JSON, rendered with the model's
  // chat template; empty otherwise.
  std::string messages_json;
};

// The bounds of a data file's lines (docs/jobs.md), checked while reading,
// before a line is held whole: a longer line, a chat of more messages or a
// larger message is refused naming the file and line.
inline constexpr size_t kMaxLineBytes = size_t{8} << 20;
inline constexpr size_t kMaxChatMessages = 1024;
// One message of a chat, as JSON text (its role, content, tool calls).
inline constexpr size_t kMaxMessageBytes = size_t{1} << 20;
// A Parquet row group larger than this (uncompressed, as the file's
// metadata says) is refused before it is read; a row's prompt and answer
// together hold at most kMaxLineBytes.
inline constexpr size_t kMaxRowGroupBytes = size_t{1} << 30;

// One {"prompt": str, "answer": str|number, ...} object per line, or
// {"messages": [...], "answer": ...}; blank lines are skipped. Errors name
// the path and line number.
[[nodiscard]] absl::StatusOr<std::vector<Example>> ReadJsonl(const std::string& path);
[[nodiscard]] absl::Status WriteJsonl(const std::string& path,
                                      const std::vector<Example>& examples);

// The examples of data.train_path or eval_path: Parquet when `path` is a
// directory (its *.parquet files in name order), names a .parquet file, or
// its last part has a '*' ("data/train-*.parquet": the matching files in
// name order), read through `columns` (docs/data.md); otherwise JSON lines
// (ReadJsonl, or with `sft` ReadSftJsonl). A Parquet example's id is its
// row's index over the files in order. Errors name the file, column and row.
[[nodiscard]] absl::StatusOr<std::vector<Example>> ReadExamples(const std::string& path,
                                                                const v1::DataColumns& columns,
                                                                bool sft);

struct Split {
  std::vector<Example> train;
  std::vector<Example> eval;
};

// Supervised examples (SFT jobs): as ReadJsonl, but the target may be named
// "response" instead of "answer" (one of the two, not both); it is stored
// in Example::answer. A chat may have neither: its assistant turns are the
// targets.
[[nodiscard]] absl::StatusOr<std::vector<Example>> ReadSftJsonl(const std::string& path);

// A preference pair: two responses to one prompt, the chosen one preferred.
struct PreferencePair {
  // The 0-based line index (JSONL) or the source example's id (arithmetic).
  uint64_t id = 0;
  std::string prompt;
  std::string chosen;
  std::string rejected;
  // Any further JSON fields of the line, as compact JSON text ("{}" if none).
  std::string metadata_json = "{}";
};

struct PreferenceSplit {
  std::vector<PreferencePair> train;
  std::vector<PreferencePair> eval;
};

// One {"prompt": str, "chosen": str, "rejected": str, ...} object per line;
// blank lines are skipped. Errors name the path and line number; a pair
// whose chosen and rejected responses are equal is refused.
[[nodiscard]] absl::StatusOr<std::vector<PreferencePair>> ReadPreferenceJsonl(
    const std::string& path);

// Preference pairs from arithmetic examples: chosen is the answer, rejected
// a wrong answer drawn from `seed`: half are near misses (1 to 9 away), half
// the answer followed by one more digit (a response that did not stop).
std::vector<PreferencePair> ArithmeticPreferences(const std::vector<Example>& examples,
                                                  uint64_t seed);

// Draws distinct problems "a+b=" / "a-b=" (answers may be negative),
// deduplicates them, then splits: no prompt is in both halves.
Split GenerateArithmetic(const v1::ArithmeticTaskConfig& config, uint64_t seed);

// Endless shuffled passes over a dataset, reproducible from (seed,
// position): the position is what a checkpoint saves.
class PromptStream {
 public:
  PromptStream(std::vector<Example> examples, uint64_t seed);
  // The example at position(), then advances. Pass k of the data (positions
  // [k * size(), (k + 1) * size())) is a permutation drawn from (seed, k).
  // REQUIRES: the dataset is not empty.
  const Example& Next();
  uint64_t position() const { return position_; }
  // The example at `position` (what Next() returned or will return there);
  // position() is unchanged.
  const Example& At(uint64_t position);
  // Resumes at a saved position(): the following Next() calls return what
  // they returned the first time from there.
  void Seek(uint64_t position);
  size_t size() const { return examples_.size(); }

 private:
  void Shuffle();
  std::vector<Example> examples_;
  std::vector<size_t> order_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
  uint64_t position_ = 0;
};

}  // namespace trellis::data

#endif  // TRELLIS_DATA_DATASET_H_
