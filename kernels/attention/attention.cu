// Attention over the BF16 (and FP8) KV cache: the public ops, their checks, the choice of kernel and the split merge.
// head_dim 64 and 128 run on the tensor cores (kernels/attention/attention_tc.cu); the kernels here (FP32 CUDA-core math) serve
// every other shape: flash-decoding for one token (KV range split across blocks, merged by log-sum-exp) and a simple
// causal prefill. One block serves all query heads of one KV head (grouped-query), so each K/V row is read from
// memory once per group; K/V tiles are staged in shared memory with coalesced loads.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/attention/attention_internal.h"
#include "kernels/attention/split_merge.cuh"
#include "kernels/ops/block_reduce.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

constexpr int kTile = 64;          // cache rows staged in shared memory per step
constexpr int kThreads = 256;      // 8 warps: one warp per query head of a group in the softmax step
constexpr int kMaxGroup = 8;       // n_heads / n_kv_heads
constexpr int kMaxHeadDim = 128;
constexpr int kMaxPairs = kMaxHeadDim / 2;
static_assert(kAttnMinSplitRows % kTile == 0, "decode splits are whole tiles");
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kThreads == kMaxGroup * 32, "softmax step maps one warp to one head of the group");
static_assert(kTile == 64, "softmax step gives each lane two rows of a tile");
static_assert(kMaxGroup * kMaxPairs <= 2 * kThreads, "PV step gives each thread at most two output pairs");

// Scores live in the log2 domain (q pre-scaled by log2(e)/sqrt(head_dim)) so every exponential is one exp2f.
struct alignas(16) AttnShared {
  uint32_t k[kTile * (kMaxPairs + 1)];  // K tile [kTile, pairs] BF16 pairs, odd row stride: conflict-free columns
  uint32_t v[kTile * kMaxPairs];        // V tile [kTile, pairs] BF16 pairs
  float q[kMaxGroup * kMaxHeadDim];     // [group, head_dim] pre-scaled queries
  float p[kMaxGroup * kTile];           // [group, kTile] scores, then exp2 weights
  float m[kMaxGroup];                   // running max (log2 domain)
  float l[kMaxGroup];                   // running sum of weights
  float alpha[kMaxGroup];               // rescale factor of this tile
};

struct Pair {
  float x, y;
};

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Rows [row0, row0 + n_valid) of one KV head (columns col0 .. col0 + 2*pairs) into shared memory; rows past n_valid
// are zero (never read from memory: they may hold garbage, even NaN bits, and would poison 0 * V).
template <bool kVec4>
__device__ __forceinline__ void load_tile(AttnShared& sh, const uint16_t* __restrict__ kc,
                                          const uint16_t* __restrict__ vc, int64_t row0, int n_valid, int kv_dim,
                                          int col0, int pairs, int kstride) {
  const uint32_t* K = reinterpret_cast<const uint32_t*>(kc);
  const uint32_t* V = reinterpret_cast<const uint32_t*>(vc);
  const int64_t row_words = kv_dim / 2;
  const int64_t base = row0 * row_words + col0 / 2;
  if (kVec4) {  // 16-byte loads: pairs % 4 == 0 and 16-byte aligned rows (checked on the host)
    const int nv = pairs / 4;
    for (int idx = threadIdx.x; idx < kTile * nv; idx += kThreads) {
      const int r = idx / nv, c = (idx - r * nv) * 4;
      uint4 kk = make_uint4(0, 0, 0, 0), vv = kk;
      if (r < n_valid) {
        const int64_t off = base + r * row_words + c;
        kk = __ldg(reinterpret_cast<const uint4*>(K + off));
        vv = __ldg(reinterpret_cast<const uint4*>(V + off));
      }
      uint32_t* kd = sh.k + r * kstride + c;
      kd[0] = kk.x, kd[1] = kk.y, kd[2] = kk.z, kd[3] = kk.w;
      *reinterpret_cast<uint4*>(sh.v + r * pairs + c) = vv;
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * pairs; idx += kThreads) {
      const int r = idx / pairs, c = idx - r * pairs;
      uint32_t kk = 0, vv = 0;
      if (r < n_valid) {
        const int64_t off = base + r * row_words + c;
        kk = __ldg(K + off);
        vv = __ldg(V + off);
      }
      sh.k[r * kstride + c] = kk;
      sh.v[r * pairs + c] = vv;
    }
  }
}

