#include "ledger/prometheus.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis::ledger {
namespace {

using ::testing::ElementsAre;

TEST(PrometheusTest, FamilyHeaderAndSamples) {
  PrometheusText out;
  out.Family("trellis_step", PrometheusText::Type::kGauge, "Current step.");
  out.Sample("trellis_step", {}, 7);
  out.Family("trellis_memory_bytes", PrometheusText::Type::kGauge, "Bytes.");
  out.Sample("trellis_memory_bytes", {{"role", "learner-0"}, {"object", "parameters"}}, 1048576);
  EXPECT_EQ(out.text(),
            "# HELP trellis_step Current step.\n"
            "# TYPE trellis_step gauge\n"
            "trellis_step 7\n"
            "# HELP trellis_memory_bytes Bytes.\n"
            "# TYPE trellis_memory_bytes gauge\n"
            "trellis_memory_bytes{role=\"learner-0\",object=\"parameters\"} 1048576\n");
}

TEST(PrometheusTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  PrometheusText out;
  out.Family("x_total", PrometheusText::Type::kCounter, "back\\slash\nnewline \"quotes\" stay");
  out.Sample("x_total", {{"verifier", "py \"numeric\"@1\n"}}, 2);
  EXPECT_EQ(out.text(),
            "# HELP x_total back\\\\slash\\nnewline \"quotes\" stay\n"
            "# TYPE x_total counter\n"
            "x_total{verifier=\"py \\\"numeric\\\"@1\\n\"} 2\n");
}

TEST(PrometheusTest, SampleValues) {
  EXPECT_EQ(FormatSampleValue(0), "0");
  EXPECT_EQ(FormatSampleValue(-3), "-3");
  EXPECT_EQ(FormatSampleValue(0.1), "0.1");
  EXPECT_EQ(FormatSampleValue(0.25), "0.25");
  EXPECT_EQ(FormatSampleValue(1e20), "1e+20");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
}

TEST(PrometheusTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.125, 1, 10});
  for (double v : {0.0625, 0.125, 0.5, 3.0, 30.0}) h.Observe(v);
  // le is inclusive: 0.125 falls in the 0.125 bucket.
  EXPECT_THAT(h.CumulativeCounts(), ElementsAre(2, 3, 4, 5));
  EXPECT_EQ(h.count(), 5);
  EXPECT_EQ(h.sum(), 33.6875);
  PrometheusText out;
  out.Family("trellis_stage_seconds", PrometheusText::Type::kHistogram, "Stage seconds.");
  out.HistogramSeries("trellis_stage_seconds", {{"stage", "rollout"}, {"role", "actor-0"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP trellis_stage_seconds Stage seconds.\n"
            "# TYPE trellis_stage_seconds histogram\n"
            "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"0.125\"} 2\n"
            "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"1\"} 3\n"
            "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"10\"} 4\n"
            "trellis_stage_seconds_bucket{stage=\"rollout\",role=\"actor-0\",le=\"+Inf\"} 5\n"
            "trellis_stage_seconds_sum{stage=\"rollout\",role=\"actor-0\"} 33.6875\n"
            "trellis_stage_seconds_count{stage=\"rollout\",role=\"actor-0\"} 5\n");
}

TEST(PrometheusTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(0.001, 2, 4), ElementsAre(0.001, 0.002, 0.004, 0.008));
  Histogram h(ExponentialBuckets(0.001, 2, 3));
  PrometheusText out;
  out.HistogramSeries("h", {}, h);
  EXPECT_EQ(out.text(),
            "h_bucket{le=\"0.001\"} 0\nh_bucket{le=\"0.002\"} 0\nh_bucket{le=\"0.004\"} 0\n"
            "h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(PrometheusTest, MetricNames) {
  EXPECT_TRUE(ValidMetricName("trellis_stage_seconds"));
  EXPECT_TRUE(ValidMetricName("job:rate5m"));
  EXPECT_FALSE(ValidMetricName("3d"));
  EXPECT_FALSE(ValidMetricName("stage-seconds"));
  EXPECT_FALSE(ValidMetricName(""));
}

}  // namespace
}  // namespace trellis::ledger
