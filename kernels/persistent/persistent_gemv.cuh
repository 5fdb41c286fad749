// The persistent decode kernel's GEMV stage: a stage's rows cut into two-row task units (GemvDesc), this block's
// contiguous share of them split over K where the share is small, each task walked by a warp through the lane code of
// the graph path's mapping (BF16 "warp": one row after the other, as row_dot; "warp-r2" and the quantized kernels' BF16
// matrices: both rows at once through a ring of loads per warp; quantized "warp": quant_pair over quant_chunk_fma;
// "warp-dp4a": a ring over quant_chunk_dp4a), the slices' partial sums added in slice order in shared memory, then
// the stage's epilogue per unit. gemv_block is the whole stage; its staging (the wait, then the input vector in xs)
// and its epilogue come from the caller. Included by persistent_decode.cu only (one translation unit).
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/gemv/gemv_device.cuh"  // dot8, warp_row_dot, load_weights_streaming (weights never change during the kernel)
#include "kernels/gemv/gemv_internal.h"  // kWarpGemvUnroll
#include "kernels/ops/block_reduce.cuh"  // warp_sum
#include "kernels/persistent/persistent_norm.cuh"  // XLayout
#include "kernels/persistent/persistent_sync.cuh"  // kThreads, kWarps
#include "kernels/quant/gemv_quant_device.cuh"  // quant_chunk_fma, quant_chunk_dp4a, quant_load_scale_raw: the quantized "warp" lane code