// Online softmax of the group's g heads over cache rows [start, end) (end > start). On return (after a barrier)
// sh.m / sh.l hold each head's max and weight sum, acc[j] the unnormalised output pair of item tid + j * kThreads
// (item = head * pairs + pair). The caller has filled sh.q and set sh.m = -inf, sh.l = 0.
template <bool kVec4>
__device__ void attend_range(AttnShared& sh, Pair (&acc)[2], const uint16_t* __restrict__ kc,
                             const uint16_t* __restrict__ vc, int start, int end, int kv_dim, int col0, int head_dim,
                             int g) {
  const int pairs = head_dim / 2, kstride = pairs | 1, items = g * pairs;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  acc[0] = acc[1] = Pair{0.0f, 0.0f};
  for (int row0 = start; row0 < end; row0 += kTile) {
    const int n_valid = min(kTile, end - row0);
    __syncthreads();  // the previous tile is consumed (and sh.q, sh.m are initialised on the first pass)
    load_tile<kVec4>(sh, kc, vc, row0, n_valid, kv_dim, col0, pairs, kstride);
    __syncthreads();

    // Scores: thread = (row, head); a warp shares the head, so q reads broadcast.
    {
      const int r = tid % kTile;
      for (int h = tid / kTile; h < g; h += kThreads / kTile) {
        float s = -INFINITY;
        if (r < n_valid) {
          const uint32_t* kr = sh.k + r * kstride;
          const float2* qh = reinterpret_cast<const float2*>(sh.q + h * head_dim);
          s = 0.0f;
          for (int c = 0; c < pairs; ++c) {
            const uint32_t w = kr[c];
            const float2 qq = qh[c];
            s = fmaf(qq.x, bf16_lo(w), s);
            s = fmaf(qq.y, bf16_hi(w), s);
          }
        }
        sh.p[h * kTile + r] = s;
      }
    }
    __syncthreads();

    // Softmax update: warp h owns head h.
    if (warp < g) {
      const float m_old = sh.m[warp];
      const float s0 = sh.p[warp * kTile + lane], s1 = sh.p[warp * kTile + lane + 32];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));  // finite: row0 < end gives a valid row
      const float e0 = exp2f(s0 - m_new), e1 = exp2f(s1 - m_new);  // -inf rows -> 0
      const float sum = warp_sum(e0 + e1);
      sh.p[warp * kTile + lane] = e0;
      sh.p[warp * kTile + lane + 32] = e1;
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);  // first tile: exp2(-inf) = 0
        sh.alpha[warp] = alpha;
        sh.l[warp] = sh.l[warp] * alpha + sum;
        sh.m[warp] = m_new;
      }
    }
    __syncthreads();

    // Weighted V: thread = (head, pair) items; V row reads are consecutive words across the warp.
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int it = tid + j * kThreads;
      if (it < items) {
        const int h = it / pairs, c = it - h * pairs;
        const float a = sh.alpha[h];
        float x = acc[j].x * a, y = acc[j].y * a;
        const float* ph = sh.p + h * kTile;
        for (int r = 0; r < n_valid; ++r) {
          const float w = ph[r];
          const uint32_t vv = sh.v[r * pairs + c];
          x = fmaf(w, bf16_lo(vv), x);
          y = fmaf(w, bf16_hi(vv), y);
        }
        acc[j] = Pair{x, y};
      }
    }
  }
  __syncthreads();  // final sh.m / sh.l visible to every thread
}

// Group queries (heads h0 .. h0 + g - 1, contiguous in q) into shared memory, pre-scaled.
__device__ __forceinline__ void load_group_q(AttnShared& sh, const float* __restrict__ q, int g, int head_dim,
                                             float qscale) {
  for (int i = threadIdx.x; i < g * head_dim; i += kThreads) sh.q[i] = q[i] * qscale;
  if (threadIdx.x < g) {
    sh.m[threadIdx.x] = -INFINITY;
    sh.l[threadIdx.x] = 0.0f;
  }
}

