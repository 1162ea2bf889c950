#include "tools/verify_command.h"

#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "config/field_text.h"
#include "config/printable.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"
#include "roles/local_roles.h"
#include "verifier/verifier.h"

namespace trellis::tools {
namespace {

constexpr char kUsage[] =
    "usage: trellis verify --verifier NAME [--config KEY=VALUE ...] [--items] DATA.jsonl\n"
    "  scores {\"prompt\", \"response\", \"answer\"} lines with one verifier (no\n"
    "  training) and prints counts per verdict and the mean reward. --config sets\n"
    "  a field of trellis.v1.VerifierConfig (repeat it for list fields such as\n"
    "  command); --items also prints one line per sample.\n";

// Sets one field of `c` from "key=value" as a job file's verifier section
// reads it (config/field_text.h: choices such as sandbox=rlimits by name);
// an error message or "".
std::string SetField(v1::VerifierConfig& c, const std::string& kv) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos) {
    return absl::StrCat("--config ", config::Printable(kv), ": expected KEY=VALUE");
  }
  const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
  const google::protobuf::FieldDescriptor* f = c.GetDescriptor()->FindFieldByName(key);
  if (f == nullptr) {
    return absl::StrCat("--config ", config::Printable(key), ": no such field of VerifierConfig");
  }
  absl::Status s = config::SetFieldText(value, f, &c);
  return s.ok() ? "" : absl::StrCat("--config ", key, ": ", s.message());
}

}  // namespace

int VerifyCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  v1::VerifierConfig config;
  config.clear_name();
  std::string path;
  bool items = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--verifier" || args[i] == "--config") {
      if (i + 1 == args.size()) {
        err << "trellis verify: " << args[i] << " needs a value\n" << kUsage;
        return 2;
      }
      const std::string problem = args[i] == "--verifier"
                                      ? (config.set_name(args[i + 1]), std::string())
                                      : SetField(config, args[i + 1]);
      if (!problem.empty()) {
        err << "trellis verify: " << problem << "\n";
        return 2;
      }
      ++i;
    } else if (args[i] == "--items") {
      items = true;
    } else if (args[i].rfind("-", 0) == 0 || !path.empty()) {
      err << "trellis verify: unexpected argument " << args[i] << "\n" << kUsage;
      return 2;
    } else {
      path = args[i];
    }
  }
  if (!config.has_name() || path.empty()) {
    err << "trellis verify: needs --verifier NAME and a DATA.jsonl\n" << kUsage;
    return 2;
  }
  absl::StatusOr<std::unique_ptr<verifier::Verifier>> verifier = roles::MakeVerifier(config);
  if (!verifier.ok()) {
    err << "trellis verify: " << verifier.status().message() << "\n";
    return 2;
  }
  std::ifstream in(path);
  if (!in) {
    err << "trellis verify: cannot open " << config::Printable(path) << "\n";
    return 1;
  }
  v1::VerifyRequest request;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) {
      err << "trellis verify: " << config::Printable(path) << ":" << n
          << ": expected a JSON object\n";
      return 1;
    }
    v1::VerifyItem* item = request.add_items();
    for (const char* key : {"prompt", "response", "answer"}) {
      std::string value;
      if (j.contains(key)) value = j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
      if (std::string(key) == "prompt") item->set_prompt(value);
      if (std::string(key) == "response") item->set_response(value);
      if (std::string(key) == "answer") item->set_answer(value);
      j.erase(key);
    }
    if (!j.empty()) item->set_metadata_json(j.dump());
  }
  auto client = verifier::NewLocalVerifierClient(*std::move(verifier));
  absl::StatusOr<v1::VerifyResponse> response = client->Verify(request);
  if (!response.ok()) {
    err << "trellis verify: " << response.status() << "\n";
    return 1;
  }
  std::map<std::string, int> counts;
  double sum = 0;
  for (int i = 0; i < response->results_size(); ++i) {
    const v1::VerifyResult& r = response->results(i);
    const std::string verdict = v1::Verdict_Name(r.verdict());
    ++counts[verdict];
    sum += r.reward();
    if (items) {
      out << i + 1 << "\t" << verdict << "\t" << r.reward() << "\t" << config::Printable(r.detail())
          << "\n";
    }
  }
  const int total = response->results_size();
  out << "verifier " << config::Printable(config.name()) << ": " << total << " samples\n";
  for (const auto& [verdict, n] : counts) {
    out << "  " << verdict << "\t" << n << "\t" << (100.0 * n / total) << "%\n";
  }
  out << "  mean reward\t" << (total ? sum / total : 0.0) << "\n";
  return 0;
}

}  // namespace trellis::tools
