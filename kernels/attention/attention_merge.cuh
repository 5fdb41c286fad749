// The end of every decode split kernel (SIMT, tensor-core BF16 and FP8): the split's partial result is written, then
// the last split of a KV head's group to finish merges the group's heads over every split, in split order, into the
// output. One launch per layer instead of a split pass and a merge pass; the merge is the same arithmetic in the same
// order as a separate merge kernel, so the output is bit for bit what it was.
#pragma once
#include <cmath>
#include <cstdint>

namespace llm {

// Where a decode's split pass writes and merges. part_o [splits, n_heads, head_dim] unnormalised outputs, part_ml
// [splits, n_heads] (max in the log2 domain, weight sum), arrivals [n_kv_heads] counters at 0 between launches
// (attention_decode_scratch_init zeroes them once; the merging block re-arms its own), out [n_heads, head_dim].
struct DecodeSplits {
  float* part_o = nullptr;
  float2* part_ml = nullptr;
  unsigned* arrivals = nullptr;
  float* out = nullptr;
};

#if defined(__CUDACC__)
// Called by every thread of a split block that wrote its rows (block-uniform). n_active: the splits of this decode
// (those that start before the length); heads h0 .. h0 + g - 1 are this block's group (KV head kvh).
__device__ __forceinline__ void merge_splits_if_last(const DecodeSplits& d, int kvh, int n_active, int g, int h0,
                                                     int n_heads, int head_dim) {
  __shared__ bool last;
  __threadfence();  // this thread's partial writes are visible device-wide before the block's arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(d.arrivals + kvh, 1u) == unsigned(n_active - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other split's partials (fenced before they arrived) are visible to this block
  for (int it = threadIdx.x; it < g * head_dim; it += blockDim.x) {
    const int hh = it / head_dim, dd = it - hh * head_dim, h = h0 + hh;
    float mx = -INFINITY;
    for (int s = 0; s < n_active; ++s) mx = fmaxf(mx, __ldcg(d.part_ml + int64_t(s) * n_heads + h).x);
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < n_active; ++s) {
      const int64_t row = int64_t(s) * n_heads + h;
      const float2 ml = __ldcg(d.part_ml + row);
      const float w = exp2f(ml.x - mx);
      l = fmaf(w, ml.y, l);
      o = fmaf(w, __ldcg(d.part_o + row * head_dim + dd), o);
    }
    d.out[int64_t(h) * head_dim + dd] = o / l;
  }
  if (threadIdx.x == 0) d.arrivals[kvh] = 0u;
}
#endif

}  // namespace llm
