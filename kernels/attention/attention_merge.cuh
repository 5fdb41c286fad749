// The end of a decode split block, shared by the SIMT and tensor-core split kernels (kernels/attention/attention.cu,
// attention_tc.cu): once its partial is written, the block counts itself in; the last of the n_active splits of a KV
// head merges that head group's partials into out and zeroes the count for the next call. So a decode is one launch
// (no merge kernel, no kernel boundary between the split pass and the merge). Included by those two files only.
#pragma once
#include <cstdint>

namespace llm {
namespace {

// Partials: part_o [splits, n_heads, head_dim] (unnormalised), part_ml [splits, n_heads] (max in the log2 domain,
// weight sum); heads h0 .. h0 + g - 1 of KV head kvh. arrivals [n_kv_heads]: zero before the first call (the scratch
// zeroed once: attention_decode_scratch_bytes), zero again after each. Every thread of the block calls it, after its
// own partial writes. out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s, in split order (the merge kernel's
// arithmetic, bit for bit).
__device__ __forceinline__ void merge_if_last(const float* part_o, const float2* part_ml, unsigned* arrivals, int kvh,
                                              int h0, int g, int n_heads, int head_dim, int n_active, float* out) {
  __shared__ bool last;
  __threadfence();  // this thread's partial writes are visible to the block that merges
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(arrivals + kvh, 1u) == unsigned(n_active - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other splits' partials (they fenced before counting) are read after the count
  for (int it = threadIdx.x; it < g * head_dim; it += blockDim.x) {
    const int h = h0 + it / head_dim, d = it - (it / head_dim) * head_dim;
    float mx = -INFINITY;
    for (int s = 0; s < n_active; ++s) mx = fmaxf(mx, __ldcg(&part_ml[int64_t(s) * n_heads + h].x));
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < n_active; ++s) {
      const int64_t row = int64_t(s) * n_heads + h;
      const float2 ml = __ldcg(part_ml + row);
      const float w = exp2f(ml.x - mx);
      l = fmaf(w, ml.y, l);
      o = fmaf(w, __ldcg(part_o + row * head_dim + d), o);
    }
    out[int64_t(h) * head_dim + d] = o / l;
  }
  if (threadIdx.x == 0) arrivals[kvh] = 0u;
}

}  // namespace
}  // namespace llm
