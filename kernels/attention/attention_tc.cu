// Attention on the tensor cores (flash-attention style) for head_dim 64 and 128 over the BF16 or FP8 KV cache:
//
// - Prefill: a block takes 64 query rows, (token, head) pairs of one grouped-query group, so the group's heads share
//   every K/V tile the block loads. 64-key K/V tiles stream through a two-stage cp.async ring (16-byte loads, rows
//   past the attended range zero-filled); each warp multiplies its 16 query rows against a tile (S = Q K^T), keeps
//   the online softmax in registers and accumulates O += P V, both on mma.m16n8k16. Tiles past a warp's last causal
//   key are skipped; only the tiles that straddle the diagonal are masked.
// - Decode: the same fragments with one query row per head of the group (padded to 16). A block owns one KV split of
//   one KV head; each of its warps walks its own 16-key tiles through a private three-stage ring, so there is no
//   block barrier in the loop and every warp keeps two tiles (FP8: four) of loads in flight. The block combines its
//   warps' (max, sum, output) in shared memory and writes one partial per split; attention.cu's merge kernel combines
//   those. The split rows follow the length read on the device (attention_split_rows).
//
// Precision: Q and the softmax weights P (FP32) go to the tensor cores as two terms each (hi + lo, two mma; rounding
// Q once in prefill cost ~1e-3 of the output and, measured on the H200, no time); K and V as stored, accumulation
// FP32: the result matches the FP32 kernels to ~1e-5. The BF16 cache runs BF16 mma. The FP8 cache runs FP16 mma: its E4M3 codes
// become FP16 values exactly in one conversion per pair (via BF16 it took four, at a quarter of the issue rate,
// and bounded the loop), and Q and P are FP16 terms (q * log2(e) / sqrt(head_dim) beyond FP16's 65504 would be
// infinite, and the logits check would report it).
#include <cmath>

#include "core/error.h"
#include "core/kv_dtype.h"  // kKvFp8Block
#include "kernels/attention/attention_internal.h"
#include "kernels/attention/attention_mma.cuh"
#include "kernels/attention/split_merge.cuh"
#include "kernels/cuda_check.h"
#include "kernels/ops/pdl.cuh"
#include "kernels/ops/rope_device.cuh"  // rotate_pair

