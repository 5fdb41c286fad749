// The persistent decode kernel's attention stage: split-KV decode attention over the blocks. Blocks take (kv head,
// pass of kHeadsPerPass query heads, key range) items; a block's warps take keys (head_dim / 8 lanes per key, one
// 16-byte load each, the next key's rows loading while this one's are used), keep an online softmax per query head,
// and combine in shared memory; with one range per kv head the result is written directly, otherwise the block that
// finishes the last range of a (kv head, pass) merges the ranges' partials. BF16 KV cache only. Included by
// persistent_decode.cu only (one translation unit).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/persistent/persistent_sync.cuh"  // kThreads, kWarps, counters, block_wait/arrive, Shared

namespace llm {
namespace {

constexpr int kHeadsPerPass = kPersistentHeadsPerPass;  // query heads per pass over the keys (4 spill at 128 registers)
constexpr float kLog2e = 1.4426950408889634f;

// Written inside this kernel by other blocks (KV rows): through L2.
__device__ __forceinline__ uint4 ld_cg16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }

// Online-softmax state of up to kHeadsPerPass query heads over the keys a lane group has seen; each lane holds 8 of
// head_dim elements (lanes e = 0 .. head_dim / 8 - 1 of its group).
struct AttnState {
  float m[kHeadsPerPass], l[kHeadsPerPass], acc[kHeadsPerPass][8];
};

// Shared-memory layout of the attention stage: [kWarps][kHeadsPerPass] m, l, then acc [kWarps][kHeadsPerPass][hd].
__device__ __forceinline__ float* attn_m(float* sm) { return sm; }
__device__ __forceinline__ float* attn_l(float* sm) { return sm + kWarps * kHeadsPerPass; }
__device__ __forceinline__ float* attn_acc(float* sm) { return sm + 2 * kWarps * kHeadsPerPass; }

// The lane's 8 elements (e) of query heads h0 .. h0 + nh - 1, scaled by log2(e) / sqrt(hd), and an empty state.
__device__ __forceinline__ void attn_start(const PersistentDecodeArgs& a, int hd, int e, int h0, int nh,
                                           float (&qv)[kHeadsPerPass][8], AttnState& st) {
  const float qscale = kLog2e / sqrtf(float(hd));
#pragma unroll
  for (int h = 0; h < kHeadsPerPass; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      st.acc[h][j] = 0.0f;
      qv[h][j] = h < nh ? __ldcg(a.q + int64_t(h0 + h) * hd + e * 8 + j) * qscale : 0.0f;
    }
  }
}

// Where a lane works: head_dim / 8 lanes per key (lpk), 32 / lpk keys per warp iteration (kpi); lane group sg of the
// warp takes a key, lane e of the group its elements 8e .. 8e + 7.
struct AttnLanes {
  int hd, kv_dim, lpk, kpi, warp, lane, sg, e;
};

// Query heads h0 .. h0 + nh - 1 against keys [k0, k1) of kv head g, into st (from empty): lane group sg of the warp
// takes key t = k0 + it * step + warp * kpi + sg.
__device__ __forceinline__ void attn_keys(const PersistentDecodeArgs& a, const PersistentLayer& L, const AttnLanes& w,
                                          int g, int h0, int nh, int k0, int k1, AttnState& st) {
  const int hd = w.hd, kv_dim = w.kv_dim, lpk = hd >> 3, kpi = w.kpi, warp = w.warp, sg = w.sg, e = w.e;
  float qv[kHeadsPerPass][8];
  attn_start(a, hd, e, h0, nh, qv, st);
  const uint16_t* kbase = L.k_cache + int64_t(g) * hd + e * 8;
  const uint16_t* vbase = L.v_cache + int64_t(g) * hd + e * 8;
  const int step = kWarps * kpi;
  const int iters = (k1 - k0 + step - 1) / step;  // warp-uniform
  // The next iteration's K and V rows are loaded before this one's are used (two rows in flight per lane).
  uint4 kn = make_uint4(0, 0, 0, 0), vn = make_uint4(0, 0, 0, 0);
  {
    const int t = k0 + warp * kpi + sg;
    if (t < k1) {
      kn = ld_cg16(kbase + int64_t(t) * kv_dim);
      vn = ld_cg16(vbase + int64_t(t) * kv_dim);
    }
  }
  for (int it = 0; it < iters; ++it) {
    const int t = k0 + it * step + warp * kpi + sg;
    const bool valid = t < k1;
    const uint4 kr = kn, vr = vn;
    if (t + step < k1) {
      kn = ld_cg16(kbase + int64_t(t + step) * kv_dim);
      vn = ld_cg16(vbase + int64_t(t + step) * kv_dim);
    }
    float kf[8], vf[8];
    {
      const uint32_t kw[4] = {kr.x, kr.y, kr.z, kr.w}, vw[4] = {vr.x, vr.y, vr.z, vr.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        kf[2 * j] = __uint_as_float(kw[j] << 16);
        kf[2 * j + 1] = __uint_as_float(kw[j] & 0xffff0000u);
        vf[2 * j] = __uint_as_float(vw[j] << 16);
        vf[2 * j + 1] = __uint_as_float(vw[j] & 0xffff0000u);
      }
    }
#pragma unroll
    for (int h = 0; h < kHeadsPerPass; ++h) {
      if (h >= nh) break;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) s = fmaf(qv[h][j], kf[j], s);
      for (int o = lpk >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (valid) {
        const float mn = fmaxf(st.m[h], s);
        const float c = exp2f(st.m[h] - mn), p = exp2f(s - mn);
        st.l[h] = st.l[h] * c + p;
#pragma unroll
        for (int j = 0; j < 8; ++j) st.acc[h][j] = fmaf(p, vf[j], st.acc[h][j] * c);
        st.m[h] = mn;
      }
    }
  }
}

