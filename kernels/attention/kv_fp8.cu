// The FP8 KV cache's layout and the engine's store into it, rope_kv_store_fp8 (kernels/attention/kv_fp8.h):
// CpuKvCache::store's FP8 form (engine/kv_cache.cpp) with RoPE fused in, on the device.
//
// One CUDA block per (touched cache block j, KV head, K or V). Each stages its block's rows so far for its head
// (new rows from k, rotated as they are read, or v; for the first touched block, the rows before *d_pos0 from the
// open rows or, when that block is not the open one, decoded from its codes at its old scale), takes their amax,
// writes the scale and re-encodes the codes, all with core/fp8.h's functions, as the CPU does. The K rows are rotated
// by rotate_pair of kernels/ops/rope_device.cuh, the one rope() uses, so the bits are rope()'s; extra CUDA blocks,
// after the store's, rotate q in place.
// The CUDA block of the FIRST touched block (j = 0) of each (head, plane) also owns that head's open rows and its
// open_blocks entry: it is the only one that reads them (kept rows, the reload decision), and after its reads it
// writes them to what CpuKvCache leaves there (the composition of the rows each touched block would have written to
// its one open buffer in turn). No other block touches them, so one launch has no cross-block race.
// Two forms: the decode form (one row) keeps the block's rows in registers and issues every load whose address does
// not depend on the position at once (store_decode); the general form stages them in shared memory (store_general).
// The same store without RoPE, element by element, is the tests' oracle (tests/gpu/kv_store_fp8_oracle.cu).
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/fp8.h"  // fp8_block_scale, fp8_quantize, fp8_dequantize, f32_to_bits, bits_to_f32
#include "kernels/ops/block_reduce.cuh"
#include "kernels/cuda_check.h"
#include "kernels/attention/kv_fp8.h"
#include "kernels/ops/rope_device.cuh"  // rotate_pair

namespace llm {
namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The byte sizes of Fp8KvLayer's arrays, in carve order: k, v, k_scale, v_scale, k_open, v_open, open_blocks.
void layer_sizes(int ctx, int n_kv_heads, int head_dim, int block, size_t out[7]) {
  const size_t kv_dim = size_t(n_kv_heads) * size_t(head_dim);
  const size_t n_blocks = (size_t(ctx) + size_t(block) - 1) / size_t(block);
  out[0] = out[1] = size_t(ctx) * kv_dim;
  out[2] = out[3] = n_blocks * size_t(n_kv_heads) * sizeof(float);
  out[4] = out[5] = size_t(block) * kv_dim * sizeof(float);
  out[6] = 2 * size_t(n_kv_heads) * sizeof(int);
}

void check_shape(const char* what, int ctx, int n_kv_heads, int head_dim, int block) {
  if (ctx < 1 || n_kv_heads < 1 || head_dim < 1 || block < 1)
    fail(what, ": bad shape: ", ctx, " positions, ", n_kv_heads, " KV heads of ", head_dim, ", FP8 block of ", block);
  if (n_kv_heads > 65535) fail(what, ": ", n_kv_heads, " KV heads (at most 65535)");
}

// ---- rope_kv_store_fp8 -----------------------------------------------------------------------------------------

// The decode form holds up to this many pairs of the open block per thread in registers (block * head_dim / 2 <=
// kDecodeMaxSlots * kThreads: head_dim 256 at block 32); larger shapes take the general form for one row too.
constexpr int kDecodeMaxSlots = 16;

// m with |x| taken into it, as fp8_block_amax does (NaN never compares greater).
__device__ __forceinline__ float amax_step(float m, float x) {
  const float a = bits_to_f32(f32_to_bits(x) & 0x7fffffffu);
  return a > m ? a : m;
}

// Largest value over the block (kThreads threads) of non-negative, non-NaN v, every thread gets it: one barrier.
// red holds kThreads / 32 floats and is used once per kernel (no barrier before the writes).
__device__ __forceinline__ float block_max_once(float v, float* red) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
  return m;
}

// Pair p of input row t of this head (x already offset to the head), rotated at position pos when it is a K row.
__device__ __forceinline__ float2 new_pair(const float* __restrict__ x, int64_t t, int p, int64_t kv_dim, bool is_v,
                                           int pos, const float* __restrict__ inv_freq) {
  const float* src = x + t * kv_dim + 2 * p;
  const float x0 = src[0], x1 = src[1];
  return is_v ? make_float2(x0, x1) : rotate_pair(x0, x1, pos, inv_freq[p]);
}