namespace llm {
namespace {

using namespace attn;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPrefillRows = 64;  // query rows per block, 16 per warp
constexpr int kPrefillKeys = 64;  // keys per K/V tile
constexpr int kDecodeKeys = 16;   // keys per warp tile
// Tiles per warp ring: BF16 keeps two 8 KB tiles (head_dim 128) in flight while one is used; FP8 tiles are half
// the bytes, so four are in flight (the same bytes), which still fits two blocks per SM.
template <bool kFp8>
__host__ __device__ constexpr int decode_stages() {
  return kFp8 ? 5 : 3;
}

// Shared-memory rows are head_dim + 8 BF16 long: 16-byte aligned, and the 8 rows an ldmatrix reads fall in
// distinct banks.
template <int HD>
__host__ __device__ constexpr int row_stride() {
  return HD + 8;
}


// Where K/V tiles come from. BF16: cp.async straight into the tile the tensor cores read. FP8 (E4M3 codes with one
// FP32 scale per block of kFp8Block positions and KV head): cp.async of the codes and the tile's scales into a
// staging area, then a conversion to FP16 (exact) into the tile; the scales are applied in FP32, to the scores (K)
// and to each 16 keys' P V product (V).
struct KvSource {
  const void* k;
  const void* v;
  const float* k_scale;  // FP8: [n_blocks, n_kv_heads]
  const float* v_scale;
};

constexpr int kFp8Block = kKvFp8Block;  // positions per FP8 scale (engine/kv_cache.h)
static_assert(kFp8Block % 16 == 0 && 64 % kFp8Block == 0, "a decode tile lies in one block, a prefill tile in whole ones");

// Bytes of one stage of `keys` cache rows (K then V, then for FP8 four scale slots: K blocks 0, 1, V blocks 0, 1).
template <int HD, bool kFp8>
__host__ __device__ constexpr int raw_row_bytes() {
  return kFp8 ? HD + 16 : 2 * row_stride<HD>();
}
template <int HD, bool kFp8>
__host__ __device__ constexpr int stage_bytes(int keys) {
  return 2 * keys * raw_row_bytes<HD, kFp8>() + (kFp8 ? 16 : 0);
}
// The converted FP16 tile (FP8 only): K then V, `keys` rows each.
template <int HD, bool kFp8>
__host__ __device__ constexpr int convert_bytes(int keys) {
  return kFp8 ? 2 * keys * row_stride<HD>() * 2 : 0;
}

// Keys [key0, key0 + KEYS) of one KV head (columns col0 .. col0 + HD) into the stage at st, `lanes` threads from
// `lane`; keys at or past `end` are written as zeros (their cache rows may hold garbage, even NaN bits).
template <int HD, bool kFp8, int KEYS>
__device__ __forceinline__ void load_stage(uint8_t* st, const KvSource& kv, int key0, int end, int64_t kv_dim,
                                           int col0, int kvh, int n_kv_heads, int lane, int lanes) {
  constexpr int kElems = 16 / (kFp8 ? 1 : 2), kChunks = HD / kElems;
  const int esz = kFp8 ? 1 : 2;
  const uint8_t* kc = static_cast<const uint8_t*>(kv.k);
  const uint8_t* vc = static_cast<const uint8_t*>(kv.v);
  uint8_t* ks = st;
  uint8_t* vs = st + KEYS * raw_row_bytes<HD, kFp8>();
  for (int i = lane; i < KEYS * kChunks; i += lanes) {
    const int r = i / kChunks, cc = (i - r * kChunks) * kElems;
    const int key = key0 + r;
    const bool ok = key < end;
    const int64_t off = (int64_t(ok ? key : 0) * kv_dim + col0 + cc) * esz;
    cp_async_16(ks + r * raw_row_bytes<HD, kFp8>() + cc * esz, kc + off, ok);
    cp_async_16(vs + r * raw_row_bytes<HD, kFp8>() + cc * esz, vc + off, ok);
  }
  if (kFp8) {
    constexpr int nb = KEYS >= kFp8Block ? KEYS / kFp8Block : 1;
    float* sc = reinterpret_cast<float*>(st + 2 * KEYS * raw_row_bytes<HD, kFp8>());
    for (int i = lane; i < 2 * nb; i += lanes) {
      const int which = i / nb, b = (key0 + (i - which * nb) * kFp8Block) / kFp8Block;
      const bool ok = b * kFp8Block < end;
      const float* src = (which ? kv.v_scale : kv.k_scale) + int64_t(ok ? b : 0) * n_kv_heads + kvh;
      cp_async_4(sc + 2 * which + (i - which * nb), src, ok);
    }
  }
}

// `rows` rows of E4M3 codes (a stage's layout) -> FP16 rows (exact) of the tile layout at cv.
template <int HD>
__device__ __forceinline__ void convert_rows(const uint8_t* raw, uint16_t* cv, int rows, int lane, int lanes) {
  constexpr int kItems = HD / 8;  // 8 codes -> 8 FP16
  for (int i = lane; i < rows * kItems; i += lanes) {
    const int r = i / kItems, cc = (i - r * kItems) * 8;
    const uint2 w = *reinterpret_cast<const uint2*>(raw + r * raw_row_bytes<HD, true>() + cc);
    uint4 o;
    o.x = e4m3x2_to_f16x2(w.x);
    o.y = e4m3x2_to_f16x2(w.x >> 16);
    o.z = e4m3x2_to_f16x2(w.y);
    o.w = e4m3x2_to_f16x2(w.y >> 16);
    *reinterpret_cast<uint4*>(cv + r * row_stride<HD>() + cc) = o;
  }
}

// The K and V tiles of a loaded stage: the stage itself (BF16), or its codes converted into cv (FP8, as FP16; the
// caller synchronises the threads that convert with the ones that read before using the tile).
template <int HD, bool kFp8, int KEYS>
__device__ __forceinline__ const uint16_t* tile_of(const uint8_t* st, uint16_t* cv, int lane, int lanes) {
  if (!kFp8) return reinterpret_cast<const uint16_t*>(st);
  convert_rows<HD>(st, cv, 2 * KEYS, lane, lanes);  // K rows, then V rows: contiguous in both layouts
  return cv;
}

// A stage's scales: K of block j (0, 1) at [j], V at [2 + j].
template <int HD, bool kFp8>
__device__ __forceinline__ const float* stage_scales(const uint8_t* st, int keys) {
  return reinterpret_cast<const float*>(st + 2 * keys * raw_row_bytes<HD, kFp8>());
}

// s[2 np], s[2 np + 1] = Q K^T for keys 16 np .. 16 np + 15 of the tile at ks. a_hi / a_lo: Q's A fragments (a_lo
// only with kLo: Q as two BF16 terms).
template <int HD, int NT, bool kLo, bool kF16>
__device__ __forceinline__ void scores(float (&s)[NT][4], const uint32_t (&a_hi)[HD / 16][4],
                                       const uint32_t (&a_lo)[HD / 16][4], const uint16_t* ks, int lane) {
#pragma unroll
  for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];  // matrices: keys +0 / +8 (lane bit 4), dims +0 / +8 (lane bit 3)
      ldmatrix_x4(b, ks + (16 * np + ((lane >> 4) << 3) + (lane & 7)) * row_stride<HD>() + 16 * kk +
                         (((lane >> 3) & 1) << 3));
      mma<kF16>(s[2 * np], a_hi[kk], b[0], b[1]);
      mma<kF16>(s[2 * np + 1], a_hi[kk], b[2], b[3]);
      if (kLo) {
        mma<kF16>(s[2 * np], a_lo[kk], b[0], b[1]);
        mma<kF16>(s[2 * np + 1], a_lo[kk], b[2], b[3]);
      }
    }
  }
}