// Number of attended rows for a decode at *d_pos, clamped to the cache (a bad position must not read past it).
__device__ __forceinline__ int decode_len(const int* d_pos, int max_ctx) { return min(*d_pos + 1, max_ctx); }

// Grid (attention_max_splits, n_kv_heads). Split s covers rows [s * chunk, (s + 1) * chunk) of the current length
// (chunk = attention_split_rows of it); splits that start past the length exit at once (the merge reads only the
// splits that exist), so the grid depends on max_ctx only and the launch can live in a CUDA graph.
// part_o [n_splits, n_heads, head_dim] unnormalised outputs, part_ml [n_splits, n_heads] (max, sum).
template <bool kVec4>
__global__ __launch_bounds__(kThreads) void attention_decode_split_kernel(
    const float* __restrict__ q, const uint16_t* __restrict__ kc, const uint16_t* __restrict__ vc,
    const int* __restrict__ d_pos, int n_heads, int n_kv_heads, int head_dim, int max_ctx, int sms, float qscale,
    float* __restrict__ part_o, float2* __restrict__ part_ml, int64_t stride) {
  // The token axis (grid z; kernels/ops/token_axis.h): token z's q, position and partials are `stride` bytes on.
  q = token_ptr(q, stride, int(blockIdx.z));
  d_pos = token_ptr(d_pos, stride, int(blockIdx.z));
  part_o = token_ptr(part_o, stride, int(blockIdx.z));
  part_ml = token_ptr(part_ml, stride, int(blockIdx.z));
  __shared__ AttnShared sh;
  const int len = decode_len(d_pos, max_ctx);
  pdl_launch_dependents();  // the merge may launch now; it waits for this grid before reading
  const int chunk = attention_split_rows(n_kv_heads, len, sms);
  const int split = blockIdx.x, start = split * chunk;
  if (start >= len) return;
  const int end = min(start + chunk, len);
  const int kvh = blockIdx.y, g = n_heads / n_kv_heads, h0 = kvh * g, pairs = head_dim / 2;
  load_group_q(sh, q + int64_t(h0) * head_dim, g, head_dim, qscale);
  Pair acc[2];
  attend_range<kVec4>(sh, acc, kc, vc, start, end, n_kv_heads * head_dim, kvh * head_dim, head_dim, g);
  const int64_t row = int64_t(split) * n_heads + h0;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int it = threadIdx.x + j * kThreads;
    if (it < g * pairs) reinterpret_cast<float2*>(part_o + row * head_dim)[it] = make_float2(acc[j].x, acc[j].y);
  }
  if (threadIdx.x < g) part_ml[row + threadIdx.x] = make_float2(sh.m[threadIdx.x], sh.l[threadIdx.x]);
}

// One block per query head: out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s over the splits that ran.
__global__ void attention_decode_merge_kernel(const float* __restrict__ part_o, const float2* __restrict__ part_ml,
                                              const int* __restrict__ d_pos, int n_heads, int head_dim, int max_ctx,
                                              int n_kv_heads, int sms, float* __restrict__ out, int64_t stride) {
  part_o = token_ptr(part_o, stride, int(blockIdx.y));  // the token axis (grid y)
  part_ml = token_ptr(part_ml, stride, int(blockIdx.y));
  d_pos = token_ptr(d_pos, stride, int(blockIdx.y));
  out = token_ptr(out, stride, int(blockIdx.y));
  pdl_wait();               // launched early (programmatic dependent launch): the split pass's writes are visible now
  pdl_launch_dependents();  // the GEMV after this kernel may start streaming its weights
  const int h = blockIdx.x;
  const int n_active = attention_decode_splits(*d_pos, max_ctx, n_kv_heads, sms);
  merge_split_row(part_o, part_ml, h, n_heads, n_active, head_dim, out + int64_t(h) * head_dim);
}

