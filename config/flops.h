#ifndef TRELLIS_CONFIG_FLOPS_H_
#define TRELLIS_CONFIG_FLOPS_H_

// The transformer's arithmetic (model/transformer.cc) in matrix-product
// FLOP: what `trellis plan` prices a step with (tools/planner.h) and what
// the learner and the reference record per stage in the ledger
// (ledger::Ledger::RecordFlops), so both count the same work. No LibTorch.

#include <cstdint>

#include "absl/types/span.h"
#include "config/job_size.h"
#include "trellis/v1/job.pb.h"

namespace trellis::config {

// Parameters that take part in one token's matrix products: every
// parameter but the embedding table and the norm scales (the LM head's V·d
// counts); of a mixture of experts, the router (E·d) and the k experts the
// token goes to (k·3·d·ef), not the others.
int64_t MatmulParameters(const ModelShape& s);

// FLOP of one training token (forward and backward: 6 per matmul
// parameter, plus attention over `seq` positions: 12·L·seq·d), and of one
// forward-only token (2 per matmul parameter plus 4·L·seq·d).
double TrainFlopsPerToken(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq);
double ForwardFlopsPerToken(const v1::ModelConfig& model, int64_t vocab_size, int64_t seq);

// The useful arithmetic of a batch of sequences of live (non-pad) lengths
// `lengths`: a sequence of n tokens is n tokens at seq n; padding counts
// nothing.
double TrainFlops(const v1::ModelConfig& model, int64_t vocab_size,
                  absl::Span<const int64_t> lengths);
double ForwardFlops(const v1::ModelConfig& model, int64_t vocab_size,
                    absl::Span<const int64_t> lengths);

// The forward arithmetic of work counted exactly (the actor's engine,
// actor/internal/engine.h StageWork): `positions` token positions through
// the matrix products and `attention_pairs` query-key position pairs (the
// scores and the weighted sum of values, every layer).
double ForwardFlopsOfWork(const v1::ModelConfig& model, int64_t vocab_size, int64_t positions,
                          int64_t attention_pairs);

}  // namespace trellis::config

#endif  // TRELLIS_CONFIG_FLOPS_H_