// o += sv * P V for the 16 keys 16 kp .. 16 kp + 15 of the tile at vs; p_hi / p_lo are P's A fragment. kScaled (the
// FP8 cache: V as codes, sv its block's scale): each pair of n-tiles is multiplied into fresh accumulators and added
// to o times sv in FP32, so P stays in [0, 1] on the FP16 tensor cores (P * sv would fall below FP16's normal range
// for a small scale and lose its bits). Without kScaled sv is 1 and unused.
template <int HD, bool kF16, bool kScaled>
__device__ __forceinline__ void accumulate_pv(float (&o)[HD / 8][4], const uint32_t (&p_hi)[4],
                                              const uint32_t (&p_lo)[4], const uint16_t* vs, int kp, int lane,
                                              float sv) {
#pragma unroll
  for (int dp = 0; dp < HD / 16; ++dp) {
    uint32_t b[4];  // matrices (transposed): keys +0 / +8 (lane bit 3), dims +0 / +8 (lane bit 4)
    ldmatrix_x4_trans(b, vs + (16 * kp + (((lane >> 3) & 1) << 3) + (lane & 7)) * row_stride<HD>() + 16 * dp +
                             ((lane >> 4) << 3));
    if (kScaled) {
      float t0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, t1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma<kF16>(t0, p_hi, b[0], b[1]);
      mma<kF16>(t0, p_lo, b[0], b[1]);
      mma<kF16>(t1, p_hi, b[2], b[3]);
      mma<kF16>(t1, p_lo, b[2], b[3]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        o[2 * dp][e] = fmaf(sv, t0[e], o[2 * dp][e]);
        o[2 * dp + 1][e] = fmaf(sv, t1[e], o[2 * dp + 1][e]);
      }
    } else {
      mma<kF16>(o[2 * dp], p_hi, b[0], b[1]);
      mma<kF16>(o[2 * dp], p_lo, b[0], b[1]);
      mma<kF16>(o[2 * dp + 1], p_hi, b[2], b[3]);
      mma<kF16>(o[2 * dp + 1], p_lo, b[2], b[3]);
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- prefill -----------------------------------------------------------------------------------------------------

template <int HD, bool kFp8>
__host__ __device__ constexpr int prefill_smem_bytes() {
  return 2 * stage_bytes<HD, kFp8>(kPrefillKeys) + convert_bytes<HD, kFp8>(kPrefillKeys);  // two stages
}

// The online softmax of one prefill tile for this thread's two rows (fragment rows lane / 4 and lane / 4 + 8): the
// scores s become exp2(s - new max) in place, the running max m and this thread's part of the sum l are updated
// (the quad is summed at the end), and the output o is rescaled by exp2(old max - new max).
template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&o)[DT][4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
    // Without key splits a warp's first tile is tile 0, whose key 0 every row attends, so m_new is finite. In a key
    // split a row may have no key yet (every one past its diagonal): m_new = -inf, and the base 0 keeps alpha and the
    // weights 0 instead of NaN.
    const float m_new = fmaxf(m[i], quad_max(mx));
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[i] - base);  // first tile: exp2(-inf) = 0
    m[i] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * i] = exp2f(s[n][2 * i] - base);
      s[n][2 * i + 1] = exp2f(s[n][2 * i + 1] - base);
      sum += s[n][2 * i] + s[n][2 * i + 1];
    }
    l[i] = l[i] * alpha + sum;
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][2 * i] *= alpha, o[d][2 * i + 1] *= alpha;
  }
}

// Key splits of a short pass (attention_prefill with scratch): grid z is the split, keys [z * chunk, (z + 1) * chunk)
// of the pass's length pos0 + n_tokens, chunk = attention_split_rows of that length (decode's rule, applied on the
// device, so a captured pass stays right at every position); splits starting past the length exit. Each writes its
// unnormalised rows and (max, sum) per (token, head): part_o [split, n_tokens * n_heads, HD], part_ml [split, ...];
// prefill_merge_kernel combines them.
struct PrefillSplit {
  float* part_o = nullptr;  // null: no key split, the block writes out
  float2* part_ml = nullptr;
  int sms = 0;
};