namespace llm {
namespace {

constexpr int kMaxTasks = kPersistentMaxTasks;    // GEMV partial sums kept in shared memory per round (float2 each)

// In a kernel's kForms: its quantized matrices take the int8-activation lane code of the quantized "warp-dp4a" mapping
// (x quantized per block of 32 as llama.cpp's q8_1 after each stage's staging, dp4a integer dots) instead of "warp"'s
// FP32 one.
constexpr unsigned kDp4aBit = 1u << 31;

// Rows of a task unit: row_a = u * stride, row_b = row_a + off (row_b >= N: absent).
struct GemvDesc {
  const PersistentMatrix* m;
  int N, K;
  int units, stride, off;
};

// Weights per 16-byte chunk of a row: 8 (BF16), 32 (Int4 codes), 16 (Int8 codes).
__host__ __device__ __forceinline__ int chunk_weights(int form) {
  return form == kPFBf16 ? 8 : (form == kPFQ4_0 || form == kPFQ4_1 || form == kPFQ4_K) ? 32 : 16;
}
// Chunks per row of K weights (BF16 rows are padded to a whole chunk; quantized K is a multiple of 32).
__device__ __forceinline__ int row_chunks(int form, int K) { return (K + chunk_weights(form) - 1) / chunk_weights(form); }

// Where x sits for m's lane code (XLayout): transposed per chunk for the FP32 quantized lane code, else in order.
template <unsigned kForms>
__device__ __forceinline__ XLayout x_layout(const PersistentMatrix& m, int K) {
  XLayout l;
  if (kForms != 0 && !(kForms & kDp4aBit) && m.form != kPFBf16) {  // FP32 quantized lane code: transposed
    l.shift = chunk_weights(m.form) == 32 ? 5 : 4;
    l.chunks = K >> l.shift;
  }
  return l;
}

// This block's units [u0, u1): a contiguous, even share.
__device__ __forceinline__ void unit_range(int units, int& u0, int& u1) {
  u0 = int(int64_t(blockIdx.x) * units / gridDim.x);
  u1 = int(int64_t(blockIdx.x + 1) * units / gridDim.x);
}

// x's chunk c from xs (kept here: gemv_device.cuh's load_x8 reads x from global memory through __ldg).
__device__ __forceinline__ void load_xs8(const float* xs, int c, float (&xv)[8]) {
  const float4 a = reinterpret_cast<const float4*>(xs)[2 * c];
  const float4 b = reinterpret_cast<const float4*>(xs)[2 * c + 1];
  xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
  xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
}

// One row's chunks [cb, ce) against xs, 8 loads in flight per lane: the "warp" mapping's per-row loop, x from xs.
__device__ __forceinline__ float row_dot(const uint4* w, const float* xs, int cb, int ce, int lane) {
  return warp_row_dot<kWarpGemvUnroll>(w, cb, ce, lane, [xs](int c, float (&xv)[8]) { load_xs8(xs, c, xv); }, [] {});
}

// The batch form of "warp"'s tasks: units [v0, v0 + n) (S slices each) over the block's warps, each task on its own,
// one row after the other, its loads issued in batches of 8; part[t] = the two rows' partial sums of task t. (Not
// inlined, one copy for every stage: measured slower, SmolLM2 shape 1,366 -> 1,151 t/s, the calls' register saves.)
__device__ __forceinline__ void gemv_tasks_batch(const GemvDesc& d, const float* xs, float2* part, int v0, int n,
                                                 int S) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint16_t* W = static_cast<const uint16_t*>(d.m->data);
  const int64_t ld = d.m->ld;
  const int chunks = (d.K + 7) >> 3, per = (chunks + S - 1) / S;
  for (int t = warp; t < n * S; t += kWarps) {
    const int u = v0 + t / S, sl = t % S;
    const int ra = u * d.stride, rb = ra + d.off;
    const bool has_b = rb < d.N;
    const int cb = min(chunks, sl * per), ce = min(chunks, cb + per);
    float sa = warp_sum(row_dot(reinterpret_cast<const uint4*>(W + int64_t(ra) * ld), xs, cb, ce, lane)), sb = 0.0f;
    if (has_b) sb = warp_sum(row_dot(reinterpret_cast<const uint4*>(W + int64_t(rb) * ld), xs, cb, ce, lane));
    if (lane == 0) part[t] = make_float2(sa, sb);
  }
}

// The ring form. Task t's lane iterations are its chunks cb + 32 it + lane, it < iters = ceil(per / 32) (the same for
// every task of the stage). A warp's tasks t = warp + kWarps i, in order, form one stream of items (i, it); slot u of
// the ring holds one item's loads (both rows) and is refilled with the item kSlots further on as soon as it is used,
// across task boundaries, so a warp keeps kSlots loads per row in flight from its first item to its last (as the
// graph path's "warp" kernels keep theirs across row groups) instead of draining at the end of every batch and task.
// Each row's chunks are still added in the order of the batch form: the same bits for the same S.
struct RingPos {  // item (i, it) of a warp's stream
  int i = 0, it = 0;
  __device__ __forceinline__ void next(int iters) {
    if (++it == iters) {
      it = 0;
      ++i;
    }
  }
};
struct RingTask {
  int t, c, ce, ra, rb;
};
struct RingShape {
  int v0, n, lg_s, per, chunks, iters, mine;  // units [v0, v0 + n); mine: the warp's tasks
  __device__ __forceinline__ RingTask at(const GemvDesc& d, RingPos p, int warp, int lane) const {
    RingTask r;
    r.t = warp + p.i * kWarps;
    const int u = v0 + (r.t >> lg_s), sl = r.t & ((1 << lg_s) - 1);
    const int cb = min(chunks, sl * per);
    r.ce = min(chunks, cb + per);
    r.c = cb + 32 * p.it + lane;
    r.ra = u * d.stride;
    r.rb = r.ra + d.off;
    return r;
  }
};
__device__ __forceinline__ RingShape ring_shape(int v0, int n, int S, int chunks, int warp) {
  RingShape s;
  s.v0 = v0;
  s.n = n;
  s.lg_s = __ffs(S) - 1;  // S is a power of two
  s.per = (chunks + S - 1) / S;
  s.chunks = chunks;
  s.iters = max(1, (s.per + 31) / 32);
  s.mine = warp < n * S ? (n * S - warp + kWarps - 1) / kWarps : 0;
  return s;
}

// Items per row in flight per lane. H200, llama-ab t/s (2026-12-02), SmolLM2 shape / TinyLlama / 8B / 8B at 8K:
// 2 slots 1,394 / 945 / 213.7 / 185.3; 3 slots 1,407 / 947-954 / 223.8-225.2 / 189.2-190.1; 4 slots 1,406 / 908-917 /
// 226.5-227.1 / 182.8-184.0; 8 slots 1,284 / 806 / 209.9 / 163.7 (more in flight is not faster; not understood).
constexpr int kRingSlots = 3;

// Rows ra and rb (rb >= N: absent, left zero) of BF16 chunk c, or zeros past the slice.
__device__ __forceinline__ void ring_fill_bf16(const GemvDesc& d, const RingTask& r, uint4 (&w)[2]) {
  w[0] = w[1] = make_uint4(0u, 0u, 0u, 0u);
  if (r.c < r.ce) {
    const uint16_t* W = static_cast<const uint16_t*>(d.m->data);
    w[0] = load_weights_streaming(reinterpret_cast<const uint4*>(W + int64_t(r.ra) * d.m->ld) + r.c);
    if (r.rb < d.N) w[1] = load_weights_streaming(reinterpret_cast<const uint4*>(W + int64_t(r.rb) * d.m->ld) + r.c);
  }
}

// (Its own ring, not gemv_warp_r2.cu's: that one walks groups of consecutive rows inside its kernel, this one a task's
// rows r and r + off across K slices; the per-chunk arithmetic, dot8, is the shared one.)
// A BF16 ring's registers (slot u: one item's loads for both rows) and the next item to load.
struct Bf16Ring {
  uint4 w[kRingSlots][2];
  RingPos fp;
};
// Loads the ring's first kRingSlots items (weights only).
__device__ __forceinline__ void bf16_ring_prime(const GemvDesc& d, const RingShape& sh, Bf16Ring& g) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  g.fp = RingPos{};
#pragma unroll
  for (int u = 0; u < kRingSlots; ++u) {
    g.w[u][0] = g.w[u][1] = make_uint4(0u, 0u, 0u, 0u);
    if (g.fp.i < sh.mine) ring_fill_bf16(d, sh.at(d, g.fp, warp, lane), g.w[u]);
    g.fp.next(sh.iters);
  }
}
// The primed ring's items in order: slot u used, then refilled with the item kRingSlots further on.
__device__ __forceinline__ void bf16_ring(const GemvDesc& d, const float* xs, float2* part, const RingShape& sh,
                                          Bf16Ring& g) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  RingPos cp;  // the next item to use
  float aa = 0.0f, ab = 0.0f;
  while (cp.i < sh.mine) {  // warp-uniform
#pragma unroll
    for (int u = 0; u < kRingSlots; ++u) {
      if (cp.i >= sh.mine) break;
      const RingTask r = sh.at(d, cp, warp, lane);
      if (r.c < r.ce) {
        float xv[8];
        load_xs8(xs, r.c, xv);
        aa = dot8(g.w[u][0], xv, aa);
        ab = dot8(g.w[u][1], xv, ab);
      }
      g.w[u][0] = g.w[u][1] = make_uint4(0u, 0u, 0u, 0u);
      if (g.fp.i < sh.mine) ring_fill_bf16(d, sh.at(d, g.fp, warp, lane), g.w[u]);
      g.fp.next(sh.iters);
      if (cp.it == sh.iters - 1) {  // the task's last item: its sums
        const float sa = warp_sum(aa), sb = warp_sum(ab);
        if (lane == 0) part[r.t] = make_float2(sa, r.rb < d.N ? sb : 0.0f);
        aa = ab = 0.0f;
      }
      cp.next(sh.iters);
    }
  }
}

