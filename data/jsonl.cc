// JSONL datasets: one {"prompt": ..., "answer": ..., ...} object per line.

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "nlohmann/json.hpp"

namespace trellis::data {
namespace {

// Keeps the metadata fields in file order.
using Json = nlohmann::ordered_json;

absl::Status FileError(const std::string& path, const char* verb) {
  const int err = errno;
  std::string msg = absl::StrCat("cannot ", verb, " ", path, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC) return absl::ResourceExhaustedError(msg);
  if (std::strcmp(verb, "write") == 0) return absl::InternalError(msg);
  return absl::NotFoundError(msg);
}

// A number answer as text: integers (also 3.0) without a fraction.
std::string NumberText(const Json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::trunc(d) == d && std::fabs(d) < 1e15) {
      return absl::StrCat(static_cast<int64_t>(d));
    }
  }
  return v.dump();
}

// Parses one non-blank line into `ex`; the message has no location.
absl::Status ParseLine(const std::string& line, Example& ex) {
  Json obj;
  try {
    obj = Json::parse(line);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    if (const size_t close = what.find("] "); close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat("bad JSON: ", what));
  }
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a JSON object, found ", obj.type_name()));
  }
  auto prompt = obj.find("prompt");
  if (prompt == obj.end()) return absl::InvalidArgumentError("missing \"prompt\"");
  if (!prompt->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"prompt\" must be a string, found ", prompt->type_name()));
  }
  ex.prompt = prompt->get<std::string>();
  auto answer = obj.find("answer");
  if (answer == obj.end()) return absl::InvalidArgumentError("missing \"answer\"");
  if (answer->is_string()) {
    ex.answer = answer->get<std::string>();
  } else if (answer->is_number()) {
    ex.answer = NumberText(*answer);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"answer\" must be a string or a number, found ", answer->type_name()));
  }
  obj.erase("prompt");
  obj.erase("answer");
  ex.metadata_json = obj.dump();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Example>> ReadJsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(path, "open");
  std::vector<Example> examples;
  std::string line;
  for (uint64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // BOM
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    Example ex;
    ex.id = line_no - 1;
    absl::Status s = ParseLine(line, ex);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", s.message()));
    }
    examples.push_back(std::move(ex));
  }
  if (in.bad()) return FileError(path, "read");
  return examples;
}

absl::Status WriteJsonl(const std::string& path, const std::vector<Example>& examples) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FileError(path, "create");
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& ex = examples[i];
    const std::string where = absl::StrCat(path, ": example ", i, " (id ", ex.id, "): ");
    Json obj = Json::object();
    obj["prompt"] = ex.prompt;
    obj["answer"] = ex.answer;
    Json meta = Json::parse(ex.metadata_json.empty() ? "{}" : ex.metadata_json, nullptr,
                            /*allow_exceptions=*/false);
    if (!meta.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "metadata_json is not a JSON object: ", ex.metadata_json));
    }
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (obj.contains(it.key())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "metadata_json repeats the field \"", it.key(), "\""));
      }
      obj[it.key()] = it.value();
    }
    try {
      out << obj.dump() << '\n';
    } catch (const Json::type_error& e) {  // invalid UTF-8
      return absl::InvalidArgumentError(absl::StrCat(where, e.what()));
    }
  }
  out.close();
  if (!out) return FileError(path, "write");
  return absl::OkStatus();
}

}  // namespace trellis::data