// Grid (token blocks, n_kv_heads, key splits). Block row r (0..63) is token t0 + r / g, head h0 + r % g; rows past
// the block's tokens (r >= 64 / g * g, or past n_tokens) compute a copy of a real row and are not stored.
template <int HD, bool kFp8>
__global__ __launch_bounds__(kThreads) void flash_prefill_kernel(const float* __restrict__ q, KvSource kv, int pos0,
                                                                 int n_tokens, int n_heads, int n_kv_heads,
                                                                 float qscale, float* __restrict__ out,
                                                                 const int* __restrict__ d_pos0, PrefillSplit sp) {
  if (d_pos0) pos0 = *d_pos0;  // a captured pass (verify's graph) reads its position on the device
  if (sp.part_o) pdl_launch_dependents();  // the merge may launch now; it waits for this grid before reading
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int S = row_stride<HD>(), NT = kPrefillKeys / 8, KS = HD / 16, DT = HD / 8;
  const int g = n_heads / n_kv_heads, tpb = kPrefillRows / g;
  const int kvh = blockIdx.y, h0 = kvh * g;
  const int t0 = int(gridDim.x - 1 - blockIdx.x) * tpb;  // the longest (latest) token blocks start first
  const int t_last = min(t0 + tpb, n_tokens) - 1;
  int kv_end = pos0 + t_last + 1, key_begin = 0;
  if (sp.part_o) {  // this split's keys; chunk is a multiple of the 64-key tile, so only kv_end cuts a tile
    const int chunk = attention_split_rows(n_kv_heads, pos0 + n_tokens, sp.sms);
    key_begin = int(blockIdx.z) * chunk;
    if (key_begin >= kv_end) return;
    kv_end = min(kv_end, key_begin + chunk);
  }
  const int64_t kv_dim = int64_t(n_kv_heads) * HD, q_dim = int64_t(n_heads) * HD;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = (lane & 3) * 2;

  // This thread's two rows (fragment rows lane / 4 and lane / 4 + 8 of the warp's 16).
  int tok[2], head[2], pos[2];
  bool store[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 16 * warp + (lane >> 2) + 8 * i, t = r / g;
    store[i] = r < tpb * g && t0 + t < n_tokens;
    tok[i] = min(t0 + t, t_last);
    head[i] = h0 + r - t * g;
    pos[i] = pos0 + tok[i];
  }
  const int warp_min_pos = pos0 + min(t0 + (16 * warp) / g, t_last);
  const int warp_max_pos = pos0 + min(t0 + (16 * warp + 15) / g, t_last);

  uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = j & 1;
      const float2 v = *reinterpret_cast<const float2*>(q + tok[i] * q_dim + int64_t(head[i]) * HD + 16 * kk + c +
                                                        ((j >> 1) << 3));
      split<kFp8>(v.x * qscale, v.y * qscale, qh[kk][j], ql[kk][j]);
    }

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int j0 = key_begin / kPrefillKeys, n_tiles = (kv_end + kPrefillKeys - 1) / kPrefillKeys;
  auto stage = [&](int j) { return smem + (j & 1) * stage_bytes<HD, kFp8>(kPrefillKeys); };
  uint16_t* cv = reinterpret_cast<uint16_t*>(smem + 2 * stage_bytes<HD, kFp8>(kPrefillKeys));
  auto load = [&](int j) {
    load_stage<HD, kFp8, kPrefillKeys>(stage(j), kv, j * kPrefillKeys, kv_end, kv_dim, kvh * HD, kvh, n_kv_heads,
                                       threadIdx.x, kThreads);
  };
  load(j0);
  cp_async_commit();
  for (int j = j0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) load(j + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t* ks = tile_of<HD, kFp8, kPrefillKeys>(stage(j), cv, threadIdx.x, kThreads);
    if (kFp8) __syncthreads();  // the whole converted tile is in place
    const uint16_t* vs = ks + kPrefillKeys * S;
    const float* sc = stage_scales<HD, kFp8>(stage(j), kPrefillKeys);
    const int key0 = j * kPrefillKeys;
    if (key0 <= warp_max_pos) {  // warp-uniform: tiles wholly after this warp's rows are skipped
      float s[NT][4];
      scores<HD, NT, true, kFp8>(s, qh, ql, ks, lane);
      if (kFp8) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const float sk = sc[n / (kFp8Block / 8)];
          s[n][0] *= sk, s[n][1] *= sk, s[n][2] *= sk, s[n][3] *= sk;
        }
      }
      if (key0 + kPrefillKeys - 1 > warp_min_pos) {  // the tile crosses some row's diagonal
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (key0 + 8 * n + c + (e & 1) > pos[e >> 1]) s[n][e] = -INFINITY;
      }
      online_softmax(s, m, l, o);
#pragma unroll
      for (int kp = 0; kp < NT / 2; ++kp) {
        const float sv = kFp8 ? sc[2 + kp / (kFp8Block / 16)] : 1.0f;  // V's scale for these 16 keys
        uint32_t ph[4], pl[4];  // A fragment of P for keys 16 kp ..: the C fragments of n-tiles 2 kp, 2 kp + 1
        split<kFp8>(s[2 * kp][0], s[2 * kp][1], ph[0], pl[0]);
        split<kFp8>(s[2 * kp][2], s[2 * kp][3], ph[1], pl[1]);
        split<kFp8>(s[2 * kp + 1][0], s[2 * kp + 1][1], ph[2], pl[2]);
        split<kFp8>(s[2 * kp + 1][2], s[2 * kp + 1][3], ph[3], pl[3]);
        accumulate_pv<HD, kFp8, kFp8>(o, ph, pl, vs, kp, lane, sv);
      }
    }
    __syncthreads();  // every warp is done with stage(j) (and the converted tile) before they are refilled
  }

  if (sp.part_o) {  // unnormalised rows and (max, sum); a row without keys here: m = -inf, l = 0, o = 0
    const int64_t rows = int64_t(n_tokens) * n_heads;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float sum = quad_sum(l[i]);
      if (!store[i]) continue;
      const int64_t row = int64_t(blockIdx.z) * rows + int64_t(tok[i]) * n_heads + head[i];
      float* dst = sp.part_o + row * HD + c;
#pragma unroll
      for (int d = 0; d < DT; ++d) *reinterpret_cast<float2*>(dst + 8 * d) = make_float2(o[d][2 * i], o[d][2 * i + 1]);
      if ((lane & 3) == 0) sp.part_ml[row] = make_float2(m[i], sum);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float inv = 1.0f / quad_sum(l[i]);
    if (!store[i]) continue;
    float* dst = out + tok[i] * q_dim + int64_t(head[i]) * HD + c;
#pragma unroll
    for (int d = 0; d < DT; ++d)
      *reinterpret_cast<float2*>(dst + 8 * d) = make_float2(o[d][2 * i] * inv, o[d][2 * i + 1] * inv);
  }
}