// The fields of m that quant_load_scale_raw and the code slots (QuantCodeSlot) read.
__device__ __forceinline__ QuantPackedArgs plane_args(const PersistentMatrix& m) {
  QuantPackedArgs q;
  q.codes = static_cast<const uint8_t*>(m.data);
  q.ld_codes = m.ld;
  q.code_hi = m.code_hi;
  q.ld_hi = m.ld_hi;
  q.scales = m.scales;
  q.mins = m.mins;
  q.sub_scales = m.sub_scales;
  q.super_d = m.super_d;
  q.k_heads = m.k_heads;
  q.ld_groups = m.ld_groups;
  q.ld_sub = m.ld_sub;
  q.ld_super = m.ld_super;
  q.ld_heads = m.ld_heads;
  q.group_shift = m.group_shift;
  q.super_shift = m.super_shift;
  return q;
}

// The quantized "warp" mapping's lane code for two rows sharing each x chunk: chunks [cb, ce) of rows ra and rb (rb
// absent: zero codes and scales, which add 0), kQU chunks per row in flight per lane, x staged as QuantXShared. (The
// ring form, as the BF16 tasks take, measured slower here: 8B Q4_0 264 -> 204 t/s; the quantized kernel's six forms
// inlined into every stage spill its registers.)
// kQU = 2, not 4: the 4-deep kernels spilled (Q4_0 240 bytes of stores); at 2 they do not, and ran faster on the H200
// (2026-12-02, llama-ab): 8B Q4_0 291.9 -> 311.8 t/s, SmolLM2 shape Q4_0 978 -> 1,079.
// (Not quant_warp_lane: that one takes R consecutive rows with x in global memory and waits for its predecessor; a
// task here pairs rows r and r + off (gate|up: i, hidden + i) with x staged in shared memory. The per-chunk code,
// quant_load_scale_raw and quant_chunk_fma, is the mapping's.)
constexpr int kQU = 2;  // chunks per row in flight per lane
template <bool kInt4, bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_pair(const PersistentMatrix& m, int ra, int rb, bool has_b, const float* xs,
                                           int chunks, int cb, int ce, int lane, float& sa, float& sb) {
  const QuantPackedArgs q = plane_args(m);
  const QuantXShared xq{reinterpret_cast<const float4*>(xs), chunks};
  float acc[2] = {0.0f, 0.0f};
  for (int c = cb + lane; c < ce; c += 32 * kQU) {
    QuantCodes<kInt4, kTwoLevel, kHasMin> w[kQU][2];
    uint2 raw[kQU][2];
#pragma unroll
    for (int i = 0; i < kQU; ++i) {
      const int ci = c + 32 * i;
      w[i][0].zero();
      w[i][1].zero();
      raw[i][0] = raw[i][1] = make_uint2(0u, 0u);
      if (ci < ce) {
        w[i][0].load(q, ra, ci);
        raw[i][0] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, ra, ci);
        if (has_b) {
          w[i][1].load(q, rb, ci);
          raw[i][1] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, rb, ci);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kQU; ++i)
      if (c + 32 * i < ce) {
        const uint4 wi[2] = {w[i][0].codes(), w[i][1].codes()};
        quant_chunk_fma<kInt4, kTwoLevel, kHasMin, 2>(wi, raw[i], xq, c + 32 * i, m.bias, acc);
      }
  }
  sa = acc[0];
  sb = acc[1];
}

