// The tests' oracle of the FP8 KV cache store: kv_store_fp8 writes rows into a device Fp8KvLayer
// (kernels/attention/kv_fp8.h) with CpuKvCache::store's FP8 semantics, without RoPE, element by element in one plain
// kernel. tests/gpu/kv_fp8_test.cu checks it against CpuKvCache byte for byte, and the engine's fused
// rope_kv_store_fp8 against rope() followed by it; it lives with the tests because nothing else runs it.
#pragma once
#include <cuda_runtime.h>

#include "kernels/attention/kv_fp8.h"  // Fp8KvLayer

namespace llm {

// Writes rows *d_pos0 .. *d_pos0 + n_tokens - 1 from k, v [n_tokens, kv_dim] (FP32, RoPE already applied to k) as
// rope_kv_store_fp8 writes its rotated rows (the semantics are written there, kernels/attention/kv_fp8.h). *d_pos0 is
// read on the device; the launch (one kernel, grid: the most FP8 blocks n_tokens rows can touch x n_kv_heads x 2)
// depends only on n_tokens and the shapes, so it can be replayed from a CUDA graph. A *d_pos0 with rows outside
// [0, ctx) writes nothing. Shapes (n_tokens in 1..ctx, block >= 1, ...) and null pointers throw llm::Error.
void kv_store_fp8(const float* k, const float* v, const int* d_pos0, int n_tokens, int n_kv_heads, int head_dim,
                  int block, int ctx, const Fp8KvLayer& L, cudaStream_t s);

}  // namespace llm