// One block per (token, head) row of a key-split pass: out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s over the
// splits of the pass's length (split 0 holds key 0, which every row attends, so M is finite).
__global__ void prefill_merge_kernel(const float* __restrict__ part_o, const float2* __restrict__ part_ml, int pos0,
                                     const int* __restrict__ d_pos0, int n_tokens, int n_heads, int n_kv_heads,
                                     int head_dim, int sms, float* __restrict__ out) {
  pdl_wait();               // launched early (programmatic dependent launch): the split pass's writes are visible now
  pdl_launch_dependents();  // the GEMV after this kernel may start streaming its weights
  if (d_pos0) pos0 = *d_pos0;
  const int64_t row = blockIdx.x;
  const int n_active = attention_len_splits(n_kv_heads, pos0 + n_tokens, sms);
  // A split past this row's diagonal weighs 0 (m = -inf there).
  merge_split_row(part_o, part_ml, row, int64_t(n_tokens) * n_heads, n_active, head_dim, out + row * head_dim);
}

// ---- decode ------------------------------------------------------------------------------------------------------

// A warp's ring, and for FP8 one converted plane (K, then V in the same place).
template <int HD, bool kFp8>
__host__ __device__ constexpr int decode_warp_bytes() {
  return decode_stages<kFp8>() * stage_bytes<HD, kFp8>(kDecodeKeys) + convert_bytes<HD, kFp8>(kDecodeKeys) / 2;
}
template <int HD, bool kFp8>
__host__ __device__ constexpr int decode_smem_bytes() {
  return kWarps * decode_warp_bytes<HD, kFp8>();
}
// The end-of-block combine reuses the rings: [kWarps, 8, HD] outputs and [kWarps, 8] (max, sum).
static_assert(kWarps * 8 * (128 + 2) * 4 <= decode_smem_bytes<64, false>(), "combine area exceeds the rings");
static_assert(kWarps * 8 * (128 + 2) * 4 <= decode_smem_bytes<64, true>(), "combine area exceeds the rings");

// The end of a decode block: its warps' partial results (max m, sum l, output o of fragment rows r < g) combined in
// shared memory (the rings are free once every warp is here) into the block's one partial per split, rows
// blockIdx.x * n_heads + h0 .. + g - 1 of part_o [., HD] and part_ml.
template <int HD>
__device__ __forceinline__ void combine_warps(uint8_t* smem, const float (&o)[HD / 8][4], float m, float l, int g,
                                              int h0, int n_heads, float* __restrict__ part_o,
                                              float2* __restrict__ part_ml) {
  constexpr int DT = HD / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, c = (lane & 3) * 2;
  __syncthreads();
  float* w_o = reinterpret_cast<float*>(smem);                      // [kWarps, 8, HD]
  float2* w_ml = reinterpret_cast<float2*>(w_o + kWarps * 8 * HD);  // [kWarps, 8]
  if (r < g) {
#pragma unroll
    for (int d = 0; d < DT; ++d)
      *reinterpret_cast<float2*>(w_o + (warp * 8 + r) * HD + 8 * d + c) = make_float2(o[d][0], o[d][1]);
    if ((lane & 3) == 0) w_ml[warp * 8 + r] = make_float2(m, l);
  }
  __syncthreads();
  for (int it = threadIdx.x; it < g * HD; it += kThreads) {
    const int h = it / HD, d = it - h * HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, w_ml[w * 8 + h].x);  // finite: warp 0 has a tile
    float ow = 0.0f, lw = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float2 ml = w_ml[w * 8 + h];
      const float f = exp2f(ml.x - mx);  // a warp without tiles: exp2(-inf) = 0
      ow = fmaf(f, w_o[(w * 8 + h) * HD + d], ow);
      lw = fmaf(f, ml.y, lw);
    }
    const int64_t row = int64_t(blockIdx.x) * n_heads + h0 + h;
    part_o[row * HD + d] = ow;
    if (d == 0) part_ml[row] = make_float2(mx, lw);
  }
}

