#ifndef TRELLIS_MODEL_TESTING_HF_FIXTURES_H_
#define TRELLIS_MODEL_TESTING_HF_FIXTURES_H_

// Loading the Hugging Face directories the model tests use (the fixtures of
// tests/fixtures/hf and exports of them).

#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

namespace trellis::model::testing {

// The Transformer of Hugging Face directory `dir`; null, with the test
// failed, when it does not load.
inline Transformer LoadHfTransformer(const std::string& dir) {
  absl::StatusOr<HfModel> hf = LoadHfModel(dir);
  EXPECT_TRUE(hf.ok()) << hf.status();
  if (!hf.ok()) return nullptr;
  absl::StatusOr<Transformer> model = NewHfTransformer(*hf);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// The directory of fixture `name` (tests/fixtures/hf/make_fixtures.py).
inline std::string FixtureDir(const std::string& name) {
  return std::string(TRELLIS_SOURCE_DIR "/tests/fixtures/hf/") + name;
}

// Fixture `name`'s reference.safetensors by tensor name; empty, with the
// test failed, when it does not load.
inline std::map<std::string, torch::Tensor> FixtureReference(const std::string& name) {
  absl::StatusOr<NamedTensors> tensors =
      LoadSafetensors(FixtureDir(name) + "/reference.safetensors");
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (!tensors.ok()) return {};
  return std::map<std::string, torch::Tensor>(tensors->begin(), tensors->end());
}

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_HF_FIXTURES_H_
