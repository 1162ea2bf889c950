#include "ledger/prometheus.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trellis::ledger {
namespace {

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return colon;
  return !first && c >= '0' && c <= '9';
}

bool ValidName(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}

std::string_view TypeName(PrometheusText::Type type) {
  switch (type) {
    case PrometheusText::Type::kCounter: return "counter";
    case PrometheusText::Type::kGauge: return "gauge";
    case PrometheusText::Type::kHistogram: return "histogram";
  }
  return "untyped";
}

void AppendSeries(std::string& out, std::string_view name, const Labels& labels,
                  const std::pair<std::string, std::string>* extra, double value) {
  out.append(name);
  if (!labels.empty() || extra != nullptr) {
    out.push_back('{');
    bool first = true;
    auto add = [&](const std::pair<std::string, std::string>& label) {
      assert(ValidName(label.first, /*colon=*/false));
      if (!first) out.push_back(',');
      first = false;
      out.append(label.first).append("=\"").append(EscapeLabelValue(label.second)).push_back('"');
    };
    for (const auto& label : labels) add(label);
    if (extra != nullptr) add(*extra);
    out.push_back('}');
  }
  out.push_back(' ');
  out.append(FormatSampleValue(value)).push_back('\n');
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  assert(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket] += 1;
  sum_ += value;
  count_ += 1;
}

std::vector<int64_t> Histogram::CumulativeCounts() const {
  std::vector<int64_t> out(counts_.size());
  int64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) out[i] = total += counts_[i];
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) out.push_back(bound);
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", value);
    return buf;
  }
  // The shortest text that reads back as the same double (0.1, not
  // 0.10000000000000001).
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

bool ValidMetricName(std::string_view name) { return ValidName(name, /*colon=*/true); }

void PrometheusText::Family(std::string_view name, Type type, std::string_view help) {
  assert(ValidMetricName(name));
  text_.append("# HELP ").append(name).push_back(' ');
  for (char c : help) {
    if (c == '\\') {
      text_ += "\\\\";
    } else if (c == '\n') {
      text_ += "\\n";
    } else {
      text_.push_back(c);
    }
  }
  text_.append("\n# TYPE ").append(name).push_back(' ');
  text_.append(TypeName(type)).push_back('\n');
}

void PrometheusText::Sample(std::string_view name, const Labels& labels, double value) {
  AppendSeries(text_, name, labels, nullptr, value);
}

void PrometheusText::HistogramSeries(std::string_view name, const Labels& labels,
                                     const Histogram& histogram) {
  const std::string bucket = std::string(name) + "_bucket";
  const std::vector<int64_t> cumulative = histogram.CumulativeCounts();
  const std::vector<double>& bounds = histogram.upper_bounds();
  for (size_t i = 0; i < cumulative.size(); ++i) {
    const std::pair<std::string, std::string> le{
        "le", i < bounds.size() ? FormatSampleValue(bounds[i]) : "+Inf"};
    AppendSeries(text_, bucket, labels, &le, static_cast<double>(cumulative[i]));
  }
  AppendSeries(text_, std::string(name) + "_sum", labels, nullptr, histogram.sum());
  AppendSeries(text_, std::string(name) + "_count", labels, nullptr,
               static_cast<double>(histogram.count()));
}

}  // namespace trellis::ledger