// Grid (n_splits, n_kv_heads). Split s covers keys [s * chunk, (s + 1) * chunk) of the current length; warp w of it
// takes the 16-key tiles w, w + 4, w + 8, ... (m = -inf, l = 0, o = 0 when it has none); the block combines its
// warps and writes partial s. Splits starting past the length exit at once: the merge reads only the splits that
// exist. With rope.k_new (BF16 only: the decode step's RoPE and KV store folded in), q is read unrotated and each
// block rotates its heads' pairs as it loads them, and the warp whose tile holds the step's row stores k (rotated) and v
// into the cache and over that row of its staged tile: rope_kv_store's arithmetic (rotate_pair), so bit for bit the
// two launches.
template <int HD, bool kFp8>
__global__ __launch_bounds__(kThreads) void flash_decode_kernel(const float* __restrict__ q, KvSource kv,
                                                                const int* __restrict__ d_pos, int n_heads,
                                                                int n_kv_heads, int max_ctx, int sms, float qscale,
                                                                float* __restrict__ part_o,
                                                                float2* __restrict__ part_ml, DecodeRope rope,
                                                                int64_t stride) {
  // The token axis (grid z; kernels/ops/token_axis.h): token z's q, position and partials are `stride` bytes on
  // (the RoPE fold runs one token only: its launcher refuses both).
  q = token_ptr(q, stride, int(blockIdx.z));
  d_pos = token_ptr(d_pos, stride, int(blockIdx.z));
  part_o = token_ptr(part_o, stride, int(blockIdx.z));
  part_ml = token_ptr(part_ml, stride, int(blockIdx.z));
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int S = row_stride<HD>(), KS = HD / 16, DT = HD / 8;
  pdl_launch_dependents();  // the merge may launch now; it waits for this grid before reading
  const int len = min(*d_pos + 1, max_ctx);
  const int chunk = attention_split_rows(n_kv_heads, len, sms);
  const int start = blockIdx.x * chunk;
  if (start >= len) return;
  const int end = min(start + chunk, len);
  const int g = n_heads / n_kv_heads, kvh = blockIdx.y, h0 = kvh * g;
  const int64_t kv_dim = int64_t(n_kv_heads) * HD;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, c = (lane & 3) * 2;
  const bool rope_in = !kFp8 && rope.k_new != nullptr;
  // The step's own row (*d_pos = len - 1) lies in this split's last tile when end == len. The warp that owns that tile
  // rotates k, writes k and v (BF16) into the cache row, and writes the same values over the row in its staged tile
  // after the tile lands (the load read whatever the cache row held), so no load waits for the store.
  const int pos = len - 1;
  const bool own_row = rope_in && end == len && ((pos - start) / kDecodeKeys) % kWarps == warp;
  static_assert(HD % 64 == 0, "one or two rotary pairs per lane");
  constexpr int kPairs = HD / 64;
  uint32_t knew[kPairs], vnew[kPairs];  // the row's pairs i = lane + 32 j as BF16x2
  if (own_row) {
    const float* kn = rope.k_new + int64_t(kvh) * HD;
    const float* vn = rope.v_new + int64_t(kvh) * HD;
    uint32_t* krow = reinterpret_cast<uint32_t*>(rope.k_cache + int64_t(pos) * kv_dim + int64_t(kvh) * HD);
    uint32_t* vrow = reinterpret_cast<uint32_t*>(rope.v_cache + int64_t(pos) * kv_dim + int64_t(kvh) * HD);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int i = lane + 32 * j;
      const float2 y = rotate_pair(kn[2 * i], kn[2 * i + 1], pos, rope.inv_freq[i]);
      knew[j] = uint32_t(f32_to_bf16(y.x)) | uint32_t(f32_to_bf16(y.y)) << 16;
      vnew[j] = uint32_t(f32_to_bf16(vn[2 * i])) | uint32_t(f32_to_bf16(vn[2 * i + 1])) << 16;
      krow[i] = knew[j];
      vrow[i] = vnew[j];
    }
  }

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  constexpr int kStages = decode_stages<kFp8>();
  uint8_t* ring = smem + warp * decode_warp_bytes<HD, kFp8>();
  uint16_t* cv = reinterpret_cast<uint16_t*>(ring + kStages * stage_bytes<HD, kFp8>(kDecodeKeys));
  auto stage = [&](int it) { return ring + (it % kStages) * stage_bytes<HD, kFp8>(kDecodeKeys); };
  const int n_tiles = (end - start + kDecodeKeys - 1) / kDecodeKeys;
  const int mine = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
  auto tile_key0 = [&](int it) { return start + (warp + kWarps * it) * kDecodeKeys; };
  auto load = [&](int it) {
    load_stage<HD, kFp8, kDecodeKeys>(stage(it), kv, tile_key0(it), end, kv_dim, kvh * HD, kvh, n_kv_heads, lane, 32);
  };
