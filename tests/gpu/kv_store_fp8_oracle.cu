// The FP8 KV store oracle (tests/gpu/kv_store_fp8_oracle.h): CpuKvCache::store's FP8 form (engine/kv_cache.cpp) on
// the device in the plainest form, one element per step, for the tests to hold the engine's rope_kv_store_fp8 to.
//
// One CUDA block per (touched cache block j, KV head, K or V). Each stages its block's rows so far for its head
// ([rows, head_dim] FP32 in shared memory: new rows from k or v; for the first touched block, the rows before *d_pos0
// from the open rows or, when that block is not the open one, decoded from its codes at its old scale), takes their
// amax, writes the scale and re-encodes the codes, all with core/fp8.h's functions, as the CPU does.
// The CUDA block of the FIRST touched block (j = 0) of each (head, plane) also owns that head's open rows and its
// open_blocks entry: it is the only one that reads them (kept rows, the reload decision), and after its reads it
// writes them to what CpuKvCache leaves there (the composition of the rows each touched block would have written to
// its one open buffer in turn). No other block touches them, so one launch has no cross-block race.
// It shares no device code with the engine's store beyond core/fp8.h and the block reduction: an oracle written apart.
#include "kv_store_fp8_oracle.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"                  // llm::fail
#include "core/fp8.h"                    // fp8_block_scale, fp8_quantize, fp8_dequantize, f32_to_bits, bits_to_f32
#include "kernels/cuda_check.h"          // CUDA_CHECK, CUDA_CHECK_LAUNCH
#include "kernels/ops/block_reduce.cuh"  // block_max