// q [n_tokens, n_heads, head_dim] rotated in place, one thread per pair as rope_kernel (kernels/ops/rope.cu) does, spread
// over n_qb CUDA blocks (this is block qb).
__device__ __forceinline__ void rotate_q(float* __restrict__ q, const float* __restrict__ inv_freq,
                                         const int* __restrict__ d_pos0, int n_tokens, int n_heads, int head_dim,
                                         int qb, int n_qb) {
  const int half = head_dim / 2;
  const int64_t per_token = int64_t(n_heads) * half;
  const int64_t total = per_token * n_tokens;
  const int pos0 = *d_pos0;
  for (int64_t idx = int64_t(qb) * kThreads + threadIdx.x; idx < total; idx += int64_t(n_qb) * kThreads) {
    const int t = int(idx / per_token);
    const int r = int(idx - int64_t(t) * per_token);
    const int head = r / half, i = r - head * half;
    float* x = q + (int64_t(t) * n_heads + head) * head_dim;
    const float2 y = rotate_pair(x[2 * i], x[2 * i + 1], pos0 + t, inv_freq[i]);
    x[2 * i] = y.x;
    x[2 * i + 1] = y.y;
  }
}

// The store of one row (n_tokens = 1, the decode step) for KV head h and one plane (x: that plane's input row, k or
// v), store_general's j = 0 block specialised: block * head_dim / 2 <= kSlots * kThreads, head_dim / 2 <=
// kThreads. Thread tid holds pairs u = tid + c * kThreads (row u / half, pair u % half) of the block in registers, and
// pair tid of the new row.
// Latency: every global load whose address does not depend on the position is issued first, together: *d_pos0, the
// open_blocks entry, the new row's pair and its inv_freq, and the open rows of the WHOLE block (speculatively: only
// those before the new row are used, but waiting for *d_pos0 to know how many would add a dependent round trip to
// DRAM every step; the open rows written one step ago are long out of L2). The slots' offsets are stepped, not
// divided, so the loads issue back to back. Only a rewind into a block that is not the open one (reload, rare) then
// waits for the old scale and codes. One barrier (the amax), then the stores.
template <int kSlots>
__device__ __forceinline__ void store_decode(const float* __restrict__ x, const float* __restrict__ inv_freq,
                                             const int* __restrict__ d_pos0, int n_kv_heads, int head_dim, int block,
                                             int ctx, const Fp8KvLayer& L, int h, bool is_v) {
  __shared__ float red[kThreads / 32];
  const int tid = int(threadIdx.x);
  const int half = head_dim / 2;                 // 1..kThreads
  const int kv_dim = n_kv_heads * head_dim;      // < 2^31, and block * kv_dim too (checked by the launcher)
  const int n_pairs = block * half;              // <= kSlots * kThreads
  x += int64_t(h) * head_dim;
  float* open = (is_v ? L.v_open : L.k_open) + int64_t(h) * head_dim;  // row r: open + r * kv_dim
  int* open_block_p = L.open_blocks + (is_v ? n_kv_heads : 0) + h;

  // 1. The position-independent loads, all in flight at once.
  const int pos0 = *d_pos0;
  const int open_block = *open_block_p;
  const bool has_new = tid < half;  // this thread holds pair tid of the new row
  float n0 = 0.0f, n1 = 0.0f, f = 0.0f;
  if (has_new) {
    n0 = x[2 * tid];
    n1 = x[2 * tid + 1];
    if (!is_v) f = inv_freq[tid];
  }
  // Slot c: pair u = tid + c * kThreads at offset off[c] = r * kv_dim + 2 p from the block's first row (of the open
  // rows and of the codes alike).
  int off[kSlots];
  float o0[kSlots], o1[kSlots];
  {
    const int step_r = kThreads / half, step_p = kThreads - step_r * half;
    int r = tid / half, p = tid - r * half;
#pragma unroll
    for (int c = 0; c < kSlots; ++c) {
      off[c] = 0;
      o0[c] = o1[c] = 0.0f;
      if (tid + c * kThreads < n_pairs) {
        off[c] = r * kv_dim + 2 * p;
        o0[c] = open[off[c]];
        o1[c] = open[off[c] + 1];
      }
      p += step_p;
      r += step_r;
      if (p >= half) {
        p -= half;
        ++r;
      }
    }
  }

  // 2. Where the row goes. A position outside the cache stores nothing (see kv_fp8.h); no return before the barrier.
  const bool valid = pos0 >= 0 && pos0 < ctx;
  const int b = valid ? pos0 / block : 0;
  const int r0 = valid ? pos0 - b * block : 0;  // the new row of block b; rows [0, r0) were written before
  const int n_prev = r0 * half;                 // their pairs: u < n_prev
  const bool reload = valid && r0 > 0 && open_block != b;  // rows [0, r0) from their codes, not the open rows
  float* scale_p = (is_v ? L.v_scale : L.k_scale) + int64_t(b) * n_kv_heads + h;
  uint8_t* codes = (is_v ? L.v : L.k) + int64_t(b) * block * kv_dim + int64_t(h) * head_dim;  // row r: + r * kv_dim
  if (reload) {  // the old scale and every code loaded before any is decoded
    const float old_scale = *scale_p;
    uint8_t c0[kSlots], c1[kSlots];
#pragma unroll
    for (int c = 0; c < kSlots; ++c) {
      c0[c] = c1[c] = 0;
      if (tid + c * kThreads < n_prev) {
        c0[c] = codes[off[c]];
        c1[c] = codes[off[c] + 1];
      }
    }
#pragma unroll
    for (int c = 0; c < kSlots; ++c)
      if (tid + c * kThreads < n_prev) {
        o0[c] = fp8_dequantize(c0[c], old_scale);
        o1[c] = fp8_dequantize(c1[c], old_scale);
      }
  }
  if (has_new && !is_v) {
    const float2 y = rotate_pair(n0, n1, pos0, f);  // rope_kernel's call for token 0: position pos0 + 0
    n0 = y.x;
    n1 = y.y;
  }

  // 3. amax over rows [0, r0] and the scale.
  float m = 0.0f;
#pragma unroll
  for (int c = 0; c < kSlots; ++c)
    if (tid + c * kThreads < n_prev) m = amax_step(amax_step(m, o0[c]), o1[c]);
  if (has_new) m = amax_step(amax_step(m, n0), n1);
  const float amax = block_max_once(m, red);
  if (!valid) return;
  const float s = fp8_block_scale(amax);

  // 4. Stores: the scale, rows [0, r0] re-encoded, the open rows (the new row; rows [0, r0) too when reloaded, as
  // store_general leaves them), the open_blocks entry.
  if (tid == 0) *scale_p = s;
#pragma unroll
  for (int c = 0; c < kSlots; ++c)
    if (tid + c * kThreads < n_prev) {
      codes[off[c]] = fp8_quantize(o0[c], s);
      codes[off[c] + 1] = fp8_quantize(o1[c], s);
      if (reload) {
        open[off[c]] = o0[c];
        open[off[c] + 1] = o1[c];
      }
    }
  if (has_new) {
    const int o = r0 * kv_dim + 2 * tid;
    codes[o] = fp8_quantize(n0, s);
    codes[o + 1] = fp8_quantize(n1, s);
    open[o] = n0;
    open[o + 1] = n1;
  }
  if (tid == 0) *open_block_p = b;
}