#pragma unroll
  for (int it = 0; it < kStages - 1; ++it) {
    if (it < mine) load(it);
    cp_async_commit();
  }
  // Q, once the first loads are in flight. Fragment row r (< g) is head h0 + r; rows g..15 are zero (a1 = a3 = 0:
  // rows 8..15).
  uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float2 v = make_float2(0.0f, 0.0f);
      if (r < g) {
        v = *reinterpret_cast<const float2*>(q + int64_t(h0 + r) * HD + 16 * kk + c + 8 * j);
        if (rope_in) v = rotate_pair(v.x, v.y, pos, rope.inv_freq[(16 * kk + c + 8 * j) / 2]);  // a rotary pair
      }
      split<kFp8>(v.x * qscale, v.y * qscale, qh[kk][2 * j], ql[kk][2 * j]);
    }
    qh[kk][1] = qh[kk][3] = ql[kk][1] = ql[kk][3] = 0u;
  }

  for (int it = 0; it < mine; ++it) {
    if (it + kStages - 1 < mine) load(it + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    if (own_row && pos >= tile_key0(it) && pos < tile_key0(it) + kDecodeKeys) {  // the step's row, as stored above
      uint32_t* kt = reinterpret_cast<uint32_t*>(stage(it)) + (pos - tile_key0(it)) * S / 2;
      uint32_t* vt = kt + kDecodeKeys * S / 2;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) kt[lane + 32 * j] = knew[j], vt[lane + 32 * j] = vnew[j];
      __syncwarp();
    }
    const uint8_t* st = stage(it);
    const uint16_t* ks = reinterpret_cast<const uint16_t*>(st);
    const uint16_t* vs = ks + kDecodeKeys * S;
    if (kFp8) {  // K's codes into cv now, V's after the scores
      convert_rows<HD>(st, cv, kDecodeKeys, lane, 32);
      __syncwarp();
      ks = cv;
    }
    const float* sc = stage_scales<HD, kFp8>(st, kDecodeKeys);
    const int key0 = tile_key0(it);
    float s[2][4];
    scores<HD, 2, true, kFp8>(s, qh, ql, ks, lane);
    const float sk = kFp8 ? sc[0] : 1.0f, sv = kFp8 ? sc[2] : 1.0f;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) s[n][e] = key0 + 8 * n + c + e < end ? s[n][e] * sk : -INFINITY;
    // Finite: key0 < end, so every row has a valid key in the tile.
    const float m_new = fmaxf(m, quad_max(fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]))));
    const float alpha = exp2f(m - m_new);
    m = m_new;
#pragma unroll
    for (int n = 0; n < 2; ++n) s[n][0] = exp2f(s[n][0] - m_new), s[n][1] = exp2f(s[n][1] - m_new);
    l = l * alpha + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] *= alpha, o[d][1] *= alpha;
    uint32_t ph[4], pl[4];
    split<kFp8>(s[0][0], s[0][1], ph[0], pl[0]);
    split<kFp8>(s[1][0], s[1][1], ph[2], pl[2]);
    ph[1] = ph[3] = pl[1] = pl[3] = 0u;
    if (kFp8) {
      __syncwarp();  // every lane's ldmatrix of K is done
      convert_rows<HD>(st + kDecodeKeys * raw_row_bytes<HD, kFp8>(), cv, kDecodeKeys, lane, 32);
      __syncwarp();
      vs = cv;
    }
    accumulate_pv<HD, kFp8, kFp8>(o, ph, pl, vs, 0, lane, sv);
    __syncwarp();  // the whole warp is done with this stage before a later load refills it
  }
  l = quad_sum(l);
  combine_warps<HD>(smem, o, m, l, g, h0, n_heads, part_o, part_ml);
}

// Raises a kernel's dynamic shared-memory limit (above the default 48 KB); once per kernel, from its launcher.
template <typename Kernel>
bool allow_smem(Kernel kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return true;
}

// split.max_ctx > 0: the key-split form (attention_prefill_split_applies), its partials in split.scratch, then the
// merge as a programmatic dependent.
template <int HD, bool kFp8>
void launch_prefill(const float* q, const KvSource& kv, int pos0, int n_tokens, int n_heads, int n_kv_heads,
                    float qscale, float* out, cudaStream_t s, const int* d_pos0, const PrefillScratch& split) {
  constexpr int smem = prefill_smem_bytes<HD, kFp8>();
  static const bool once = allow_smem(flash_prefill_kernel<HD, kFp8>, smem);
  (void)once;
  const int tpb = kPrefillRows / (n_heads / n_kv_heads);
  PrefillSplit sp;
  unsigned splits = 1;
  if (split.max_ctx > 0) {
    sp.sms = split.sms;
    sp.part_ml = static_cast<float2*>(split.scratch);
    sp.part_o = reinterpret_cast<float*>(static_cast<char*>(split.scratch) +
                                         prefill_part_ml_bytes(n_heads, n_kv_heads, split.max_ctx, split.sms));
    splits = unsigned(attention_max_splits(n_kv_heads, split.max_ctx, split.sms));
  }
  const dim3 grid{unsigned((n_tokens + tpb - 1) / tpb), unsigned(n_kv_heads), splits};
  flash_prefill_kernel<HD, kFp8><<<grid, kThreads, smem, s>>>(q, kv, pos0, n_tokens, n_heads, n_kv_heads, qscale, out,
                                                              d_pos0, sp);
  CUDA_CHECK_LAUNCH("flash_prefill_kernel");
  if (!sp.part_o) return;
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = pdl_launch_config(unsigned(n_tokens * n_heads), 64, s, true, &attr);
  CUDA_CHECK(cudaLaunchKernelEx(&config, prefill_merge_kernel, static_cast<const float*>(sp.part_o),
                                static_cast<const float2*>(sp.part_ml), pos0, d_pos0, n_tokens, n_heads, n_kv_heads,
                                HD, split.sms, out));
  CUDA_CHECK_LAUNCH("prefill_merge_kernel");
}

