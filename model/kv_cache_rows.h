#ifndef TRELLIS_MODEL_KV_CACHE_ROWS_H_
#define TRELLIS_MODEL_KV_CACHE_ROWS_H_

// Row operations on a KVCache (model/transformer.h), for a decode batch whose
// rows come and go: expand a prompt's cache to its responses, drop finished
// rows, let waiting rows join. A row's filled positions are the last ones
// (prompts are left-padded and decoding appends on the right), so rows are
// moved right-aligned.

#include <torch/torch.h>

#include <cstdint>

#include "model/transformer.h"

namespace trellis::model {

// The last `columns` filled positions of `tensor` [B, ..., length, ...]
// (positions along `dim`, `length` of them filled) for the rows `rows` [N]
// int64 (repeats allowed), in a new tensor whose `dim` holds `capacity`
// positions: the rows' positions at [0, columns), zeros where a row had
// fewer than `columns` and after `columns`.
// REQUIRES: columns <= capacity.
torch::Tensor TakeRightAligned(const torch::Tensor& tensor, const torch::Tensor& rows, int64_t dim,
                               int64_t length, int64_t columns, int64_t capacity);

// A new cache of rows `rows` of `cache` (TakeRightAligned on every layer):
// length `columns`, capacity `capacity`.
KVCache TakeRows(const KVCache& cache, const torch::Tensor& rows, int64_t columns,
                 int64_t capacity);

// Rows `rows` of `cache`, its positions where they are (length and capacity
// kept): dropping rows without moving any column.
KVCache SelectRows(const KVCache& cache, const torch::Tensor& rows);

// The rows of `a` then those of `b`. REQUIRES: equal length and capacity.
KVCache ConcatRows(const KVCache& a, const KVCache& b);

}  // namespace trellis::model

#endif  // TRELLIS_MODEL_KV_CACHE_ROWS_H_
