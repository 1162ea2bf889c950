// JSONL datasets: one {"prompt": ..., "answer": ..., ...} object per line.

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "env/regular_file.h"
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

// Parses one non-blank line into a JSON object; the message has no location.
absl::StatusOr<Json> ParseObject(const std::string& line) {
  Json obj;
  try {
    obj = Json::parse(line);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for 1e999
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
  return obj;
}

// Removes the string field `key` from `obj` into *out.
absl::Status TakeString(Json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", key, "\" must be a string, found ", it->type_name()));
  }
  *out = it->get<std::string>();
  obj.erase(key);
  return absl::OkStatus();
}

// Removes the target field `key` (a string or a number) from `obj` into *out.
absl::Status TakeTarget(Json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::InvalidArgumentError(absl::StrCat("missing \"", key, "\""));
  if (it->is_string()) {
    *out = it->get<std::string>();
  } else if (it->is_number()) {
    *out = NumberText(*it);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", key, "\" must be a string or a number, found ", it->type_name()));
  }
  obj.erase(key);
  return absl::OkStatus();
}

// Removes "messages" from `obj` into *out as compact JSON: a non-empty list
// of objects, each with a string "role" (model/chat checks the rest when it
// renders them).
absl::Status TakeMessages(Json& obj, std::string* out) {
  const Json& messages = obj["messages"];
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("\"messages\" must be a non-empty list of turns");
  }
  if (messages.size() > kMaxChatMessages) {
    return absl::InvalidArgumentError(absl::StrCat("\"messages\" holds ", messages.size(),
                                                   " turns; a chat holds at most ",
                                                   kMaxChatMessages));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || !messages[i].contains("role") ||
        !messages[i]["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "] must be an object with a string \"role\""));
    }
    if (const size_t bytes = messages[i].dump().size(); bytes > kMaxMessageBytes) {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "] is ", bytes,
                                                     " bytes of JSON; a message holds at most ",
                                                     kMaxMessageBytes));
    }
  }
  *out = messages.dump();
  obj.erase("messages");
  return absl::OkStatus();
}

// An example line: "prompt", or "messages" (a chat) instead; the target is
// "answer", or with `allow_response` (supervised examples) either "answer"
// or "response", which a chat may leave out: its own assistant turns are
// then the targets.
absl::Status ParseExample(Json& obj, bool allow_response, Example& ex) {
  const bool chat = obj.contains("messages");
  if (chat && obj.contains("prompt")) {
    return absl::InvalidArgumentError("both \"prompt\" and \"messages\": expected one");
  }
  absl::Status s = chat ? TakeMessages(obj, &ex.messages_json) : TakeString(obj, "prompt", &ex.prompt);
  if (!s.ok()) return s;
  const bool response = allow_response && obj.contains("response");
  if (response && obj.contains("answer")) {
    return absl::InvalidArgumentError("both \"answer\" and \"response\": expected one");
  }
  const char* target = response ? "response" : "answer";
  if (!(chat && allow_response && !obj.contains(target))) {
    if (s = TakeTarget(obj, target, &ex.answer); !s.ok()) return s;
  }
  ex.metadata_json = obj.dump();
  return absl::OkStatus();
}

absl::Status ParsePair(Json& obj, PreferencePair& pair) {
  for (auto [key, out] : {std::pair{"prompt", &pair.prompt}, std::pair{"chosen", &pair.chosen},
                          std::pair{"rejected", &pair.rejected}}) {
    if (absl::Status s = TakeString(obj, key, out); !s.ok()) return s;
  }
  if (pair.chosen == pair.rejected) {
    return absl::InvalidArgumentError("\"chosen\" and \"rejected\" are the same response");
  }
  pair.metadata_json = obj.dump();
  return absl::OkStatus();
}

// The next line of `in` (its '\n' dropped) into *line; false at the end of
// the input. A line longer than kMaxLineBytes is not read further: *line
// then holds kMaxLineBytes + 1 bytes of it.
bool NextLine(std::istream& in, std::string* line) {
  line->clear();
  std::streambuf& buf = *in.rdbuf();
  for (int c = buf.sbumpc(); c != std::char_traits<char>::eof(); c = buf.sbumpc()) {
    if (c == '\n') return true;
    line->push_back(static_cast<char>(c));
    if (line->size() > kMaxLineBytes) return true;
  }
  in.setstate(std::ios::eofbit);
  return !line->empty();
}

// Reads one T per non-blank line of `path`, parsed by parse(obj, item);
// T::id is the 0-based line index. Errors name the path and line.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> ReadLines(const std::string& path, Parse parse) {
  // A FIFO or device is refused, not waited on.
  if (absl::Status s = env::CheckRegularFile(path); !s.ok()) return s;
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(path, "open");
  std::vector<T> items;
  std::string line;
  for (uint64_t line_no = 1; NextLine(in, &line); ++line_no) {
    if (line.size() > kMaxLineBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": longer than ", kMaxLineBytes, " bytes, the most a line holds"));
    }
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // BOM
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    T item;
    item.id = line_no - 1;
    absl::StatusOr<Json> obj = ParseObject(line);
    absl::Status s = obj.ok() ? parse(*obj, item) : obj.status();
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", s.message()));
    }
    items.push_back(std::move(item));
  }
  if (in.bad()) return FileError(path, "read");
  return items;
}

}  // namespace

absl::StatusOr<std::vector<Example>> ReadJsonl(const std::string& path) {
  return ReadLines<Example>(path,
                            [](Json& obj, Example& ex) { return ParseExample(obj, false, ex); });
}

absl::StatusOr<std::vector<Example>> ReadSftJsonl(const std::string& path) {
  return ReadLines<Example>(path,
                            [](Json& obj, Example& ex) { return ParseExample(obj, true, ex); });
}

absl::StatusOr<std::vector<PreferencePair>> ReadPreferenceJsonl(const std::string& path) {
  return ReadLines<PreferencePair>(path, ParsePair);
}

absl::Status WriteJsonl(const std::string& path, const std::vector<Example>& examples) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FileError(path, "create");
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& ex = examples[i];
    const std::string where = absl::StrCat(path, ": example ", i, " (id ", ex.id, "): ");
    Json obj = Json::object();
    if (ex.messages_json.empty()) {
      obj["prompt"] = ex.prompt;
    } else {
      obj["messages"] = Json::parse(ex.messages_json, nullptr, /*allow_exceptions=*/false);
      if (!obj["messages"].is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "messages_json is not a JSON list: ", ex.messages_json));
      }
    }
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