// Any number of rows: the block of touched block j, KV head h and one plane, walking pairs so that K rows are rotated
// as they are read (row t of x at position *d_pos0 + t). rows_s: dynamic shared memory of block * head_dim floats.
__device__ __forceinline__ void store_general(const float* __restrict__ x, const float* __restrict__ inv_freq,
                                              const int* __restrict__ d_pos0, int n_tokens, int n_kv_heads,
                                              int head_dim, int block, int ctx, const Fp8KvLayer& L, int j, int h,
                                              bool is_v, float* rows_s) {
  __shared__ float red[kThreads / 32];
  const int pos0 = *d_pos0;
  if (pos0 < 0 || pos0 > ctx - n_tokens) return;  // rows outside the cache: nothing written (see kv_fp8.h)
  const int end = pos0 + n_tokens;                  // <= ctx
  const int b_first = pos0 / block;
  const int64_t base64 = (int64_t(b_first) + j) * block;
  if (base64 >= end) return;  // fewer blocks touched than the grid allows for
  const int b = b_first + j, base = int(base64);
  const int r0 = j == 0 ? pos0 - base : 0;                               // rows [0, r0) were written before
  const int rows = int(std::min<int64_t>(end, base64 + block) - base64);  // rows [0, rows) of block b are encoded
  const int tid = int(threadIdx.x);
  const int half = head_dim / 2;
  const int64_t kv_dim = int64_t(n_kv_heads) * head_dim;
  x += int64_t(h) * head_dim;                                           // row t of this head: x + t * kv_dim
  uint8_t* codes = (is_v ? L.v : L.k) + int64_t(h) * head_dim;            // row p of this head: codes + p * kv_dim
  float* scale_p = (is_v ? L.v_scale : L.k_scale) + int64_t(b) * n_kv_heads + h;
  float* open = (is_v ? L.v_open : L.k_open) + int64_t(h) * head_dim;  // row r of this head: open + r * kv_dim
  int* open_block_p = L.open_blocks + (is_v ? n_kv_heads : 0) + h;

  const bool reload = r0 > 0 && *open_block_p != b;
  const float old_scale = reload ? *scale_p : 0.0f;

  // Pair u = (row u / half, pair u % half) of block b; rows_s[2u], rows_s[2u + 1] its values (row r at r * head_dim).
  float m = 0.0f;
  for (int u = tid; u < rows * half; u += kThreads) {
    const int r = u / half, p = u - r * half;
    float2 val;
    if (r >= r0) {
      val = new_pair(x, int64_t(base) + r - pos0, p, kv_dim, is_v, base + r, inv_freq);
    } else if (reload) {
      const uint8_t* src = codes + (int64_t(base) + r) * kv_dim + 2 * p;
      val = make_float2(fp8_dequantize(src[0], old_scale), fp8_dequantize(src[1], old_scale));
    } else {
      const float* src = open + int64_t(r) * kv_dim + 2 * p;
      val = make_float2(src[0], src[1]);
    }
    rows_s[2 * u] = val.x;
    rows_s[2 * u + 1] = val.y;
    m = amax_step(amax_step(m, val.x), val.y);
  }
  // Every read of the old codes, scale, open rows and open_blocks entry is before the barrier in here.
  const float amax = block_max_once(m, red);
  const float s = fp8_block_scale(amax);
  if (tid == 0) *scale_p = s;
  for (int u = tid; u < rows * half; u += kThreads) {  // the same thread reads back what it wrote to rows_s
    const int r = u / half, p = u - r * half;
    uint8_t* dst = codes + (int64_t(base) + r) * kv_dim + 2 * p;
    dst[0] = fp8_quantize(rows_s[2 * u], s);
    dst[1] = fp8_quantize(rows_s[2 * u + 1], s);
  }
  if (j != 0) return;

  // The open rows of this head as CpuKvCache leaves them: it writes each touched block's rows in turn into its one
  // open buffer ([0, r0) reloaded if `reload`, then [r0, rows) of block b_first; then [0, block) of every full block
  // after it; then [0, rows_last) of the last), so row r ends with the last of those writes that covers it. Rows of
  // later blocks are re-read from x and rotated again (the same bits).
  const int last = (end - 1) / block - b_first;  // index of the last touched block
  const int64_t last_base = (int64_t(b_first) + last) * block;
  const int rows_last = int(end - last_base);
  const int r0_last = last == 0 ? r0 : 0;
  const int r0_prev = last == 1 ? r0 : 0;  // block last - 1 covers [r0_prev, block) (when last >= 1)
  for (int u = tid; u < block * half; u += kThreads) {
    const int r = u / half, p = u - r * half;
    float* dst = open + int64_t(r) * kv_dim + 2 * p;
    float2 val;
    if (r >= r0_last && r < rows_last)
      val = last == 0 ? make_float2(rows_s[2 * u], rows_s[2 * u + 1])
                      : new_pair(x, last_base + r - pos0, p, kv_dim, is_v, int(last_base + r), inv_freq);
    else if (last >= 1 && r >= r0_prev)
      val = last == 1 ? make_float2(rows_s[2 * u], rows_s[2 * u + 1])
                      : new_pair(x, last_base - block + r - pos0, p, kv_dim, is_v, int(last_base - block + r),
                                 inv_freq);
    else if (reload && r < r0)
      val = make_float2(rows_s[2 * u], rows_s[2 * u + 1]);
    else
      continue;  // kept as it was (the open rows before r0, or rows past the last write)
    dst[0] = val.x;
    dst[1] = val.y;
  }
  if (tid == 0) *open_block_p = b_first + last;
}