// Grid (n_tokens, n_kv_heads): query token t (position pos0 + t) of one group over rows [0, pos0 + t].
template <bool kVec4>
__global__ __launch_bounds__(kThreads) void attention_prefill_kernel(const float* __restrict__ q,
                                                                     const uint16_t* __restrict__ kc,
                                                                     const uint16_t* __restrict__ vc, int pos0,
                                                                     int n_heads, int n_kv_heads, int head_dim,
                                                                     float qscale, float* __restrict__ out,
                                                                     const int* __restrict__ d_pos0) {
  if (d_pos0) pos0 = *d_pos0;  // a captured pass (verify's graph) reads its position on the device
  __shared__ AttnShared sh;
  const int t = blockIdx.x, kvh = blockIdx.y, g = n_heads / n_kv_heads, h0 = kvh * g, pairs = head_dim / 2;
  const int64_t q_off = int64_t(t) * n_heads * head_dim + int64_t(h0) * head_dim;
  load_group_q(sh, q + q_off, g, head_dim, qscale);
  Pair acc[2];
  attend_range<kVec4>(sh, acc, kc, vc, 0, pos0 + t + 1, n_kv_heads * head_dim, kvh * head_dim, head_dim, g);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int it = threadIdx.x + j * kThreads;
    if (it < g * pairs) {
      const int h = it / pairs;
      const float inv = 1.0f / sh.l[h];
      float* o = out + q_off + 2 * it;  // item it = h * pairs + c -> element h * head_dim + 2c of the group
      o[0] = acc[j].x * inv;
      o[1] = acc[j].y * inv;
    }
  }
}

void check_attention_shape(const char* op, int n_heads, int n_kv_heads, int head_dim) {
  if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
    fail(op, ": n_heads (", n_heads, ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  if (n_heads / n_kv_heads > kMaxGroup)
    fail(op, ": grouped-query ratio ", n_heads / n_kv_heads, " exceeds the supported ", kMaxGroup);
  if (head_dim < 2 || head_dim > kMaxHeadDim || head_dim % 2 != 0)
    fail(op, ": head_dim ", head_dim, " unsupported (expected an even value in 2..", kMaxHeadDim, ")");
}

// 16-byte K/V loads need whole 8-element groups per head and 16-byte aligned cache rows.
bool use_vec4(const uint16_t* kc, const uint16_t* vc, int head_dim) {
  return head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(kc) % 16 == 0 && reinterpret_cast<uintptr_t>(vc) % 16 == 0;
}

void check_cache_alignment(const char* op, const uint16_t* kc, const uint16_t* vc) {
  if (reinterpret_cast<uintptr_t>(kc) % 4 != 0 || reinterpret_cast<uintptr_t>(vc) % 4 != 0)
    fail(op, ": K/V cache pointers must be 4-byte aligned");
}

float query_scale(int head_dim) { return kLog2e / std::sqrt(float(head_dim)); }

// Most splits (one partial result each) a decode at max_ctx can have, for any n_kv_heads >= 1.
size_t max_decode_parts(int max_ctx, int sms) { return size_t(attention_max_splits(1, max_ctx, sms)); }

size_t part_ml_bytes(int n_heads, int max_ctx, int sms) {
  return (max_decode_parts(max_ctx, sms) * size_t(n_heads) * sizeof(float2) + 255) / 256 * 256;
}

}  // namespace

int attention_decode_chunk(int n_kv_heads, int len, int sms) { return attention_split_rows(n_kv_heads, len, sms); }

int attention_decode_chunk(int n_kv_heads, int len) { return attention_decode_chunk(n_kv_heads, len, gemv_sm_count()); }

size_t attention_decode_scratch_bytes(int n_heads, int head_dim, int max_ctx) {
  const int sms = gemv_sm_count();
  return part_ml_bytes(n_heads, max_ctx, sms) +
         max_decode_parts(max_ctx, sms) * size_t(n_heads) * size_t(head_dim) * sizeof(float);
}

size_t attention_prefill_scratch_bytes(int n_heads, int n_kv_heads, int head_dim, int max_ctx) {
  if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || max_ctx <= 0) return 0;
  return prefill_split_scratch_bytes(n_heads, n_kv_heads, head_dim, max_ctx, gemv_sm_count());
}