// Merge the warp's lane groups (lanes e of every group hold the same 8 elements), one head at a time.
__device__ __forceinline__ void attn_merge_lanes(int nh, int lpk, AttnState& st) {
#pragma unroll
  for (int h = 0; h < kHeadsPerPass; ++h) {
    if (h >= nh) break;
    for (int o = lpk; o < 32; o <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, st.m[h], o);
      const float lo = __shfl_xor_sync(0xffffffffu, st.l[h], o);
      float ao[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) ao[j] = __shfl_xor_sync(0xffffffffu, st.acc[h][j], o);
      const float M = fmaxf(st.m[h], mo);
      if (M == -INFINITY) continue;
      const float fa = exp2f(st.m[h] - M), fb = exp2f(mo - M);
      st.l[h] = st.l[h] * fa + lo * fb;
#pragma unroll
      for (int j = 0; j < 8; ++j) st.acc[h][j] = st.acc[h][j] * fa + ao[j] * fb;
      st.m[h] = M;
    }
  }
}

// Combine the block's warps (each warp's lane group 0 holds its merged state) through shared memory sm: thread (h, d)
// writes att (normalised) when `direct`, else the partial slot `split` of head h0 + h (o, then M and l).
__device__ __forceinline__ void attn_combine_warps(const PersistentDecodeArgs& a, const AttnLanes& lanes, int h0,
                                                   int nh, int split, bool direct, const AttnState& st, float* sm) {
  const int hd = lanes.hd, warp = lanes.warp, sg = lanes.sg, e = lanes.e;
  if (sg == 0) {
    for (int h = 0; h < nh; ++h) {
      if (e == 0) {
        attn_m(sm)[warp * kHeadsPerPass + h] = st.m[h];
        attn_l(sm)[warp * kHeadsPerPass + h] = st.l[h];
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) attn_acc(sm)[(warp * kHeadsPerPass + h) * hd + e * 8 + j] = st.acc[h][j];
    }
  }
  __syncthreads();
  // Combine the block's warps: thread (h, d).
  for (int i = threadIdx.x; i < nh * hd; i += kThreads) {
    const int h = i / hd, d = i - h * hd;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, attn_m(sm)[w * kHeadsPerPass + h]);
    float l = 0.0f, o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      const float mw = attn_m(sm)[w * kHeadsPerPass + h];
      if (mw == -INFINITY) continue;
      const float f = exp2f(mw - M);
      l += attn_l(sm)[w * kHeadsPerPass + h] * f;
      o += attn_acc(sm)[(w * kHeadsPerPass + h) * hd + d] * f;
    }
    const int head = h0 + h;
    if (direct) {
      a.att[int64_t(head) * hd + d] = o / l;
      if (a.cluster > 0) mirror_put(a, mirrors(a).att, int64_t(head) * hd + d, o / l);
    } else {
      float* slot = a.attn_partial + (int64_t(head) * gridDim.x + split) * (hd + 2);
      slot[d] = o;
      if (d == 0) {
        slot[hd] = M;
        slot[hd + 1] = l;
      }
    }
  }
  __syncthreads();
}

