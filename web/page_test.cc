#include "web/page.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "web/report.h"

namespace trellis::web {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// src= and href= attributes in `html` (a self-contained page has none).
std::vector<std::string> ExternalReferences(const std::string& html) {
  std::vector<std::string> out;
  const std::regex reference(R"((src|href)\s*=\s*["']?([^"'\s>]+))", std::regex::icase);
  for (auto it = std::sregex_iterator(html.begin(), html.end(), reference);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[0]);
  }
  return out;
}

TEST(PageTest, LivePagePollsTheApiAndInlinesItsScriptAndStyle) {
  const std::string page = DashboardPage("");
  EXPECT_THAT(page, HasSubstr("window.TRELLIS_DATA = null;"));
  EXPECT_THAT(page, HasSubstr("getJson(\"api/view\")"));
  EXPECT_THAT(page, HasSubstr("id=\"current-step\""));
  EXPECT_THAT(page, Not(HasSubstr("/*TRELLIS_")));
  EXPECT_THAT(ExternalReferences(page), ::testing::IsEmpty());
}

TEST(PageTest, StaticPageInlinesTheDataWithoutClosingTheScript) {
  const std::string page = DashboardPage(R"x({"job":{"name":"</script><script>alert(1)"}})x");
  EXPECT_THAT(page, HasSubstr(R"(window.TRELLIS_DATA = {"job":{"name":"\u003c/script>)"));
  EXPECT_THAT(page, Not(HasSubstr("</script><script>alert")));
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/report_test_run";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Write("job.yaml", "name: tiny-report\n");
    Write("ledger.jsonl",
          R"({"type":"span","step":0,"stage":"rollout","role":"actor-0","start":1,"seconds":2})"
          "\n"
          R"({"type":"object","step":0,"role":"learner-0","object":"parameters","bytes":4096,"stage":"load","time":0.5})"
          "\n"
          R"({"type":"step","step":0,"step_seconds":3,"mean_reward":0.5,"time":3})"
          "\n");
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
};

TEST_F(ReportTest, WritesOneSelfContainedFileWithTheRunsData) {
  Write("summary.json", R"({"steps":1,"memory":{"peak_bytes":8192,"peak_stage":"update"}})");
  Write("compare.json", R"({"peak_bytes":{"baseline":100,"candidate":60}})");
  absl::StatusOr<std::string> path = WriteReport(dir_);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/report.html");
  std::ifstream in(*path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string html = text.str();
  EXPECT_THAT(ExternalReferences(html), ::testing::IsEmpty());
  const std::string marker = "window.TRELLIS_DATA = ";
  const size_t at = html.find(marker);
  ASSERT_NE(at, std::string::npos);
  const size_t end = html.find(";\n</script>", at);
  const json data = json::parse(html.substr(at + marker.size(), end - at - marker.size()));
  EXPECT_EQ(data["job"]["name"], "tiny-report");
  EXPECT_EQ(data["steps_done"], 1);
  EXPECT_EQ(data["spans"].size(), 1u);
  EXPECT_EQ(data["memory"]["series"].size(), 1u);
  EXPECT_EQ(data["summary"]["memory"]["peak_bytes"], 8192);
  EXPECT_EQ(data["comparison"]["peak_bytes"]["candidate"], 60);
}

TEST_F(ReportTest, UnfinishedOrBrokenRunsAreClearErrors) {
  absl::StatusOr<std::string> unfinished = WriteReport(dir_);
  EXPECT_EQ(unfinished.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unfinished.status().message()), HasSubstr("no summary.json"));

  Write("summary.json", "[1, 2]");
  absl::StatusOr<std::string> bad_summary = WriteReport(dir_);
  EXPECT_EQ(bad_summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_summary.status().message()), HasSubstr("summary.json"));

  Write("summary.json", "{}");
  Write("ledger.jsonl", "{\"type\":\"span\"}\nnot json\n");
  absl::StatusOr<std::string> bad_ledger = WriteReport(dir_);
  EXPECT_EQ(bad_ledger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_ledger.status().message()), HasSubstr("ledger.jsonl:2: "));
}

}  // namespace
}  // namespace trellis::web
