#include "jinja/json_dumps.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace trellis::jinja {
namespace {

std::string Quote(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += absl::StrFormat("\\u%04x", static_cast<uint32_t>(c));
          }
        } else {
          out += EncodeUtf8(std::u32string(1, c));
        }
    }
  }
  return out + "\"";
}

class Dumper {
 public:
  explicit Dumper(const DumpsOptions& options) : options_(options) {
    if (options.separators) {
      item_sep_ = options.separators->first;
      key_sep_ = options.separators->second;
    } else {
      item_sep_ = options.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  void Dump(const Json& j, int level) {
    if (j.is_array()) {
      if (j.empty()) {
        out_ += "[]";
        return;
      }
      out_ += "[";
      for (size_t i = 0; i < j.size(); ++i) {
        Separate(i == 0, level + 1);
        Dump(j[i], level + 1);
      }
      Close(level, ']');
    } else if (j.is_object()) {
      if (j.empty()) {
        out_ += "{}";
        return;
      }
      std::vector<std::string> keys;
      for (const auto& item : j.items()) keys.push_back(item.key());
      if (options_.sort_keys) std::sort(keys.begin(), keys.end());
      out_ += "{";
      for (size_t i = 0; i < keys.size(); ++i) {
        Separate(i == 0, level + 1);
        out_ += Quote(keys[i], options_.ensure_ascii) + key_sep_;
        Dump(j.at(keys[i]), level + 1);
      }
      Close(level, '}');
    } else if (j.is_string()) {
      out_ += Quote(j.get<std::string>(), options_.ensure_ascii);
    } else if (j.is_number_float()) {
      const double d = j.get<double>();
      out_ += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                                    : PythonFloatRepr(d);
    } else {
      out_ += j.dump();
    }
  }

  std::string Take() { return std::move(out_); }

 private:
  void Separate(bool first, int level) {
    if (!first) out_ += item_sep_;
    if (options_.indent) out_ += "\n" + std::string(static_cast<size_t>(*options_.indent * level), ' ');
  }
  void Close(int level, char bracket) {
    if (options_.indent) out_ += "\n" + std::string(static_cast<size_t>(*options_.indent * level), ' ');
    out_ += bracket;
  }

  const DumpsOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
  std::string out_;
};

}  // namespace

std::string JsonDumps(const Json& j, const DumpsOptions& options) {
  Dumper dumper(options);
  dumper.Dump(j, 0);
  return dumper.Take();
}

}  // namespace trellis::jinja