template <int HD, bool kFp8>
void launch_decode(const float* q, const KvSource& kv, const int* d_pos, int n_heads, int n_kv_heads, int max_ctx,
                   int sms, float qscale, float* part_o, float2* part_ml, cudaStream_t s, const DecodeRope& rope,
                   TokenAxis tok) {
  constexpr int smem = decode_smem_bytes<HD, kFp8>();
  if (tok.many() && rope.k_new) fail("attention_decode_rope: no token axis (run rope_kv_store, then attention_decode)");
  static const bool once = allow_smem(flash_decode_kernel<HD, kFp8>, smem);
  (void)once;
  const dim3 grid{unsigned(attention_max_splits(n_kv_heads, max_ctx, sms)), unsigned(n_kv_heads), unsigned(tok.n)};
  flash_decode_kernel<HD, kFp8><<<grid, kThreads, smem, s>>>(q, kv, d_pos, n_heads, n_kv_heads, max_ctx, sms,
                                                             qscale, part_o, part_ml, rope, tok.stride);
  CUDA_CHECK_LAUNCH("flash_decode_kernel");
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

template <bool kFp8>
void prefill_for(int head_dim, const float* q, const KvSource& kv, int pos0, int n_tokens, int n_heads,
                 int n_kv_heads, float qscale, float* out, cudaStream_t s, const int* d_pos0,
                 const PrefillScratch& split) {
  if (head_dim == 64)
    launch_prefill<64, kFp8>(q, kv, pos0, n_tokens, n_heads, n_kv_heads, qscale, out, s, d_pos0, split);
  else if (head_dim == 128)
    launch_prefill<128, kFp8>(q, kv, pos0, n_tokens, n_heads, n_kv_heads, qscale, out, s, d_pos0, split);
  else
    fail("attention: head_dim ", head_dim, " has no tensor-core kernel (64 and 128 have)");
}

template <bool kFp8>
void decode_for(int head_dim, const float* q, const KvSource& kv, const int* d_pos, int n_heads, int n_kv_heads,
                int max_ctx, int sms, float qscale, float* part_o, float2* part_ml, cudaStream_t s,
                const DecodeRope& rope = DecodeRope{}, TokenAxis tok = {}) {
  static_assert(kAttnMinSplitRows % (kWarps * kDecodeKeys) == 0, "a split is whole warp tiles");
  if (head_dim == 64)
    launch_decode<64, kFp8>(q, kv, d_pos, n_heads, n_kv_heads, max_ctx, sms, qscale, part_o, part_ml, s, rope, tok);
  else if (head_dim == 128)
    launch_decode<128, kFp8>(q, kv, d_pos, n_heads, n_kv_heads, max_ctx, sms, qscale, part_o, part_ml, s, rope, tok);
  else
    fail("attention: head_dim ", head_dim, " has no tensor-core kernel (64 and 128 have)");
}

}  // namespace

bool attention_tc_supported(int head_dim, int group, const void* q, const void* k_cache, const void* v_cache,
                            const void* out) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= 8 && aligned(q, 8) && aligned(out, 8) &&
         aligned(k_cache, 16) && aligned(v_cache, 16);
}

void attention_prefill_tc(const float* q, const uint16_t* kc, const uint16_t* vc, int pos0, int n_tokens,
                          int n_heads, int n_kv_heads, int head_dim, float qscale, float* out, cudaStream_t s,
                          const int* d_pos0, const PrefillScratch& split) {
  prefill_for<false>(head_dim, q, KvSource{kc, vc, nullptr, nullptr}, pos0, n_tokens, n_heads, n_kv_heads, qscale,
                     out, s, d_pos0, split);
}

void attention_decode_tc(const float* q, const uint16_t* kc, const uint16_t* vc, const int* d_pos, int n_heads,
                         int n_kv_heads, int head_dim, int max_ctx, int sms, float qscale, float* part_o,
                         float2* part_ml, cudaStream_t s, const DecodeRope& rope, TokenAxis tok) {
  decode_for<false>(head_dim, q, KvSource{kc, vc, nullptr, nullptr}, d_pos, n_heads, n_kv_heads, max_ctx, sms,
                    qscale, part_o, part_ml, s, rope, tok);
}

void attention_prefill_tc_fp8(const float* q, const uint8_t* kc, const uint8_t* vc, const float* k_scale,
                              const float* v_scale, int pos0, int n_tokens, int n_heads, int n_kv_heads,
                              int head_dim, float qscale, float* out, cudaStream_t s, const PrefillScratch& split) {
  prefill_for<true>(head_dim, q, KvSource{kc, vc, k_scale, v_scale}, pos0, n_tokens, n_heads, n_kv_heads, qscale,
                    out, s, nullptr, split);
}

void attention_decode_tc_fp8(const float* q, const uint8_t* kc, const uint8_t* vc, const float* k_scale,
                             const float* v_scale, const int* d_pos, int n_heads, int n_kv_heads, int head_dim,
                             int max_ctx, int sms, float qscale, float* part_o, float2* part_ml, cudaStream_t s) {
  decode_for<true>(head_dim, q, KvSource{kc, vc, k_scale, v_scale}, d_pos, n_heads, n_kv_heads, max_ctx, sms,
                   qscale, part_o, part_ml, s);
}

}  // namespace llm