namespace {

// The key-split form of a short prefill pass where it applies (a scratch and a cache length given, a pass that fits
// one block, the whole pass inside the cache); otherwise no split.
PrefillScratch prefill_split(const char* op, int pos0, int n_tokens, int n_heads, int n_kv_heads, void* scratch,
                             int max_ctx, const int* d_pos0) {
  if (scratch == nullptr || max_ctx <= 0 || !attention_prefill_split_applies(n_tokens, n_heads, n_kv_heads))
    return PrefillScratch{};
  if (reinterpret_cast<uintptr_t>(scratch) % 16 != 0) fail(op, ": scratch must be 16-byte aligned");
  if (d_pos0 == nullptr && int64_t(pos0) + n_tokens > max_ctx)
    fail(op, ": positions ", pos0, " .. ", int64_t(pos0) + n_tokens - 1, " exceed the cache of ", max_ctx, " rows");
  const int sms = gemv_sm_count();
  // A pass whose position is known here and whose keys make one split anyway (a short prompt at the start): the plain
  // kernel, without the merge's launch. A captured pass (d_pos0) is replayed at any position: always split.
  if (d_pos0 == nullptr && attention_len_splits(n_kv_heads, pos0 + n_tokens, sms) == 1)
    return PrefillScratch{};
  return PrefillScratch{scratch, max_ctx, sms};
}

// The split pass (split(sms, part_o, part_ml)) and the merge of one decode, with the checks both cache forms share.
// The merge is launched as a programmatic dependent of the split pass: its launch overlaps the split's run, and it
// waits (griddepcontrol.wait) for the split grid's writes before reading them.
// (Measured and dropped, H100 2026-12-06, commit 2088ab7: no merge kernel, the last split block of each KV head merging
// after an arrival count. One kernel boundary less per layer, yet slower end to end: synthetic SmolLM2 Q4_1 warp
// 1,531 -> 1,473 t/s, TinyLlama BF16 warp-r2 871.5 -> 833.0, 8B Q4_0 warp-dp4a 459.1 -> 432.1 (llama-ab tg128, same
// call). There the next GEMV launched at the split pass's start and shared the SMs with it, and one block per KV head
// merged what n_heads blocks merge here.)
template <typename Split>
void decode_split_merge(const char* op, const int* d_pos, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                        float* out, void* scratch, cudaStream_t s, AttnSplitParts* defer, Split split,
                        TokenAxis tok = {}) {
  if (max_ctx <= 0) fail(op, ": max_ctx must be positive, found ", max_ctx);
  if (reinterpret_cast<uintptr_t>(scratch) % 16 != 0) fail(op, ": scratch must be 16-byte aligned");
  const int sms = gemv_sm_count();
  float2* part_ml = static_cast<float2*>(scratch);
  float* part_o = reinterpret_cast<float*>(static_cast<char*>(scratch) + part_ml_bytes(n_heads, max_ctx, sms));
  split(sms, part_o, part_ml);
  if (defer) {  // the consumer merges (merge_split_max / merge_split_value, as the kernel below)
    defer->part_o = part_o;
    defer->part_ml = reinterpret_cast<const float*>(part_ml);
    defer->d_pos = d_pos;
    defer->n_heads = n_heads;
    defer->n_kv_heads = n_kv_heads;
    defer->head_dim = head_dim;
    defer->max_ctx = max_ctx;
    defer->sms = sms;
    return;
  }
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = pdl_launch_config(unsigned(n_heads), 128, s, true, &attr);
  config.gridDim.y = unsigned(tok.n);
  CUDA_CHECK(cudaLaunchKernelEx(&config, attention_decode_merge_kernel, static_cast<const float*>(part_o),
                                static_cast<const float2*>(part_ml), d_pos, n_heads, head_dim, max_ctx, n_kv_heads,
                                sms, out, tok.stride));
  CUDA_CHECK_LAUNCH("attention_decode_merge_kernel");
}

void check_fp8(const char* op, int n_heads, int n_kv_heads, int head_dim, const float* q, const uint8_t* kc,
               const uint8_t* vc, const float* k_scale, const float* v_scale, const float* out) {
  check_attention_shape(op, n_heads, n_kv_heads, head_dim);
  if (!attention_fp8_supported(head_dim, n_heads, n_kv_heads))
    fail(op, ": the FP8 KV cache needs head_dim 64 or 128 (found ", head_dim, ")");
  if (!attention_tc_supported(head_dim, n_heads / n_kv_heads, q, kc, vc, out))
    fail(op, ": q/out must be 8-byte and the FP8 caches 16-byte aligned");
  if (k_scale == nullptr || v_scale == nullptr) fail(op, ": null FP8 scales");
}

}  // namespace

