#ifndef TRELLIS_MODEL_TESTING_HF_FIXTURES_H_
#define TRELLIS_MODEL_TESTING_HF_FIXTURES_H_

// Loading the Hugging Face directories the model tests use (the fixtures of
// tests/fixtures/hf and exports of them).

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/hf_model.h"
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

}  // namespace trellis::model::testing

#endif  // TRELLIS_MODEL_TESTING_HF_FIXTURES_H_