// 1-D grid: CUDA blocks [0, kv_blocks) store (touched block j, KV head h, plane), plane fastest, then h, then j;
// the rest rotate q. kSlots > 0: the decode form with kSlots register pairs per thread (one touched block); 0: the
// general form (dynamic shared memory block * head_dim floats).
template <int kSlots>
__global__ void __launch_bounds__(kThreads)
    rope_kv_store_fp8_kernel(float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                             const float* __restrict__ inv_freq, const int* __restrict__ d_pos0, int n_tokens,
                             int n_heads, int n_kv_heads, int head_dim, int block, int ctx, int kv_blocks,
                             Fp8KvLayer L) {
  const int id = int(blockIdx.x);
  if (id >= kv_blocks) {
    rotate_q(q, inv_freq, d_pos0, n_tokens, n_heads, head_dim, id - kv_blocks, int(gridDim.x) - kv_blocks);
    return;
  }
  const bool is_v = (id & 1) != 0;
  const int hj = id >> 1, j = hj / n_kv_heads, h = hj - j * n_kv_heads;
  if constexpr (kSlots > 0) {
    store_decode<kSlots>(is_v ? v : k, inv_freq, d_pos0, n_kv_heads, head_dim, block, ctx, L, h, is_v);
  } else {
    extern __shared__ float rows_s[];
    store_general(is_v ? v : k, inv_freq, d_pos0, n_tokens, n_kv_heads, head_dim, block, ctx, L, j, h, is_v, rows_s);
  }
}