void attention_decode(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, const int* d_pos, int n_heads,
                      int n_kv_heads, int head_dim, int max_ctx, float* out, void* scratch, cudaStream_t s,
                      AttnSplitParts* defer, TokenAxis tok) {
  check_attention_shape("attention_decode", n_heads, n_kv_heads, head_dim);
  if (tok.n < 1 || (tok.many() && (tok.stride <= 0 || tok.stride % 16 != 0)))
    fail("attention_decode: a token axis of ", tok.n, " tokens ", tok.stride, " bytes apart");
  check_cache_alignment("attention_decode", k_cache, v_cache);
  const float qscale = query_scale(head_dim);
  decode_split_merge("attention_decode", d_pos, n_heads, n_kv_heads, head_dim, max_ctx, out, scratch, s, defer,
                     [&](int sms, float* part_o, float2* part_ml) {
    if (attention_tc_supported(head_dim, n_heads / n_kv_heads, q, k_cache, v_cache, out)) {
      attention_decode_tc(q, k_cache, v_cache, d_pos, n_heads, n_kv_heads, head_dim, max_ctx, sms, qscale, part_o,
                          part_ml, s, DecodeRope{}, tok);
      return;
    }
    const dim3 grid{unsigned(attention_max_splits(n_kv_heads, max_ctx, sms)), unsigned(n_kv_heads), unsigned(tok.n)};
    if (use_vec4(k_cache, v_cache, head_dim))
      attention_decode_split_kernel<true><<<grid, kThreads, 0, s>>>(q, k_cache, v_cache, d_pos, n_heads, n_kv_heads,
                                                                    head_dim, max_ctx, sms, qscale, part_o, part_ml,
                                                                    tok.stride);
    else
      attention_decode_split_kernel<false><<<grid, kThreads, 0, s>>>(q, k_cache, v_cache, d_pos, n_heads,
                                                                     n_kv_heads, head_dim, max_ctx, sms, qscale,
                                                                     part_o, part_ml, tok.stride);
    CUDA_CHECK_LAUNCH("attention_decode_split_kernel");
  }, tok);
}

bool attention_decode_rope_supported(int head_dim, int n_heads, int n_kv_heads, const float* q, const uint16_t* k_cache,
                                     const uint16_t* v_cache, const float* out) {
  return n_kv_heads > 0 && n_heads > 0 && n_heads % n_kv_heads == 0 &&
         attention_tc_supported(head_dim, n_heads / n_kv_heads, q, k_cache, v_cache, out);
}

void attention_decode_rope(const float* q, const float* k, const float* v, const float* inv_freq, uint16_t* k_cache,
                           uint16_t* v_cache, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                           int max_ctx, float* out, void* scratch, cudaStream_t s, AttnSplitParts* defer) {
  check_attention_shape("attention_decode_rope", n_heads, n_kv_heads, head_dim);
  if (!attention_decode_rope_supported(head_dim, n_heads, n_kv_heads, q, k_cache, v_cache, out))
    fail("attention_decode_rope: needs head_dim 64 or 128 (found ", head_dim, "), a group of 1 to 8 heads (found ",
         n_heads / n_kv_heads, "), q/out 8-byte and caches 16-byte aligned; run rope_kv_store and attention_decode");
  if (k == nullptr || v == nullptr || inv_freq == nullptr) fail("attention_decode_rope: null k, v or inv_freq");
  const DecodeRope rope{k, v, inv_freq, k_cache, v_cache};
  decode_split_merge("attention_decode_rope", d_pos, n_heads, n_kv_heads, head_dim, max_ctx, out, scratch, s, defer,
                     [&](int sms, float* part_o, float2* part_ml) {
    attention_decode_tc(q, k_cache, v_cache, d_pos, n_heads, n_kv_heads, head_dim, max_ctx, sms, query_scale(head_dim),
                        part_o, part_ml, s, rope);
  });
}

