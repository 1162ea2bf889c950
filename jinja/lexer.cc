#include "jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trellis::jinja {
namespace {

constexpr char kEscapes[] = "n\nt\tr\rb\bf\fv\va\a0\0\\\\''\"\"";

// Operators, longest first so "//" wins over "/".
constexpr absl::string_view kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                           "%",  "~",  "<",  ">",  "(",  ")",  "[", "]", "{", "}",
                                           ",",  ".",  ":",  "|",  "="};

std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsInlineSpace(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options)
      : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (i_ < src_.size()) {
      const size_t tag = NextTag(i_);
      std::string text = src_.substr(i_, tag - i_);
      const Position text_pos = pos_;
      if (tag < src_.size()) {
        const char kind = src_[tag + 1];
        const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        if (modifier == '-') {
          text.erase(text.find_last_not_of(" \t\n\v\f") + 1);
        } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
          const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
          if ((line_start > 0 || line_starting) &&
              std::all_of(text.begin() + line_start, text.end(), IsInlineSpace)) {
            text.erase(line_start);
          }
        }
      }
      Advance(tag - i_);
      if (!text.empty()) tokens_.push_back(Token{TokenKind::kText, std::move(text), {}, text_pos});
      if (tag >= src_.size()) break;
      absl::Status status = src_[tag + 1] == '#' ? Comment() : Tag();
      if (!status.ok()) return status;
      line_starting = i_ > 0 && src_[i_ - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", {}, pos_});
    return std::move(tokens_);
  }

 private:
  size_t NextTag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) {
        return k;
      }
    }
    return src_.size();
  }

  void Advance(size_t n) {
    for (size_t k = 0; k < n && i_ < src_.size(); ++k, ++i_) {
      if (src_[i_] == '\n') {
        ++pos_.line;
        pos_.column = 1;
      } else if ((static_cast<unsigned char>(src_[i_]) & 0xC0) != 0x80) {
        ++pos_.column;
      }
    }
  }

  bool At(absl::string_view s) const { return absl::string_view(src_).substr(std::min(i_, src_.size()), s.size()) == s; }

  // After a closing delimiter: "-" strips all whitespace, "+" keeps it,
  // trim_blocks (for block and comment tags) drops one newline.
  void AfterClose(char modifier, bool block) {
    if (modifier == '-') {
      while (i_ < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[i_]))) {
        Advance(1);
      }
    } else if (modifier != '+' && block && options_.trim_blocks && At("\n")) {
      Advance(1);
    }
  }

  absl::Status Comment() {
    const Position open = pos_;
    const size_t close = src_.find("#}", i_ + 2);
    if (close == std::string::npos) return ErrorAt(open, "comment is never closed with #}");
    const char modifier = src_[close - 1];
    Advance(close + 2 - i_);
    AfterClose(modifier, true);
    return absl::OkStatus();
  }

  absl::Status Tag() {
    const Position open = pos_;
    const bool block = src_[i_ + 1] == '%';
    tokens_.push_back(Token{block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", {}, open});
    Advance(2);
    if (At("-") || (block && At("+"))) Advance(1);
    const absl::string_view close = block ? "%}" : "}}";
    int depth = 0;
    while (true) {
      while (i_ < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[i_]))) {
        Advance(1);
      }
      if (i_ >= src_.size()) {
        return ErrorAt(open, absl::StrCat("tag is never closed with ", close));
      }
      if (depth == 0) {
        char modifier = '\0';
        if ((At("-") || (block && At("+"))) && absl::string_view(src_).substr(std::min(i_ + 1, src_.size()), 2) == close) {
          modifier = src_[i_];
          Advance(1);
        }
        if (At(close)) {
          tokens_.push_back(Token{block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", {}, pos_});
          Advance(2);
          AfterClose(modifier, block);
          return absl::OkStatus();
        }
      }
      absl::Status status = ExpressionToken(depth);
      if (!status.ok()) return status;
    }
  }

  absl::Status ExpressionToken(int& depth) {
    const Position start = pos_;
    const char c = src_[i_];
    if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = i_;
      while (end < src_.size() &&
             (absl::ascii_isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
        ++end;
      }
      tokens_.push_back(Token{TokenKind::kName, src_.substr(i_, end - i_), {}, start});
      Advance(end - i_);
      return absl::OkStatus();
    }
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) return Number(start);
    if (c == '\'' || c == '"') return String(start);
    for (absl::string_view op : kOperators) {
      if (!At(op)) continue;
      if (op == "(" || op == "[" || op == "{") ++depth;
      if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
      tokens_.push_back(Token{TokenKind::kOperator, std::string(op), {}, start});
      Advance(op.size());
      return absl::OkStatus();
    }
    return ErrorAt(start, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status Number(Position start) {
    std::string digits;
    bool is_float = false;
    auto take_digits = [&] {
      while (i_ < src_.size() && (absl::ascii_isdigit(static_cast<unsigned char>(src_[i_])) ||
                                  src_[i_] == '_')) {
        if (src_[i_] != '_') digits += src_[i_];
        Advance(1);
      }
    };
    take_digits();
    if (At(".") && i_ + 1 < src_.size() && absl::ascii_isdigit(static_cast<unsigned char>(src_[i_ + 1]))) {
      is_float = true;
      digits += '.';
      Advance(1);
      take_digits();
    }
    if ((At("e") || At("E")) && i_ + 1 < src_.size() &&
        (absl::ascii_isdigit(static_cast<unsigned char>(src_[i_ + 1])) || src_[i_ + 1] == '+' ||
         src_[i_ + 1] == '-')) {
      is_float = true;
      digits += 'e';
      Advance(1);
      if (At("+") || At("-")) {
        digits += src_[i_];
        Advance(1);
      }
      take_digits();
    }
    Json number;
    if (is_float) {
      number = std::strtod(digits.c_str(), nullptr);
    } else {
      errno = 0;
      const long long v = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) return ErrorAt(start, absl::StrCat("integer ", digits, " is too large"));
      number = static_cast<int64_t>(v);
    }
    tokens_.push_back(Token{TokenKind::kNumber, digits, std::move(number), start});
    return absl::OkStatus();
  }

  absl::Status String(Position start) {
    const char quote = src_[i_];
    Advance(1);
    std::string value;
    while (true) {
      if (i_ >= src_.size()) return ErrorAt(start, "string literal is never closed");
      const char c = src_[i_];
      if (c == quote) break;
      if (c != '\\' || i_ + 1 >= src_.size()) {
        value += c;
        Advance(1);
        continue;
      }
      const char e = src_[i_ + 1];
      Advance(2);
      const absl::string_view kSimple(kEscapes, sizeof(kEscapes) - 1);
      const size_t k = kSimple.find(e);
      if (k != absl::string_view::npos && k % 2 == 0) {
        value += kSimple[k + 1];
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        const std::string hex = src_.substr(i_, len);
        if (hex.size() != len || !std::all_of(hex.begin(), hex.end(), [](char h) {
              return absl::ascii_isxdigit(static_cast<unsigned char>(h));
            })) {
          return ErrorAt(start, absl::StrCat("bad \\", std::string(1, e), " escape in string"));
        }
        value += EncodeUtf8(std::u32string(1, static_cast<char32_t>(std::stoul(hex, nullptr, 16))));
        Advance(len);
      } else if (e == '\n') {
        // A backslash before a newline continues the line.
      } else {
        value += '\\';
        value += e;
      }
    }
    Advance(1);
    tokens_.push_back(Token{TokenKind::kString, std::move(value), {}, start});
    return absl::OkStatus();
  }

  std::string src_;
  LexOptions options_;
  size_t i_ = 0;
  Position pos_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::Status ErrorAt(Position pos, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", pos.line, ", column ", pos.column, ": ", message));
}

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source, const LexOptions& options) {
  return Lexer(NormalizeNewlines(source), options).Run();
}

}  // namespace trellis::jinja