namespace llm {
namespace {

constexpr int kThreads = 256;

// grid (max touched blocks, n_kv_heads, 2: K then V), kThreads threads, dynamic shared memory block * head_dim floats.
__global__ void __launch_bounds__(kThreads)
    kv_store_fp8_kernel(const float* __restrict__ k, const float* __restrict__ v, const int* __restrict__ d_pos0,
                        int n_tokens, int n_kv_heads, int head_dim, int block, int ctx, Fp8KvLayer L) {
  extern __shared__ float rows_s[];  // [rows, head_dim]: this block's rows so far for this head
  __shared__ float red[32];

  const int pos0 = *d_pos0;
  if (pos0 < 0 || pos0 > ctx - n_tokens) return;  // rows outside the cache: nothing written (see kv_fp8.h)
  const int end = pos0 + n_tokens;                  // <= ctx
  const int j = int(blockIdx.x), h = int(blockIdx.y);
  const bool is_v = blockIdx.z != 0;
  const int b_first = pos0 / block;
  const int64_t base64 = (int64_t(b_first) + j) * block;
  if (base64 >= end) return;  // fewer blocks touched than the grid allows for
  const int b = b_first + j, base = int(base64);
  const int r0 = j == 0 ? pos0 - base : 0;        // rows [0, r0) were written before this call
  const int rows = min(end, base + block) - base;  // rows [0, rows) of block b are encoded

  const int64_t kv_dim = int64_t(n_kv_heads) * head_dim;
  const float* x = (is_v ? v : k) + int64_t(h) * head_dim;  // row t of this head: x + t * kv_dim
  uint8_t* codes = (is_v ? L.v : L.k) + int64_t(h) * head_dim;  // row p of this head: codes + p * kv_dim
  float* scale_p = (is_v ? L.v_scale : L.k_scale) + int64_t(b) * n_kv_heads + h;
  float* open = (is_v ? L.v_open : L.k_open) + int64_t(h) * head_dim;  // row r of this head: open + r * kv_dim
  int* open_block = L.open_blocks + (is_v ? n_kv_heads : 0) + h;

  // Only j = 0 can have r0 > 0. Not the open block: its earlier rows come back from their FP8 values.
  const bool reload = r0 > 0 && *open_block != b;
  const float old_scale = reload ? *scale_p : 0.0f;

  float m = 0.0f;
  for (int idx = int(threadIdx.x); idx < rows * head_dim; idx += kThreads) {
    const int r = idx / head_dim, i = idx - r * head_dim;
    float val;
    if (r >= r0)
      val = x[(int64_t(base) + r - pos0) * kv_dim + i];
    else if (reload)
      val = fp8_dequantize(codes[(int64_t(base) + r) * kv_dim + i], old_scale);
    else
      val = open[int64_t(r) * kv_dim + i];
    rows_s[idx] = val;
    const float a = bits_to_f32(f32_to_bits(val) & 0x7fffffffu);  // as fp8_block_amax: NaN never compares greater
    if (a > m) m = a;
  }
  // Every read of the old codes, scale, open rows and open_blocks entry is before the barriers in here.
  const float amax = block_max(m, red);  // every thread's m >= 0: the padding never wins
  const float s = fp8_block_scale(amax);
  if (threadIdx.x == 0) *scale_p = s;
  for (int idx = int(threadIdx.x); idx < rows * head_dim; idx += kThreads) {
    const int r = idx / head_dim, i = idx - r * head_dim;
    codes[(int64_t(base) + r) * kv_dim + i] = fp8_quantize(rows_s[idx], s);
  }
  if (j != 0) return;

  // The open rows of this head as CpuKvCache leaves them: it writes each touched block's rows in turn into its one
  // open buffer ([0, r0) reloaded if `reload`, then [r0, rows) of block b_first; then [0, block) of every full block
  // after it; then [0, rows_last) of the last), so row r ends with the last of those writes that covers it.
  const int last = (end - 1) / block - b_first;  // index of the last touched block
  const int64_t last_base = (int64_t(b_first) + last) * block;
  const int rows_last = int(end - last_base);
  const int r0_last = last == 0 ? r0 : 0;
  const int r0_prev = last == 1 ? r0 : 0;  // block last - 1 covers [r0_prev, block) (when last >= 1)
  for (int idx = int(threadIdx.x); idx < block * head_dim; idx += kThreads) {
    const int r = idx / head_dim, i = idx - r * head_dim;
    float* dst = open + int64_t(r) * kv_dim + i;
    if (r >= r0_last && r < rows_last)
      *dst = last == 0 ? rows_s[idx] : x[(last_base + r - pos0) * kv_dim + i];
    else if (last >= 1 && r >= r0_prev)
      *dst = last == 1 ? rows_s[idx] : x[(last_base - block + r - pos0) * kv_dim + i];
    else if (reload && r < r0)
      *dst = rows_s[idx];
    // else: kept as it was (the open rows before r0, or rows past the last write)
  }
  if (threadIdx.x == 0) *open_block = b_first + last;
}

}  // namespace

void kv_store_fp8(const float* k, const float* v, const int* d_pos0, int n_tokens, int n_kv_heads, int head_dim,
                  int block, int ctx, const Fp8KvLayer& L, cudaStream_t s) {
  if (ctx < 1 || n_kv_heads < 1 || head_dim < 1 || block < 1 || n_kv_heads > 65535)
    fail("kv_store_fp8: bad shape: ", ctx, " positions, ", n_kv_heads, " KV heads of ", head_dim, ", FP8 block of ",
         block);
  if (n_tokens < 1 || n_tokens > ctx) fail("kv_store_fp8: ", n_tokens, " rows for a cache of ", ctx, " positions");
  if (!k || !v || !d_pos0 || !L.k || !L.v || !L.k_scale || !L.v_scale || !L.k_open || !L.v_open || !L.open_blocks)
    fail("kv_store_fp8: a null pointer");
  const int64_t n_blocks = (int64_t(ctx) + block - 1) / block;
  const int64_t touched = std::min<int64_t>((int64_t(n_tokens) - 1 + block - 1) / block + 1, n_blocks);
  const size_t smem = size_t(block) * size_t(head_dim) * sizeof(float);
  if (smem > 48 * 1024)  // beyond the default (block 32 needs it only past head_dim 384): opt in
    CUDA_CHECK(cudaFuncSetAttribute(kv_store_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(touched), unsigned(n_kv_heads), 2u);
  kv_store_fp8_kernel<<<grid, kThreads, smem, s>>>(k, v, d_pos0, n_tokens, n_kv_heads, head_dim, block, ctx, L);
  CUDA_CHECK_LAUNCH("kv_store_fp8_kernel");
}

}  // namespace llm