bool attention_fp8_supported(int head_dim, int n_heads, int n_kv_heads) {
  return (head_dim == 64 || head_dim == 128) && n_kv_heads > 0 && n_heads % n_kv_heads == 0 &&
         n_heads / n_kv_heads >= 1 && n_heads / n_kv_heads <= kMaxGroup;
}

void attention_decode_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                          const float* v_scale, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                          int max_ctx, float* out, void* scratch, cudaStream_t s, AttnSplitParts* defer) {
  check_fp8("attention_decode_fp8", n_heads, n_kv_heads, head_dim, q, k_codes, v_codes, k_scale, v_scale, out);
  decode_split_merge("attention_decode_fp8", d_pos, n_heads, n_kv_heads, head_dim, max_ctx, out, scratch, s, defer,
                     [&](int sms, float* part_o, float2* part_ml) {
    attention_decode_tc_fp8(q, k_codes, v_codes, k_scale, v_scale, d_pos, n_heads, n_kv_heads, head_dim, max_ctx,
                            sms, query_scale(head_dim), part_o, part_ml, s);
  });
}

void attention_prefill_fp8(const float* q, const uint8_t* k_codes, const uint8_t* v_codes, const float* k_scale,
                           const float* v_scale, int pos0, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                           float* out, cudaStream_t s, void* scratch, int max_ctx) {
  check_fp8("attention_prefill_fp8", n_heads, n_kv_heads, head_dim, q, k_codes, v_codes, k_scale, v_scale, out);
  if (pos0 < 0 || n_tokens < 0) fail("attention_prefill_fp8: invalid pos0 ", pos0, " or n_tokens ", n_tokens);
  if (n_tokens == 0) return;
  attention_prefill_tc_fp8(q, k_codes, v_codes, k_scale, v_scale, pos0, n_tokens, n_heads, n_kv_heads, head_dim,
                           query_scale(head_dim), out, s,
                           prefill_split("attention_prefill_fp8", pos0, n_tokens, n_heads, n_kv_heads, scratch,
                                         max_ctx, nullptr));
}

void attention_prefill(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int pos0, int n_tokens,
                       int n_heads, int n_kv_heads, int head_dim, float* out, cudaStream_t s, const int* d_pos0,
                       void* scratch, int max_ctx) {
  check_attention_shape("attention_prefill", n_heads, n_kv_heads, head_dim);
  check_cache_alignment("attention_prefill", k_cache, v_cache);
  if (pos0 < 0 || n_tokens < 0) fail("attention_prefill: invalid pos0 ", pos0, " or n_tokens ", n_tokens);
  if (n_tokens == 0) return;
  const float qscale = query_scale(head_dim);
  if (attention_tc_supported(head_dim, n_heads / n_kv_heads, q, k_cache, v_cache, out)) {
    attention_prefill_tc(q, k_cache, v_cache, pos0, n_tokens, n_heads, n_kv_heads, head_dim, qscale, out, s, d_pos0,
                         prefill_split("attention_prefill", pos0, n_tokens, n_heads, n_kv_heads, scratch, max_ctx,
                                       d_pos0));
    return;
  }
  const dim3 grid{unsigned(n_tokens), unsigned(n_kv_heads)};
  if (use_vec4(k_cache, v_cache, head_dim))
    attention_prefill_kernel<true><<<grid, kThreads, 0, s>>>(q, k_cache, v_cache, pos0, n_heads, n_kv_heads, head_dim,
                                                             qscale, out, d_pos0);
  else
    attention_prefill_kernel<false><<<grid, kThreads, 0, s>>>(q, k_cache, v_cache, pos0, n_heads, n_kv_heads,
                                                              head_dim, qscale, out, d_pos0);
  CUDA_CHECK_LAUNCH("attention_prefill_kernel");
}

}  // namespace llm