template <bool kV>
using Flag = std::integral_constant<bool, kV>;
// fn(Flag<kInt4>, Flag<kTwoLevel>, Flag<kHasMin>) for matrix form f. Only the forms in kForms (bit f: form f) have
// code: a kernel for one model's forms is a fraction of the size of the kernel with all of them (the quantized lane
// code is inlined into each of the step's five GEMV stages).
template <unsigned kForms, class Fn>
__device__ __forceinline__ void with_quant_form(int f, Fn&& fn) {
  if ((kForms & (1u << kPFQ4_0)) && f == kPFQ4_0)
    fn(Flag<true>{}, Flag<false>{}, Flag<false>{});
  else if ((kForms & (1u << kPFQ4_1)) && f == kPFQ4_1)
    fn(Flag<true>{}, Flag<false>{}, Flag<true>{});
  else if ((kForms & (1u << kPFQ4_K)) && f == kPFQ4_K)
    fn(Flag<true>{}, Flag<true>{}, Flag<true>{});
  else if ((kForms & (1u << kPFInt8)) && f == kPFInt8)
    fn(Flag<false>{}, Flag<false>{}, Flag<false>{});
  else if ((kForms & (1u << kPFInt8Min)) && f == kPFInt8Min)
    fn(Flag<false>{}, Flag<false>{}, Flag<true>{});
  else if ((kForms & (1u << kPFQ6_K)) && f == kPFQ6_K)
    fn(Flag<false>{}, Flag<true>{}, Flag<false>{});
  else if ((kForms & (1u << kPFQ5_K)) && f == kPFQ5_K)
    fn(Flag<false>{}, Flag<true>{}, Flag<true>{});
  // else not reached: the host picks a kernel with every form the model has
}

// The batch form of the quantized tasks: units [v0, v0 + n) (S slices each) over the block's warps, each task its
// two rows at once; part[t] = the two rows' partial sums of task t.
template <unsigned kForms>
__device__ __forceinline__ void quant_tasks_batch(const GemvDesc& d, const float* xs, float2* part, int v0, int n,
                                                  int S) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = row_chunks(d.m->form, d.K), per = (chunks + S - 1) / S;
  for (int t = warp; t < n * S; t += kWarps) {
    const int u = v0 + t / S, sl = t % S;
    const int ra = u * d.stride, rb = ra + d.off;
    const bool has_b = rb < d.N;
    const int cb = min(chunks, sl * per), ce = min(chunks, cb + per);
    float sa = 0.0f, sb = 0.0f;
    with_quant_form<kForms>(d.m->form, [&](auto i4, auto two, auto mn) {
      quant_pair<decltype(i4)::value, decltype(two)::value, decltype(mn)::value>(*d.m, ra, rb, has_b, xs, chunks, cb,
                                                                                 ce, lane, sa, sb);
    });
    sa = warp_sum(sa);
    sb = warp_sum(sb);
    if (lane == 0) part[t] = make_float2(sa, has_b ? sb : 0.0f);
  }
}

