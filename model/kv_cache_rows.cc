#include "model/kv_cache_rows.h"

#include <algorithm>
#include <vector>

namespace trellis::model {

int64_t KVCache::bytes() const {
  int64_t total = 0;
  for (const auto& t : keys) total += static_cast<int64_t>(t.nbytes());
  for (const auto& t : values) total += static_cast<int64_t>(t.nbytes());
  return total;
}

torch::Tensor TakeRightAligned(const torch::Tensor& tensor, const torch::Tensor& rows, int64_t dim,
                               int64_t length, int64_t columns, int64_t capacity) {
  TORCH_CHECK(columns <= capacity, "TakeRightAligned: ", columns, " columns exceed capacity ",
              capacity);
  const torch::Tensor picked = tensor.index_select(0, rows.to(tensor.device(), torch::kLong));
  std::vector<int64_t> shape = picked.sizes().vec();
  shape[dim] = capacity;
  torch::Tensor out = torch::zeros(shape, picked.options());
  const int64_t kept = std::min(columns, length);
  out.narrow(dim, columns - kept, kept).copy_(picked.narrow(dim, length - kept, kept));
  return out;
}

KVCache TakeRows(const KVCache& cache, const torch::Tensor& rows, int64_t columns,
                 int64_t capacity) {
  KVCache out;
  out.length = columns;
  out.capacity = capacity;
  for (const torch::Tensor& k : cache.keys) {
    out.keys.push_back(TakeRightAligned(k, rows, 2, cache.length, columns, capacity));
  }
  for (const torch::Tensor& v : cache.values) {
    out.values.push_back(TakeRightAligned(v, rows, 2, cache.length, columns, capacity));
  }
  return out;
}

KVCache SelectRows(const KVCache& cache, const torch::Tensor& rows) {
  KVCache out;
  out.length = cache.length;
  out.capacity = cache.capacity;
  for (const torch::Tensor& k : cache.keys) {
    out.keys.push_back(k.index_select(0, rows.to(k.device(), torch::kLong)));
  }
  for (const torch::Tensor& v : cache.values) {
    out.values.push_back(v.index_select(0, rows.to(v.device(), torch::kLong)));
  }
  return out;
}

KVCache ConcatRows(const KVCache& a, const KVCache& b) {
  TORCH_CHECK(a.length == b.length && a.capacity == b.capacity,
              "ConcatRows: caches differ in length or capacity");
  KVCache out;
  out.length = a.length;
  out.capacity = a.capacity;
  for (size_t i = 0; i < a.keys.size(); ++i) {
    out.keys.push_back(torch::cat({a.keys[i], b.keys[i]}, 0));
    out.values.push_back(torch::cat({a.values[i], b.values[i]}, 0));
  }
  return out;
}

}  // namespace trellis::model