template <int kSlots>
void launch_rope_kv_store_fp8(unsigned grid, size_t smem, cudaStream_t s, float* q, const float* k, const float* v,
                              const float* inv_freq, const int* d_pos0, int n_tokens, int n_heads, int n_kv_heads,
                              int head_dim, int block, int ctx, int kv_blocks, const Fp8KvLayer& L) {
  if (smem > 48 * 1024)  // beyond the default: opt in (the general form only)
    CUDA_CHECK(cudaFuncSetAttribute(rope_kv_store_fp8_kernel<kSlots>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
  rope_kv_store_fp8_kernel<kSlots><<<grid, kThreads, smem, s>>>(q, k, v, inv_freq, d_pos0, n_tokens, n_heads,
                                                                 n_kv_heads, head_dim, block, ctx, kv_blocks, L);
  CUDA_CHECK_LAUNCH("rope_kv_store_fp8_kernel");
}

}  // namespace

size_t fp8_kv_layer_bytes(int ctx, int n_kv_heads, int head_dim, int block) {
  check_shape("fp8_kv_layer_bytes", ctx, n_kv_heads, head_dim, block);
  size_t sizes[7];
  layer_sizes(ctx, n_kv_heads, head_dim, block, sizes);
  size_t total = 0;
  for (size_t n : sizes) total += align_up(n);
  return total;
}

Fp8KvLayer fp8_kv_layer_carve(void* base, int ctx, int n_kv_heads, int head_dim, int block) {
  check_shape("fp8_kv_layer_carve", ctx, n_kv_heads, head_dim, block);
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % kAlign != 0)
    fail("fp8_kv_layer_carve: base must be non-null and ", kAlign, "-byte aligned");
  size_t sizes[7];
  layer_sizes(ctx, n_kv_heads, head_dim, block, sizes);
  char* p[7];
  char* at = static_cast<char*>(base);
  for (int i = 0; i < 7; ++i) {
    p[i] = at;
    at += align_up(sizes[i]);
  }
  Fp8KvLayer L;
  L.k = reinterpret_cast<uint8_t*>(p[0]);
  L.v = reinterpret_cast<uint8_t*>(p[1]);
  L.k_scale = reinterpret_cast<float*>(p[2]);
  L.v_scale = reinterpret_cast<float*>(p[3]);
  L.k_open = reinterpret_cast<float*>(p[4]);
  L.v_open = reinterpret_cast<float*>(p[5]);
  L.open_blocks = reinterpret_cast<int*>(p[6]);
  return L;
}

