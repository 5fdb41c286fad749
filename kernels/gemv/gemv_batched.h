// A batched GEMV that reuses each weight chunk for B activation vectors (the CUDA engine's short prefill and
// speculative verify on BF16 weights: FP32 activations, as the decode GEMVs take them), and a probe beside the decode
// mappings (not registered): a tiny-K GEMV with several rows per warp.
// Both read row-major BF16 [N, ld]: the "warp" mapping's layout (ld = K rounded up to 8, zero-padded; 16-byte loads),
// or for the batched GEMV also an unpadded row-major view (ld = K, any K: two-byte loads where rows are not aligned).
// Also a profiler marker for `bench profile-target` (measure/bench/profile_section.cu).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/gemv/gemv.h"

namespace llm {

constexpr int kGemvMaxBatch = 16;

// The warp layout (same as gemv_mapping(GemvBf16Form::Warp).prepack): allocates out->data; free with gemv_free.
void gemv_batched_prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream);

// Y[b, n] (+)= sum_k W[n, k] X[b, k] for b < B, 1 <= B <= kGemvMaxBatch: a warp takes 1, 2 or 4 rows, lanes along K
// with 16-byte weight loads, every weight chunk used for all B vectors while it sits in registers (W is read once for
// the batch). FP32 products and sums, as the decode GEMVs (only the order differs). X [B, ldx] FP32 (ldx >= K), Y [B,
// ldy] FP32 (ldy >= N), both on the device; accumulate adds to Y. Deterministic. No allocation, no sync; capturable.
void gemv_batched_launch(const GemvWeight& w, int B, const float* x, int64_t ldx, float* y, int64_t ldy,
                         cudaStream_t stream, bool accumulate = false);

// y[N] = W x for small K: a row of ld / 8 16-byte chunks takes G lanes (G = that count rounded up to a power of two,
// at most 32), so one warp covers 32 / G rows and a warp load is up to 512 contiguous bytes even when a row is 16.
// Any K works (rows longer than 32 chunks loop, as "warp" does with one row per warp).
void gemv_rows_per_warp_launch(const GemvWeight& w, const float* x, float* y, cudaStream_t stream);
// Rows one warp covers for this K (32 / G).
int gemv_rows_per_warp(int K);

// An empty kernel of `id` blocks (1 <= id): a profiler lists it by name with grid size `id`, so the kernels that
// follow it up to the next marker can be attributed to launch group `id` (tools/ncu-gemv.sh).
void gemv_profile_marker(int id, cudaStream_t stream);

}  // namespace llm
