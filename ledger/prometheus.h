#ifndef TRELLIS_LEDGER_PROMETHEUS_H_
#define TRELLIS_LEDGER_PROMETHEUS_H_

// Prometheus text exposition format (version 0.0.4): metric families with
// # HELP and # TYPE lines, label values escaped, histograms as cumulative
// _bucket{le=...} series with _sum and _count. No HTTP here: the scheduler
// and the workers serve what this writes (web/http_server.h).

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis::ledger {

// Label name/value pairs, written in this order.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Counts observations into buckets with fixed upper bounds (ascending; an
// implicit +Inf bucket follows the last).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Observations <= upper_bounds()[i], cumulative, then the +Inf count.
  std::vector<int64_t> CumulativeCounts() const;
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // Per bucket, the last one +Inf.
  double sum_ = 0;
  int64_t count_ = 0;
};

// `count` bounds: start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Label values: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view value);
// Sample values: integers without an exponent, +Inf, -Inf, NaN.
std::string FormatSampleValue(double value);

// Builds one exposition. Write a family's header, then all its samples,
// before the next family.
class PrometheusText {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // `name` must be a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*); `help`
  // is escaped (backslash, newline).
  void Family(std::string_view name, Type type, std::string_view help);
  // One sample of a counter or gauge family.
  void Sample(std::string_view name, const Labels& labels, double value);
  // A histogram's series: name_bucket{labels..., le="..."}, name_sum,
  // name_count.
  void HistogramSeries(std::string_view name, const Labels& labels,
                       const Histogram& histogram);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Whether `name` is a valid metric or label name (label names may not
// contain ':').
bool ValidMetricName(std::string_view name);

}  // namespace trellis::ledger

#endif  // TRELLIS_LEDGER_PROMETHEUS_H_