void fp8_kv_layer_init(const Fp8KvLayer& L, int ctx, int n_kv_heads, int head_dim, int block, cudaStream_t s) {
  check_shape("fp8_kv_layer_init", ctx, n_kv_heads, head_dim, block);
  if (!L.k || !L.v || !L.k_scale || !L.v_scale || !L.k_open || !L.v_open || !L.open_blocks)
    fail("fp8_kv_layer_init: a null array in the layer");
  size_t sizes[7];
  layer_sizes(ctx, n_kv_heads, head_dim, block, sizes);
  CUDA_CHECK(cudaMemsetAsync(L.k, 0, sizes[0], s));
  CUDA_CHECK(cudaMemsetAsync(L.v, 0, sizes[1], s));
  CUDA_CHECK(cudaMemsetAsync(L.k_scale, 0, sizes[2], s));
  CUDA_CHECK(cudaMemsetAsync(L.v_scale, 0, sizes[3], s));
  CUDA_CHECK(cudaMemsetAsync(L.k_open, 0, sizes[4], s));
  CUDA_CHECK(cudaMemsetAsync(L.v_open, 0, sizes[5], s));
  CUDA_CHECK(cudaMemsetAsync(L.open_blocks, 0xFF, sizes[6], s));  // all-ones int32: -1
}

void rope_kv_store_fp8(float* q, const float* k, const float* v, const float* inv_freq, const int* d_pos0,
                       int n_tokens, int n_heads, int n_kv_heads, int head_dim, int block, int ctx,
                       const Fp8KvLayer& L, cudaStream_t s) {
  check_shape("rope_kv_store_fp8", ctx, n_kv_heads, head_dim, block);
  if (head_dim % 2 != 0) fail("rope_kv_store_fp8: head_dim ", head_dim, " is odd (RoPE rotates pairs)");
  if (n_heads < 1) fail("rope_kv_store_fp8: ", n_heads, " query heads");
  if (n_tokens < 1 || n_tokens > ctx)
    fail("rope_kv_store_fp8: ", n_tokens, " rows for a cache of ", ctx, " positions");
  if (!q || !k || !v || !inv_freq || !d_pos0 || !L.k || !L.v || !L.k_scale || !L.v_scale || !L.k_open || !L.v_open ||
      !L.open_blocks)
    fail("rope_kv_store_fp8: a null pointer");
  const int64_t half = head_dim / 2;
  const int64_t n_blocks = (int64_t(ctx) + block - 1) / block;
  const int64_t touched = std::min<int64_t>((int64_t(n_tokens) - 1 + block - 1) / block + 1, n_blocks);
  const int64_t kv_blocks = touched * n_kv_heads * 2;
  const int64_t q_pairs = int64_t(n_tokens) * n_heads * half;
  const int64_t q_blocks = std::min<int64_t>((q_pairs + kThreads - 1) / kThreads, 65536);
  if (kv_blocks + q_blocks > int64_t(INT32_MAX))
    fail("rope_kv_store_fp8: ", kv_blocks + q_blocks, " CUDA blocks (", touched, " FP8 blocks x ", n_kv_heads,
         " KV heads x 2)");
  const unsigned grid = unsigned(kv_blocks + q_blocks);
  const int kvb = int(kv_blocks);
  // The decode form when one row's block fits in registers (a function of n_tokens and the shapes only).
  const int64_t pairs = int64_t(block) * half;
  if (n_tokens == 1 && half <= kThreads && pairs <= int64_t(kDecodeMaxSlots) * kThreads &&
      int64_t(block) * n_kv_heads * head_dim <= int64_t(INT32_MAX)) {  // (int offsets within a block)
    const int64_t slots = (pairs + kThreads - 1) / kThreads;  // 1..16
    static_assert(kDecodeMaxSlots == 16, "the cases below");
    if (slots <= 1)
      launch_rope_kv_store_fp8<1>(grid, 0, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                  block, ctx, kvb, L);
    else if (slots <= 2)
      launch_rope_kv_store_fp8<2>(grid, 0, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                  block, ctx, kvb, L);
    else if (slots <= 4)
      launch_rope_kv_store_fp8<4>(grid, 0, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                  block, ctx, kvb, L);
    else if (slots <= 8)
      launch_rope_kv_store_fp8<8>(grid, 0, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                  block, ctx, kvb, L);
    else
      launch_rope_kv_store_fp8<16>(grid, 0, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                                   block, ctx, kvb, L);
    return;
  }
  const size_t smem = size_t(block) * size_t(head_dim) * sizeof(float);
  launch_rope_kv_store_fp8<0>(grid, smem, s, q, k, v, inv_freq, d_pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                              block, ctx, kvb, L);
}

}  // namespace llm
