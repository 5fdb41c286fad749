// The log-sum-exp merge of one output row from its key splits, device code only: decode's merge kernel
// (attention.cu) and the short prefill pass's (attention_tc.cu) run this one loop, so both merge the same way.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace llm {

// out[d] = sum_s 2^(m_s - M) o_s[d] / sum_s 2^(m_s - M) l_s over the n_active splits. Split s of the row is
// part_ml[s * rows + row] (max in the log2 domain, weight sum) and part_o[(s * rows + row) * head_dim]; a split without
// keys for the row (m = -inf) weighs exp2(-inf) = 0. No split at all: zeros. M first (merge_split_max), then each d
// (merge_split_value): the merge kernels run these over the block's threads, and a GEMV that merges the splits as it
// stages its x (the o projection, GemvEpilogue::merge) runs the same two, so every consumer gets the same bits.
__device__ __forceinline__ float merge_split_max(const float2* __restrict__ part_ml, int64_t row, int64_t rows,
                                                 int n_active) {
  float mx = -INFINITY;
  for (int s = 0; s < n_active; ++s) mx = fmaxf(mx, part_ml[s * rows + row].x);
  return mx;
}
__device__ __forceinline__ float merge_split_value(const float* __restrict__ part_o, const float2* __restrict__ part_ml,
                                                   int64_t row, int64_t rows, int n_active, int head_dim, int d,
                                                   float mx) {
  float l = 0.0f, o = 0.0f;
  for (int s = 0; s < n_active; ++s) {
    const int64_t r = s * rows + row;
    const float2 ml = part_ml[r];
    const float w = exp2f(ml.x - mx);
    l = fmaf(w, ml.y, l);
    o = fmaf(w, part_o[r * head_dim + d], o);
  }
  return n_active > 0 ? o / l : 0.0f;
}
// One row, the block's threads over d.
__device__ __forceinline__ void merge_split_row(const float* __restrict__ part_o, const float2* __restrict__ part_ml,
                                                int64_t row, int64_t rows, int n_active, int head_dim,
                                                float* __restrict__ out) {
  const float mx = merge_split_max(part_ml, row, rows, n_active);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
    out[d] = merge_split_value(part_o, part_ml, row, rows, n_active, head_dim, d, mx);
}

}  // namespace llm