// The dp4a lane code's tasks through a ring per warp, as bf16_ring: slot u holds one item's code chunks and scale
// words for both rows and is refilled with the item kQuantRingSlots further on as soon as it is used, across task
// boundaries. Each lane adds a row's chunks in order. H200, llama-ab --decode persistent
// (2026-12-02): 8B Q4_0 batch form 413.6-414.2 t/s, 2 slots 443.1-448.2, 3 slots 438.2 (12 bytes of spills);
// SmolLM2 shape Q4_0 1,229 / 1,263 / 1,251. (The FP32 lane code keeps the batch form: its ring spilled.)
constexpr int kQuantRingSlots = 2;
template <bool kInt4, bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_ring_fill(const GemvDesc& d, const QuantPackedArgs& q, const RingTask& r,
                                                QuantCodes<kInt4, kTwoLevel, kHasMin> (&w)[2], uint2 (&raw)[2]) {
  w[0].zero();
  w[1].zero();
  raw[0] = raw[1] = make_uint2(0u, 0u);
  if (r.c < r.ce) {
    w[0].load(q, r.ra, r.c);
    raw[0] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, r.ra, r.c);
    if (r.rb < d.N) {
      w[1].load(q, r.rb, r.c);
      raw[1] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, r.rb, r.c);
    }
  }
}
template <bool kInt4, bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_ring(const GemvDesc& d, const QuantXq8& x8, float2* part, const RingShape& sh) {
  const PersistentMatrix& m = *d.m;
  const QuantPackedArgs q = plane_args(m);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  QuantCodes<kInt4, kTwoLevel, kHasMin> w[kQuantRingSlots][2];
  uint2 raw[kQuantRingSlots][2];
  RingPos fp;  // the next item to load
#pragma unroll
  for (int u = 0; u < kQuantRingSlots; ++u) {
    w[u][0].zero();
    w[u][1].zero();
    raw[u][0] = raw[u][1] = make_uint2(0u, 0u);
    if (fp.i < sh.mine) quant_ring_fill<kInt4, kTwoLevel, kHasMin>(d, q, sh.at(d, fp, warp, lane), w[u], raw[u]);
    fp.next(sh.iters);
  }
  RingPos cp;  // the next item to use
  float acc[2] = {0.0f, 0.0f};
  while (cp.i < sh.mine) {  // warp-uniform
#pragma unroll
    for (int u = 0; u < kQuantRingSlots; ++u) {
      if (cp.i >= sh.mine) break;
      const RingTask r = sh.at(d, cp, warp, lane);
      if (r.c < r.ce) {
        const uint4 wu[2] = {w[u][0].codes(), w[u][1].codes()};
        quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, 2>(wu, raw[u], x8, r.c, m.code_offset, acc);
      }
      w[u][0].zero();
      w[u][1].zero();
      raw[u][0] = raw[u][1] = make_uint2(0u, 0u);
      if (fp.i < sh.mine) quant_ring_fill<kInt4, kTwoLevel, kHasMin>(d, q, sh.at(d, fp, warp, lane), w[u], raw[u]);
      fp.next(sh.iters);
      if (cp.it == sh.iters - 1) {  // the task's last item: its sums
        const float sa = warp_sum(acc[0]), sb = warp_sum(acc[1]);
        if (lane == 0) part[r.t] = make_float2(sa, r.rb < d.N ? sb : 0.0f);
        acc[0] = acc[1] = 0.0f;
      }
      cp.next(sh.iters);
    }
  }
}
// Two-row BF16 tasks ("warp-r2", and the quantized kernel's BF16 matrices) take the BF16 ring, quantized ones the
// dp4a ring (dp4a kernels) or their batch form (FP32 lanes), "warp"'s BF16 tasks (one row after the other) the batch
// form.
template <bool kPair, unsigned kForms>
__device__ __forceinline__ bool uses_ring(const GemvDesc& d) {
  return kPair || (kForms != 0 && (d.m->form == kPFBf16 || (kForms & kDp4aBit) != 0));
}
template <bool kPair, unsigned kForms>
__device__ __forceinline__ void gemv_tasks(const GemvDesc& d, const float* xs, const QuantXq8& x8, float2* part,
                                           const RingShape& sh, int S) {
  if constexpr ((kForms & kDp4aBit) != 0) {
    if (d.m->form != kPFBf16) {
      with_quant_form<kForms>(d.m->form, [&](auto i4, auto two, auto mn) {
        quant_ring<decltype(i4)::value, decltype(two)::value, decltype(mn)::value>(d, x8, part, sh);
      });
      return;
    }
  }
  if (uses_ring<kPair, kForms>(d)) {
    Bf16Ring g;
    bf16_ring_prime(d, sh, g);
    bf16_ring(d, xs, part, sh, g);
  } else if constexpr (kForms != 0) {
    quant_tasks_batch<kForms>(d, xs, part, sh.v0, sh.n, S);
  } else {
    gemv_tasks_batch(d, xs, part, sh.v0, sh.n, S);
  }
}