// One (kv head g, key range [k0, k1)) item for query heads h0 .. h0 + nh - 1 of the group. The block's combined
// result goes to att (normalised) when the range is the whole context, else to the partial slot `split`.
__device__ void attention_range(const PersistentDecodeArgs& a, const PersistentLayer& L, int g, int h0, int nh,
                                int k0, int k1, int split, bool direct, float* sm) {
  const int hd = a.head_dim, kv_dim = a.n_kv_heads * hd;
  const int lpk = hd >> 3, kpi = 32 / lpk;  // lanes per key, keys per warp iteration
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sg = lane / lpk, e = lane % lpk;
  const AttnLanes w{hd, kv_dim, lpk, kpi, warp, lane, sg, e};
  AttnState st;
  attn_keys(a, L, w, g, h0, nh, k0, k1, st);
  attn_merge_lanes(nh, lpk, st);
  attn_combine_warps(a, w, h0, nh, split, direct, st, sm);
}

// The block that finished the last range of query heads h0 .. h0 + nh - 1: their att from the n_split partials.
__device__ void attention_merge(const PersistentDecodeArgs& a, int h0, int nh, int n_split) {
  const int hd = a.head_dim;
  for (int i = threadIdx.x; i < nh * hd; i += kThreads) {
    const int head = h0 + i / hd, d = i % hd;
    const float* base = a.attn_partial + int64_t(head) * gridDim.x * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; ++s) M = fmaxf(M, __ldcg(base + int64_t(s) * (hd + 2) + hd));
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < n_split; ++s) {
      const float* slot = base + int64_t(s) * (hd + 2);
      const float f = exp2f(__ldcg(slot + hd) - M);
      l += __ldcg(slot + hd + 1) * f;
      o += __ldcg(slot + d) * f;
    }
    a.att[int64_t(head) * hd + d] = o / l;
    if (a.cluster > 0) mirror_put(a, mirrors(a).att, int64_t(head) * hd + d, o / l);
  }
}

// Passes of kHeadsPerPass query heads over the keys of a GQA group of gq query heads.
__device__ __forceinline__ int attention_passes(int gq) { return (gq + kHeadsPerPass - 1) / kHeadsPerPass; }

// Layer l's attention over keys [0, pos] (gq query heads per kv head): (kv head, pass of query heads, key range) items
// over the blocks, after every block's q|k|v arrival; a block arrives on the attention counter once per (kv head,
// pass) it finished (the o stage waits for n_kv_heads * passes arrivals). Blocks without an item skip the stage; xs:
// the block's scratch. False when the step failed.
template <class Clk>
__device__ __forceinline__ bool attention_stage(const PersistentDecodeArgs& a, const PersistentLayer& L, int l,
                                                int pos, int gq, float* xs, Shared& sh, Clk& clk) {
  const int G = gridDim.x, hd = a.head_dim;
  const int passes = attention_passes(gq);
  const int len = pos + 1;
  const int keys_per_iter = kWarps * (32 / (hd >> 3));  // keys a block covers per iteration
  int n_split = min((len + keys_per_iter - 1) / keys_per_iter, max(1, G / (a.n_kv_heads * passes)));
  const int chunk = (len + n_split - 1) / n_split;
  n_split = (len + chunk - 1) / chunk;
  const int items = a.n_kv_heads * passes * n_split;
  const bool cluster = a.cluster > 0;  // every block waits once and arrives once (the cluster barrier's phases)
  if (int(blockIdx.x) >= items && !cluster) return true;
  if (!block_wait(a, counter(a.sync, l, kCQkv), G, err_code(l, kCQkv), sh, clk)) return false;
  for (int item = blockIdx.x; item < items; item += G) {
    const int gp = item / n_split, s = item % n_split;  // gp = g * passes + pass
    const int g = gp / passes, h0 = g * gq + (gp % passes) * kHeadsPerPass;
    const int nh = min(kHeadsPerPass, g * gq + gq - h0);
    const int k0 = s * chunk, k1 = min(len, k0 + chunk);
    attention_range(a, L, g, h0, nh, k0, k1, s, n_split == 1, xs);
    if (n_split > 1) {  // the last block to finish a range of (g, pass) merges them
      if (threadIdx.x == 0) {
        __threadfence();
        const unsigned done = atomicAdd(group_counter(a.sync, a.n_layers, gp), 1u) + 1;
        __threadfence();
        sh.flag = done == unsigned(n_split);
      }
      __syncthreads();
      if (!sh.flag) continue;
      attention_merge(a, h0, nh, n_split);
      if (threadIdx.x == 0) atomicExch(group_counter(a.sync, a.n_layers, gp), 0u);
    }
    if (!cluster) block_arrive(a, counter(a.sync, l, kCAtt));
  }
  if (cluster) block_arrive(a, nullptr);
  clk.mark(kPAttention);
  return true;
}

}  // namespace
}  // namespace llm