// Units [v0, v0 + n) of d against xs, S slices each: tasks over the warps, partial sums added in slice order, then
// epi(u, y_a, y_b) per unit. Ends with a block barrier.
template <bool kPair, unsigned kForms, class Epi>
__device__ void gemv_units(const GemvDesc& d, const float* xs, const QuantXq8& x8, float2* part, const RingShape& sh,
                           int S, Epi& epi) {
  gemv_tasks<kPair, kForms>(d, xs, x8, part, sh, S);
  __syncthreads();
  const int v0 = sh.v0, n = sh.n;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    float ya = 0.0f, yb = 0.0f;
    for (int s = 0; s < S; ++s) {
      const float2 p = part[i * S + s];
      ya += p.x;
      yb += p.y;
    }
    epi(v0 + i, ya, yb);
  }
  __syncthreads();
}

// The GEMV stage d: stage(q8) (the wait and filling xs; with kDp4aBit and quantized weights, x's int8 form in x8 too,
// in the same pass where it can), then this block's units: a contiguous, even share. S (K slices per unit, so that
// small stages give every warp a task) depends on the stage only, not on the block.
// (Handing the last quarter of the units out from a counter to whichever block is free was measured no faster.)
template <bool kPair, unsigned kForms, class Clk, class Stage, class Epi>
__device__ bool gemv_block(const GemvDesc& d, float* xs, const QuantXq8& x8, float2* part, Clk& clk, Stage stage,
                           Epi epi) {
  constexpr bool kQuant = kForms != 0;
  const int G = gridDim.x;
  const int chunks = kQuant ? row_chunks(d.m->form, d.K) : (d.K + 7) >> 3;
  const bool ring = uses_ring<kPair, kForms>(d);
  const int avg = (d.units + G - 1) / G;
  // S minimises a warp's cost, num / den; ties go to fewer slices.
  // - The ring: a warp's time is its stream of lane iterations (a slot each), ceil(avg S / warps) tasks of
  //   ceil(ceil(chunks / S) / 32) items. Slices keep >= 8 chunks.
  // - The batch forms: ceil(avg S / warps) tasks of 1 / S of a row. A BF16 slice keeps every lane busy (32 chunks); a
  //   quantized chunk is 4x the work of a BF16 one (32 or 16 weights decoded), so its slices may leave lanes idle to
  //   give more warps a share (8 chunks).
  const int min_chunks = ring || kQuant ? 8 : 32;
  auto num = [&](int s) {
    const int tasks = (avg * s + kWarps - 1) / kWarps;
    return ring ? tasks * ((((chunks + s - 1) / s) + 31) / 32) : tasks;
  };
  int S = 1, best_num = num(1), best_den = 1;
  for (int s = 2; s <= kWarps; s *= 2) {
    if (chunks / s < min_chunks || avg * s > kMaxTasks) break;
    const int n = num(s), den = ring ? 1 : s;
    if (n * best_den < best_num * den) {
      best_num = n;
      best_den = den;
      S = s;
    }
  }
  const int u0 = int(int64_t(blockIdx.x) * d.units / G), u1 = int(int64_t(blockIdx.x + 1) * d.units / G);
  const int round_units = kMaxTasks / S, warp = threadIdx.x >> 5;
  // With kDp4aBit and quantized weights, the staging also fills x8 (x's int8 form).
  const QuantXq8* q8 = (kForms & kDp4aBit) != 0 && d.m->form != kPFBf16 ? &x8 : nullptr;
  if (!stage(q8)) return false;  // the step failed (every thread of the block sees it)
  for (int r0 = u0; r0 < u1; r0 += round_units) {
    const RingShape sh = ring_shape(r0, min(u1 - r0, round_units), S, chunks, warp);
    gemv_units<kPair, kForms>(d, xs, x8, part, sh, S, epi);
  }
  return true;
}

}  // namespace
}  // namespace llm
