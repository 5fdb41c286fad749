// The persistent decode step (kernels/persistent/persistent_decode.h says what and why).
//
// Synchronisation. Counters live in args.sync, one per 128-byte line: word 0 is the error code; then per layer
// kCounters counters (q|k|v done, attention done, o done, gate|up done, down done); then one per (kv head, pass of
// query heads) (the attention ranges finished so far; n_heads lines are reserved); then the exit counter; then the
// in-kernel greedy sample's line (its best key and non-finite flag, reset by the last block out after it emits). A
// producer block arrives with "__syncthreads; thread 0: red.release.gpu" (the barrier orders the block's writes before
// thread 0's release); a consumer's thread 0 spins with ld.acquire.gpu and the block passes a barrier. Data written
// inside the kernel is read with ld.global.cg (L2), never through the non-coherent paths. The last block to leave
// resets every counter, so each step starts from zero; the targets are fixed per step (grid blocks, or the attention
// groups).
//
// Why each wait is safe (no block overwrites what another may still read):
// - x: read whole by every block's norms (q|k|v of layer l, gate|up of layer l), written row by row (each row by the
//   one block that owns it in the o/down partition; the embedding row by the same partition at the start) in o(l) and
//   down(l). o(l) waits for attention(l), which waited for
//   every block's q|k|v(l) arrival, so every norm of q|k|v(l) is done; down(l) waits for every gate|up(l) arrival.
// - q, the KV row at pos, att, hb, the attention partials: each written by one stage and read by the next, and the
//   next writer of each comes at least one full wait later (q|k|v(l+1) waits for down(l), which came after every
//   read of layer l).
#include "kernels/persistent/persistent_decode.h"
#include "kernels/persistent/persistent_decode_smem.h"

#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ops/block_reduce.cuh"  // block_sum, warp_sum
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_device.cuh"  // dot8, load_weights_streaming (weights never change during the kernel)
#include "kernels/gemv/gemv_internal.h"  // gemv_sm_count
#include "kernels/quant/gemv_quant_device.cuh"  // quant_chunk_fma, quant_load_scale_raw, quant_packed_args: the quantized "warp" lane code
#include "kernels/ops/ops.h"  // kSampleNonFinite
#include "kernels/ops/rope_device.cuh"  // rotate_pair: the same bits as rope_kv_store

namespace llm {
namespace {

constexpr int kThreads = kPersistentThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTasks = kPersistentMaxTasks;    // GEMV partial sums kept in shared memory per round (float2 each)
constexpr int kHeadsPerPass = kPersistentHeadsPerPass;  // query heads per pass over the keys (4 spill at 128 registers)
constexpr int kMaxHeadDim = 256;
constexpr int kLine = 32;             // words per counter (one 128-byte line each)
constexpr int kOwnRows = 512;         // rows of x a block keeps in shared memory (the rows it owns, where they fit)
constexpr float kLog2e = 1.4426950408889634f;

enum Counter { kCQkv, kCAtt, kCO, kCGu, kCDown, kCounters };

// In a kernel's kForms: its quantized matrices take the int8-activation lane code of the quantized "warp-dp4a" mapping
// (x quantized per block of 32 as llama.cpp's q8_1 after each stage's staging, dp4a integer dots) instead of "warp"'s
// FP32 one.
constexpr unsigned kDp4aBit = 1u << 31;

// Error codes: kErrTimeout | layer << 8 | counter (the wait that timed out; layer kHeadWait: the head's wait).
constexpr unsigned kErrTimeout = 0x01000000u;
constexpr unsigned kHeadWait = 0xffffu;
__host__ __device__ constexpr unsigned err_code(unsigned layer, unsigned c) {
  return kErrTimeout | (layer & 0xffffu) << 8 | c;
}

__device__ __forceinline__ unsigned* counter(unsigned* sync, int layer, int c) {
  return sync + size_t(kLine) * size_t(1 + layer * kCounters + c);
}
__device__ __forceinline__ unsigned* group_counter(unsigned* sync, int n_layers, int g) {
  return sync + size_t(kLine) * size_t(1 + n_layers * kCounters + g);
}
__device__ __forceinline__ unsigned* exit_counter(unsigned* sync, int n_layers, int n_heads) {
  return sync + size_t(kLine) * size_t(1 + n_layers * kCounters + n_heads);  // after the n_heads group counters
}
// The in-kernel greedy sample's line (after the exit counter): words 0-1 the best key (u64), word 2 the non-finite flag.
__device__ __forceinline__ unsigned* argmax_line(unsigned* sync, int n_layers, int n_heads) {
  return sync + size_t(kLine) * size_t(2 + n_layers * kCounters + n_heads);
}
// The greedy sample's order as one u64 (larger wins): the value's bits made monotonic (-0 as +0, so equal values tie
// as sampling.cu's comparison does), then the complemented index (lower index wins a tie). Every finite value's key is
// non-zero, so 0 means "none".
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
  const unsigned b = __float_as_uint(v == 0.0f ? 0.0f : v);
  const unsigned ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(ord) << 32) | (0xffffffffu - static_cast<unsigned>(i));
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Written inside this kernel by other blocks (KV rows): through L2.
__device__ __forceinline__ uint4 ld_cg16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }

// Thread 0 of each block keeps the cycle accounting (PersistentPart): the running sums in shared memory. Only the
// profiling kernels (kProf) carry it: in the others it is empty and every mark compiles to nothing, so the timed
// kernel holds no registers for it (warp-r2's kernel then spills nothing at its 128-register limit).
template <bool kProf>
struct Clock {
  __device__ __forceinline__ void start(bool, unsigned long long*) {}
  __device__ __forceinline__ bool on() const { return false; }
  __device__ __forceinline__ void mark(int) {}
};
template <>
struct Clock<true> {
  bool on_ = false;
  long long t = 0;
  unsigned long long* acc = nullptr;  // [kPersistentParts], shared
  __device__ __forceinline__ void start(bool on, unsigned long long* shared_acc) {
    on_ = on;
    acc = shared_acc;
    if (!on_) return;
    for (int p = 0; p < kPersistentParts; ++p) acc[p] = 0;
    t = clock64();
  }
  __device__ __forceinline__ bool on() const { return on_; }
  __device__ __forceinline__ void mark(int part) {
    if (!on_) return;
    const long long now = clock64();
    acc[part] += static_cast<unsigned long long>(now - t);
    t = now;
  }
};

struct Shared {
  unsigned long long best[kWarps];  // the in-kernel greedy sample's block reduction
  float red[32];
  int ok;
  int flag;
};

// Thread 0 spins until *c >= target (or the timeout / another block's error); the whole block then passes a barrier.
// Returns false when the step failed (every thread of the block then leaves the kernel).
template <class Clk>
__device__ bool block_wait(const PersistentDecodeArgs& a, unsigned* c, unsigned target, unsigned code, Shared& sh,
                           Clk& clk) {
  __syncthreads();  // nobody still reads sh.ok from the previous wait
  if (threadIdx.x == 0) {
    clk.mark(kPOther);
    int good = 1;
    if (ld_acquire(c) < target) {
      const unsigned long long t0 = global_ns();
      for (unsigned spins = 1;; ++spins) {
        if (ld_acquire(c) >= target) break;
        if ((spins & 31) == 0) {
          if (*reinterpret_cast<volatile unsigned*>(a.sync) != 0) {
            good = 0;
            break;
          }
          if (global_ns() - t0 > a.timeout_ns) {
            if (atomicCAS(a.sync, 0u, code) == 0u && a.err_host) *reinterpret_cast<volatile unsigned*>(a.err_host) = code;
            good = 0;
            break;
          }
        }
      }
    }
    sh.ok = good;  // ld.acquire above: what the producers released is visible to the block after the barrier
    clk.mark(kPWait);
  }
  __syncthreads();
  return sh.ok != 0;
}

// The block's writes (ordered before thread 0's by the barrier) are released with the increment.
__device__ __forceinline__ void block_arrive(unsigned* c) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}

// --- GEMV stages ---------------------------------------------------------------------------------------------------

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

// Where x[k] sits in the staged vector: BF16 reads it in order; a quantized stage reads it as the quantized "warp"
// mapping's QuantXShared, float4 word j of chunk c at float4 index j * chunks + c (lanes on consecutive chunks read
// consecutive 16 bytes).
struct XLayout {
  int shift = 0, chunks = 0;  // weights per chunk = 1 << shift (0: in order)
  __device__ __forceinline__ int at(int k) const {
    if (shift == 0) return k;
    return ((((k & ((1 << shift) - 1)) >> 2) * chunks + (k >> shift)) << 2) + (k & 3);
  }
  __device__ __forceinline__ int src4(int j) const {  // the float4 of x (elements 4i .. 4i + 3) at float4 index j
    if (shift == 0) return j;
    const int w4 = j / chunks;  // word of the chunk
    return (j - w4 * chunks) * (1 << (shift - 2)) + w4;
  }
  __device__ __forceinline__ int dst4(int i) const {  // where float4 i of x goes: src4's inverse
    if (shift == 0) return i;
    return (i & ((1 << (shift - 2)) - 1)) * chunks + (i >> (shift - 2));
  }
};
template <unsigned kForms>
__device__ __forceinline__ XLayout x_layout(const PersistentMatrix& m, int K) {
  XLayout l;
  if (kForms != 0 && !(kForms & kDp4aBit) && m.form != kPFBf16) {  // FP32 quantized lane code: transposed
    l.shift = chunk_weights(m.form) == 32 ? 5 : 4;
    l.chunks = K >> l.shift;
  }
  return l;
}

__device__ __forceinline__ void unit_range(int units, int& u0, int& u1) {
  u0 = int(int64_t(blockIdx.x) * units / gridDim.x);
  u1 = int(int64_t(blockIdx.x + 1) * units / gridDim.x);
}

__device__ __forceinline__ void load_xs8(const float* xs, int c, float (&xv)[8]) {
  const float4 a = reinterpret_cast<const float4*>(xs)[2 * c];
  const float4 b = reinterpret_cast<const float4*>(xs)[2 * c + 1];
  xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
  xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
}

// One row's chunks [cb, ce) against xs, 8 loads in flight per lane.
__device__ __forceinline__ float row_dot(const uint4* w, const float* xs, int cb, int ce, int lane) {
  float acc = 0.0f;
  for (int c = cb + lane; c < ce; c += 32 * 8) {
    uint4 r[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (c + 32 * i < ce) r[i] = load_weights_streaming(w + c + 32 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (c + 32 * i < ce) {
        float xv[8];
        load_xs8(xs, c + 32 * i, xv);
        acc = dot8(r[i], xv, acc);
      }
  }
  return acc;
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

// The fields of m that quant_load_scale_raw reads.
__device__ __forceinline__ QuantPackedArgs scale_args(const PersistentMatrix& m) {
  QuantPackedArgs q;
  q.scales = m.scales;
  q.mins = m.mins;
  q.sub_scales = m.sub_scales;
  q.sub_mins = m.sub_mins;
  q.super_d = m.super_d;
  q.super_dmin = m.super_dmin;
  q.ld_groups = m.ld_groups;
  q.ld_sub = m.ld_sub;
  q.ld_super = m.ld_super;
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
constexpr int kQU = 2;  // chunks per row in flight per lane
template <bool kInt4, bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_pair(const PersistentMatrix& m, int ra, int rb, bool has_b, const float* xs,
                                           int chunks, int cb, int ce, int lane, float& sa, float& sb) {
  const QuantPackedArgs q = scale_args(m);
  const uint8_t* codes = static_cast<const uint8_t*>(m.data);
  const uint4* wa = reinterpret_cast<const uint4*>(codes + int64_t(ra) * m.ld);
  const uint4* wb = reinterpret_cast<const uint4*>(codes + int64_t(has_b ? rb : ra) * m.ld);
  const QuantXShared xq{reinterpret_cast<const float4*>(xs), chunks};
  float acc[2] = {0.0f, 0.0f};
  for (int c = cb + lane; c < ce; c += 32 * kQU) {
    uint4 w[kQU][2];
    uint2 raw[kQU][2];
#pragma unroll
    for (int i = 0; i < kQU; ++i) {
      const int ci = c + 32 * i;
      w[i][0] = w[i][1] = make_uint4(0u, 0u, 0u, 0u);
      raw[i][0] = raw[i][1] = make_uint2(0u, 0u);
      if (ci < ce) {
        w[i][0] = load_weights_streaming(wa + ci);
        raw[i][0] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, ra, ci);
        if (has_b) {
          w[i][1] = load_weights_streaming(wb + ci);
          raw[i][1] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, rb, ci);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kQU; ++i)
      if (c + 32 * i < ce) quant_chunk_fma<kInt4, kTwoLevel, kHasMin, 2>(w[i], raw[i], xq, c + 32 * i, m.bias, acc);
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
template <bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_ring_fill(const GemvDesc& d, const QuantPackedArgs& q, const RingTask& r,
                                                uint4 (&w)[2], uint2 (&raw)[2]) {
  w[0] = w[1] = make_uint4(0u, 0u, 0u, 0u);
  raw[0] = raw[1] = make_uint2(0u, 0u);
  if (r.c < r.ce) {
    const uint8_t* codes = static_cast<const uint8_t*>(d.m->data);
    w[0] = load_weights_streaming(reinterpret_cast<const uint4*>(codes + int64_t(r.ra) * d.m->ld) + r.c);
    raw[0] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, r.ra, r.c);
    if (r.rb < d.N) {
      w[1] = load_weights_streaming(reinterpret_cast<const uint4*>(codes + int64_t(r.rb) * d.m->ld) + r.c);
      raw[1] = quant_load_scale_raw<kTwoLevel, kHasMin>(q, r.rb, r.c);
    }
  }
}
template <bool kInt4, bool kTwoLevel, bool kHasMin>
__device__ __forceinline__ void quant_ring(const GemvDesc& d, const QuantXq8& x8, float2* part, const RingShape& sh) {
  const PersistentMatrix& m = *d.m;
  const QuantPackedArgs q = scale_args(m);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint4 w[kQuantRingSlots][2];
  uint2 raw[kQuantRingSlots][2];
  RingPos fp;  // the next item to load
#pragma unroll
  for (int u = 0; u < kQuantRingSlots; ++u) {
    w[u][0] = w[u][1] = make_uint4(0u, 0u, 0u, 0u);
    raw[u][0] = raw[u][1] = make_uint2(0u, 0u);
    if (fp.i < sh.mine) quant_ring_fill<kTwoLevel, kHasMin>(d, q, sh.at(d, fp, warp, lane), w[u], raw[u]);
    fp.next(sh.iters);
  }
  RingPos cp;  // the next item to use
  float acc[2] = {0.0f, 0.0f};
  while (cp.i < sh.mine) {  // warp-uniform
#pragma unroll
    for (int u = 0; u < kQuantRingSlots; ++u) {
      if (cp.i >= sh.mine) break;
      const RingTask r = sh.at(d, cp, warp, lane);
      if (r.c < r.ce) quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, 2>(w[u], raw[u], x8, r.c, m.code_offset, acc);
      w[u][0] = w[u][1] = make_uint4(0u, 0u, 0u, 0u);
      raw[u][0] = raw[u][1] = make_uint2(0u, 0u);
      if (fp.i < sh.mine) quant_ring_fill<kTwoLevel, kHasMin>(d, q, sh.at(d, fp, warp, lane), w[u], raw[u]);
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

// x8 = xs (K values in order, K a multiple of 32) quantized per block of 32 as the "warp-dp4a" mapping does
// (quant_x_q8_lanes: bit for bit quant_x_q8_block): 8 lanes per block, a float4 each. Ends with a block barrier.
__device__ void stage_q8(const float* xs, int K, const QuantXq8& x8) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7, nb = K >> 5;
  int8_t* q = const_cast<int8_t*>(x8.q);
  float* xd = const_cast<float*>(x8.d);
  int* s16 = const_cast<int*>(x8.s16);
  for (int base = warp * 4; base < nb; base += kWarps * 4) {  // warp-uniform
    const int b = base + (lane >> 3);
    const float4 v = b < nb ? reinterpret_cast<const float4*>(xs)[b * 8 + sub] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    quant_x_q8_lanes(v, b, b < nb, sub, q, xd, s16);
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

// xs[lay.at(k)] = src[k] for k < n (written in this kernel: read through L2; 16-byte loads, four in flight per thread
// when n is a multiple of 4, taken in the order of x so that a warp's loads are contiguous, stored where the layout
// puts them), zeros up to the 8-element chunk. Returns this thread's sum of squares of what it copied.
__device__ float load_vector(const float* src, int n, float* xs, XLayout lay) {
  float ss = 0.0f;
  if ((n & 3) == 0) {
    const int n4 = n >> 2;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(xs);
    for (int i = threadIdx.x; i < n4; i += 4 * kThreads) {
      float4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * kThreads < n4) v[j] = __ldcg(s4 + i + j * kThreads);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (i + j * kThreads < n4) {
          d4[lay.dst4(i + j * kThreads)] = v[j];
          ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    }
  } else {
    for (int k = threadIdx.x; k < n; k += kThreads) {
      const float v = __ldcg(src + k);
      xs[lay.at(k)] = v;
      ss += v * v;
    }
  }
  for (int k = n + threadIdx.x; k < ((n + 7) & ~7); k += kThreads) xs[lay.at(k)] = 0.0f;
  return ss;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The norm's weights into gs in the order of xs (gs[lay.at(k)] = w[k]), issued before the stage's wait: they never
// change, so their load hides behind the wait instead of following the norm's reduction. cp.async (16 bytes, no
// registers held) where dim % 4 == 0, else plain stores; stage_norm waits for them.
__device__ void stage_norm_weights(const float* w, int dim, float* gs, XLayout lay) {
  if ((dim & 3) == 0) {
    for (int j = threadIdx.x; j < (dim >> 2); j += kThreads) cp_async16(gs + 4 * j, w + 4 * lay.src4(j));
  } else {
    for (int k = threadIdx.x; k < dim; k += kThreads) gs[lay.at(k)] = __ldg(w + k);
  }
}

// v * inv_rms * g per element (the rmsnorm kernel's expression).
__device__ __forceinline__ float4 norm4(float4 v, float inv, const float4& g) {
  v.x = v.x * inv * g.x;
  v.y = v.y * inv * g.y;
  v.z = v.z * inv * g.z;
  v.w = v.w * inv * g.w;
  return v;
}

// xs[lay.at(k)] = src[k] * inv_rms * w[k] (the rmsnorm kernel's expression), the weights already on their way to gs
// (stage_norm_weights), zeros past dim up to the 8-element chunk. src is FP32 x or, for the first layer, the BF16
// embedding row.
__device__ void stage_norm(const float* src, const uint16_t* src_bf16, const float* gs, int dim, float eps,
                           float* xs, XLayout lay, Shared& sh, const QuantXq8* q8) {
  float ss = 0.0f;
  if (src_bf16) {
    for (int k = threadIdx.x; k < dim; k += kThreads) {
      const float v = bf16_to_f32(src_bf16[k]);
      xs[lay.at(k)] = v;
      ss += v * v;
    }
    for (int k = dim + threadIdx.x; k < ((dim + 7) & ~7); k += kThreads) xs[lay.at(k)] = 0.0f;
  } else {
    ss = load_vector(src, dim, xs, lay);
  }
  cp_async_wait_all();  // this thread's weights; block_sum's barriers publish everyone's
  ss = block_sum(ss, sh.red);
  const float inv = 1.0f / sqrtf(ss / float(dim) + eps);
  if (q8 && (dim & 31) == 0) {  // the same float4s, 8 lanes per block of 32, quantized on the way (stage_q8's work)
    float4* x4 = reinterpret_cast<float4*>(xs);
    const float4* g4 = reinterpret_cast<const float4*>(gs);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7, nb = dim >> 5;
    for (int base = warp * 4; base < nb; base += kWarps * 4) {  // warp-uniform
      const int b = base + (lane >> 3), j = b * 8 + sub;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (b < nb) x4[j] = v = norm4(x4[j], inv, g4[j]);
      quant_x_q8_lanes(v, b, b < nb, sub, const_cast<int8_t*>(q8->q), const_cast<float*>(q8->d),
                       const_cast<int*>(q8->s16));
    }
  } else if ((dim & 3) == 0) {  // float4 by float4 in the order of xs
    float4* x4 = reinterpret_cast<float4*>(xs);
    const float4* g4 = reinterpret_cast<const float4*>(gs);
    for (int j = threadIdx.x; j < (dim >> 2); j += kThreads) x4[j] = norm4(x4[j], inv, g4[j]);
  } else {
    for (int k = threadIdx.x; k < dim; k += kThreads) xs[lay.at(k)] = xs[lay.at(k)] * inv * gs[lay.at(k)];
  }
  __syncthreads();
  if (q8 && (dim & 31) != 0) stage_q8(xs, dim, *q8);  // (not reached: quantized K is a multiple of 32)
}

// xs = src (n values, written in this kernel), and with q8, x's int8 form too (stage_q8's work, on the way where n is a
// multiple of 32 and each warp takes at most two rounds of blocks: their loads are issued together).
__device__ void stage_copy(const float* src, int n, float* xs, XLayout lay, const QuantXq8* q8) {
  const int nb = n >> 5;
  if (q8 && (n & 31) == 0 && nb <= 2 * kWarps * 4 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* x4 = reinterpret_cast<float4*>(xs);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane & 7;
    const int b0 = warp * 4 + (lane >> 3), b1 = b0 + kWarps * 4;  // this lane's blocks in the two rounds
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 v0 = b0 < nb ? __ldcg(s4 + b0 * 8 + sub) : zero, v1 = b1 < nb ? __ldcg(s4 + b1 * 8 + sub) : zero;
    int8_t* q = const_cast<int8_t*>(q8->q);
    float* xd = const_cast<float*>(q8->d);
    int* s16 = const_cast<int*>(q8->s16);
    if (warp * 4 < nb) {  // warp-uniform
      if (b0 < nb) x4[b0 * 8 + sub] = v0;
      quant_x_q8_lanes(v0, b0, b0 < nb, sub, q, xd, s16);
    }
    if (warp * 4 + kWarps * 4 < nb) {
      if (b1 < nb) x4[b1 * 8 + sub] = v1;
      quant_x_q8_lanes(v1, b1, b1 < nb, sub, q, xd, s16);
    }
    __syncthreads();
    return;
  }
  load_vector(src, n, xs, lay);
  __syncthreads();
  if (q8) stage_q8(xs, n, *q8);
}

// --- attention -----------------------------------------------------------------------------------------------------

// Online-softmax state of up to kHeadsPerPass query heads over the keys a lane group has seen; each lane holds 8 of
// head_dim elements (lanes e = 0 .. head_dim / 8 - 1 of its group).
struct AttnState {
  float m[kHeadsPerPass], l[kHeadsPerPass], acc[kHeadsPerPass][8];
};

// Shared-memory layout of the attention stage: [kWarps][kHeadsPerPass] m, l, then acc [kWarps][kHeadsPerPass][hd].
__device__ __forceinline__ float* attn_m(float* sm) { return sm; }
__device__ __forceinline__ float* attn_l(float* sm) { return sm + kWarps * kHeadsPerPass; }
__device__ __forceinline__ float* attn_acc(float* sm) { return sm + 2 * kWarps * kHeadsPerPass; }

// One (kv head g, key range [k0, k1)) item for query heads h0 .. h0 + nh - 1 of the group. The block's combined
// result goes to att (normalised) when the range is the whole context, else to the partial slot `split`.
__device__ void attention_range(const PersistentDecodeArgs& a, const PersistentLayer& L, int g, int h0, int nh,
                                int k0, int k1, int split, bool direct, float* sm) {
  const int hd = a.head_dim, kv_dim = a.n_kv_heads * hd;
  const int lpk = hd >> 3, kpi = 32 / lpk;  // lanes per key, keys per warp iteration
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sg = lane / lpk, e = lane % lpk;
  const float qscale = kLog2e / sqrtf(float(hd));
  float qv[kHeadsPerPass][8];
  AttnState st;
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
  // Merge the warp's lane groups (lanes e of every group hold the same 8 elements), one head at a time.
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
  }
}

// --- the kernel ----------------------------------------------------------------------------------------------------

// Shared memory: kernels/persistent/persistent_decode_smem.h.
__host__ __device__ inline PersistentSmem smem_layout(const PersistentDecodeArgs& a) {
  return persistent_smem(a.dim, a.n_heads * a.head_dim, a.hidden, a.head_dim);
}

// kForms: 0 for BF16 weights, else the quantized forms the kernel has code for (bit f: form f; BF16 matrices always),
// with kDp4aBit for the dp4a lane code. kProf: the profiling build (args.prof read; Clock).
template <bool kPair, unsigned kForms, bool kProf>
__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(PersistentDecodeArgs a) {
  extern __shared__ __align__(16) float dyn[];
  __shared__ Shared sh;
  const int G = gridDim.x;
  const PersistentSmem mem = smem_layout(a);
  float2* part = reinterpret_cast<float2*>(dyn);  // [kMaxTasks]
  float* xs = dyn + 2 * kMaxTasks;                // the GEMV input / the attention scratch
  float* gs = xs + mem.xs_floats;                 // the next norm's weights (stage_norm_weights)
  QuantXq8 x8{};                                  // x's int8 form (stage_q8): dp4a kernels
  if constexpr ((kForms & kDp4aBit) != 0) {
    int8_t* q8 = reinterpret_cast<int8_t*>(gs + mem.gs_floats);
    x8.q = q8;
    x8.d = reinterpret_cast<const float*>(q8 + mem.x8_k);
    x8.s16 = reinterpret_cast<const int*>(q8 + mem.x8_k + mem.x8_k / 32 * 4);
  }
  __shared__ unsigned long long clk_acc[kPersistentParts];
  Clock<kProf> clk;
  clk.start(a.prof != nullptr && threadIdx.x == 0, clk_acc);
  if (a.fault == 1 && blockIdx.x == G - 1) return;  // tests: a block that never arrives
  const int pos = a.step[0], tok = a.step[1];
  const int dim = a.dim, hd = a.head_dim, q_dim = a.n_heads * hd, kv_dim = a.n_kv_heads * hd;
  const int gq = a.n_heads / a.n_kv_heads;
  const uint16_t* emb = a.embedding + int64_t(tok) * dim;
  const GemvDesc dres0{nullptr, dim, 0, (dim + 1) / 2, 2, 1};  // the o/down partition of x's rows
  // The rows of x this block owns (written only by it: the embedding, then o's and down's residuals) are also kept in
  // shared memory, so the residual epilogues read them there instead of from L2 (where they fit: kOwnRows).
  __shared__ float xown[kOwnRows];
  int own0;  // the first row this block owns; -1: its rows do not fit in xown (the epilogues read x from L2)
  {
    int u0, u1;
    unit_range(dres0.units, u0, u1);
    own0 = 2 * ((dres0.units + G - 1) / G) <= kOwnRows ? 2 * u0 : -1;
    for (int r = 2 * u0 + threadIdx.x; r < min(2 * u1, dim); r += kThreads) {
      const float v = bf16_to_f32(emb[r]);
      a.x[r] = v;
      if (own0 >= 0) xown[r - own0] = v;
    }
  }
  clk.mark(kPOther);

  auto residual = [&](int u, float ya, float yb) {  // x += W v on the rows this block owns
    const int r = 2 * u;
    if (own0 >= 0) {
      float* o = xown + (r - own0);
      a.x[r] = o[0] = o[0] + ya;
      if (r + 1 < dim) a.x[r + 1] = o[1] = o[1] + yb;
    } else {
      a.x[r] = __ldcg(a.x + r) + ya;
      if (r + 1 < dim) a.x[r + 1] = __ldcg(a.x + r + 1) + yb;
    }
  };

  for (int l = 0; l < a.n_layers; ++l) {
    const PersistentLayer& L = a.layers[l];
    // q|k|v, RoPE, KV store.
    const GemvDesc dqkv{&L.wqkv, q_dim + 2 * kv_dim, dim, (q_dim + 2 * kv_dim) / 2, 2, 1};
    const bool ok_qkv = gemv_block<kPair, kForms>(dqkv, xs, x8, part, clk, [&](const QuantXq8* q8) {
      const XLayout lay = x_layout<kForms>(L.wqkv, dim);
      stage_norm_weights(L.attn_norm, dim, gs, lay);
      if (l > 0 && !block_wait(a, counter(a.sync, l - 1, kCDown), G, err_code(l - 1, kCDown), sh, clk))
        return false;
      stage_norm(a.x, l == 0 ? emb : nullptr, gs, dim, a.norm_eps, xs, lay, sh, q8);
      clk.mark(kPNorm);
      return true;
    }, [&](int u, float ya, float yb) {
      const int r = 2 * u;
      if (r < q_dim) {
        const float2 y = rotate_pair(ya, yb, pos, a.inv_freq[(r % hd) >> 1]);
        a.q[r] = y.x;
        a.q[r + 1] = y.y;
      } else if (r < q_dim + kv_dim) {
        const int c = r - q_dim;
        const float2 y = rotate_pair(ya, yb, pos, a.inv_freq[(c % hd) >> 1]);
        L.k_cache[int64_t(pos) * kv_dim + c] = f32_to_bf16(y.x);
        L.k_cache[int64_t(pos) * kv_dim + c + 1] = f32_to_bf16(y.y);
      } else {
        const int c = r - q_dim - kv_dim;
        L.v_cache[int64_t(pos) * kv_dim + c] = f32_to_bf16(ya);
        L.v_cache[int64_t(pos) * kv_dim + c + 1] = f32_to_bf16(yb);
      }
    });
    if (!ok_qkv) return;
    clk.mark(kPQkv);
    block_arrive(counter(a.sync, l, kCQkv));

    // Attention: (kv head, pass of query heads, key range) items over the blocks.
    const GemvDesc dout{&L.wo, dim, q_dim, (dim + 1) / 2, 2, 1};
    const int passes = (gq + kHeadsPerPass - 1) / kHeadsPerPass;
    {
      const int len = pos + 1;
      const int keys_per_iter = kWarps * (32 / (hd >> 3));  // keys a block covers per iteration
      int n_split = min((len + keys_per_iter - 1) / keys_per_iter, max(1, G / (a.n_kv_heads * passes)));
      const int chunk = (len + n_split - 1) / n_split;
      n_split = (len + chunk - 1) / chunk;
      const int items = a.n_kv_heads * passes * n_split;
      if (int(blockIdx.x) < items) {
        if (!block_wait(a, counter(a.sync, l, kCQkv), G, err_code(l, kCQkv), sh, clk)) return;
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
          block_arrive(counter(a.sync, l, kCAtt));
        }
        clk.mark(kPAttention);
      }
    }

    // o + residual.
    if (!gemv_block<kPair, kForms>(dout, xs, x8, part, clk, [&](const QuantXq8* q8) {
          if (!block_wait(a, counter(a.sync, l, kCAtt), a.n_kv_heads * passes, err_code(l, kCAtt), sh, clk))
            return false;
          stage_copy(a.att, q_dim, xs, x_layout<kForms>(L.wo, q_dim), q8);
          clk.mark(kPNorm);
          return true;
        }, residual))
      return;
    clk.mark(kPO);
    block_arrive(counter(a.sync, l, kCO));

    // gate|up + SwiGLU.
    const GemvDesc dgu{&L.wgu, 2 * a.hidden, dim, a.hidden, 1, a.hidden};
    if (!gemv_block<kPair, kForms>(dgu, xs, x8, part, clk, [&](const QuantXq8* q8) {
          const XLayout lay = x_layout<kForms>(L.wgu, dim);
          stage_norm_weights(L.ffn_norm, dim, gs, lay);
          if (!block_wait(a, counter(a.sync, l, kCO), G, err_code(l, kCO), sh, clk)) return false;
          stage_norm(a.x, nullptr, gs, dim, a.norm_eps, xs, lay, sh, q8);
          clk.mark(kPNorm);
          return true;
        }, [&](int u, float g, float up) { a.hb[u] = g / (1.0f + expf(-g)) * up; }))
      return;
    clk.mark(kPGateUp);
    block_arrive(counter(a.sync, l, kCGu));

    // down + residual.
    const GemvDesc ddown{&L.wdown, dim, a.hidden, (dim + 1) / 2, 2, 1};
    if (!gemv_block<kPair, kForms>(ddown, xs, x8, part, clk, [&](const QuantXq8* q8) {
          if (!block_wait(a, counter(a.sync, l, kCGu), G, err_code(l, kCGu), sh, clk)) return false;
          stage_copy(a.hb, a.hidden, xs, x_layout<kForms>(L.wdown, a.hidden), q8);
          clk.mark(kPNorm);
          return true;
        }, residual))
      return;
    clk.mark(kPDown);
    block_arrive(counter(a.sync, l, kCDown));
  }

  // Final norm and the head.
  const GemvDesc dhead{&a.head, a.vocab, dim, (a.vocab + 1) / 2, 2, 1};
  unsigned long long best = 0;  // this thread's greedy key over the head rows it finished
  int bad = 0;                  // ... and whether one of them was NaN or Inf
  auto consider = [&](int r, float v) {
    if (r >= a.sample_vocab) return;
    bad |= !isfinite(v);
    best = max(best, argmax_key(v, r));
  };
  if (!gemv_block<kPair, kForms>(dhead, xs, x8, part, clk, [&](const QuantXq8* q8) {
        const XLayout lay = x_layout<kForms>(a.head, dim);
        stage_norm_weights(a.final_norm, dim, gs, lay);
        if (!block_wait(a, counter(a.sync, a.n_layers - 1, kCDown), G, err_code(kHeadWait, kCDown), sh, clk))
          return false;
        stage_norm(a.x, nullptr, gs, dim, a.norm_eps, xs, lay, sh, q8);
        clk.mark(kPNorm);
        return true;
      }, [&](int u, float ya, float yb) {
        const int r = 2 * u;
        a.logits[r] = ya;
        consider(r, ya);
        if (r + 1 < a.vocab) {
          a.logits[r + 1] = yb;
          consider(r + 1, yb);
        }
      }))
    return;
  unsigned* amax = argmax_line(a.sync, a.n_layers, a.n_heads);
  if (a.sample_vocab > 0) {  // the block's key and flag, then one atomic each (ordered before the exit's increment)
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    bad = __syncthreads_or(bad);
    if ((threadIdx.x & 31) == 0) sh.best[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) best = max(best, sh.best[w]);
      if (best != 0) atomicMax(reinterpret_cast<unsigned long long*>(amax), best);
      if (bad) atomicOr(amax + 2, 1u);
    }
  }
  clk.mark(kPHead);

  // The last block out resets every counter for the next step.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned out = atomicAdd(exit_counter(a.sync, a.n_layers, a.n_heads), 1u) + 1;
    sh.flag = out == unsigned(G);
  }
  __syncthreads();
  if (sh.flag) {
    const int n = a.n_layers * kCounters + a.n_heads + 1;
    for (int i = threadIdx.x; i < n; i += kThreads) a.sync[size_t(kLine) * size_t(1 + i)] = 0u;
    if (a.sample_vocab > 0 && threadIdx.x == 0) {  // every block's atomics came before its increment: emit, reset
      __threadfence();
      const unsigned long long key = atomicExch(reinterpret_cast<unsigned long long*>(amax), 0ull);
      const bool nonfinite = atomicExch(amax + 2, 0u) != 0;
      const int id = nonfinite ? kSampleNonFinite : key != 0 ? int(0xffffffffu - unsigned(key & 0xffffffffu)) : 0;
      if (a.next_step) {
        a.next_step[0] = pos + 1;
        a.next_step[1] = id >= 0 ? id : 0;  // a valid row for a step queued behind this one (the host stops the run)
      }
      if (a.argmax_out) *reinterpret_cast<volatile int*>(a.argmax_out) = id;
    }
  }
  if (clk.on()) {
    clk.mark(kPOther);
    unsigned long long* row = a.prof + size_t(blockIdx.x) * kPersistentParts;
    for (int p = 0; p < kPersistentParts; ++p) row[p] += clk_acc[p];
  }
}

// The quantized kernels: one per common set of forms (Q4_K_M and Q6_K files mix Q4_K and Q6_K), and one with all.
constexpr unsigned kAllForms = (1u << kPFQ4_0) | (1u << kPFQ4_1) | (1u << kPFQ4_K) | (1u << kPFInt8) |
                               (1u << kPFInt8Min) | (1u << kPFQ6_K);
using KernelFn = void (*)(PersistentDecodeArgs);
struct KernelPair {
  KernelFn timed, prof;  // without and with the cycle accounting (args.prof)
  KernelFn pick(const PersistentDecodeArgs& a) const { return a.prof ? prof : timed; }
};
template <bool kPair, unsigned kForms>
constexpr KernelPair kernels() {
  return {persistent_decode_kernel<kPair, kForms, false>, persistent_decode_kernel<kPair, kForms, true>};
}
struct QuantKernel {
  unsigned forms;
  KernelPair fn;
};
constexpr QuantKernel kQuantKernels[] = {
    {1u << kPFQ4_0, kernels<false, 1u << kPFQ4_0>()},
    {1u << kPFQ4_1, kernels<false, 1u << kPFQ4_1>()},
    {(1u << kPFQ4_K) | (1u << kPFQ6_K), kernels<false, (1u << kPFQ4_K) | (1u << kPFQ6_K)>()},
    {1u << kPFInt8, kernels<false, 1u << kPFInt8>()},
    {kAllForms, kernels<false, kAllForms>()},
    {kDp4aBit | 1u << kPFQ4_0, kernels<false, kDp4aBit | 1u << kPFQ4_0>()},
    {kDp4aBit | 1u << kPFQ4_1, kernels<false, kDp4aBit | 1u << kPFQ4_1>()},
    {kDp4aBit | (1u << kPFQ4_K) | (1u << kPFQ6_K),
     kernels<false, kDp4aBit | (1u << kPFQ4_K) | (1u << kPFQ6_K)>()},
    {kDp4aBit | 1u << kPFInt8, kernels<false, kDp4aBit | 1u << kPFInt8>()},
    {kDp4aBit | kAllForms, kernels<false, kDp4aBit | kAllForms>()},
};

KernelFn pick_kernel(const PersistentDecodeArgs& a) {
  if (a.quant_forms != 0) {  // quantized matrices walk two rows at once whatever pair_rows says (BF16 ones then do too)
    const unsigned want = a.quant_forms | (a.dp4a ? kDp4aBit : 0u);
    for (const QuantKernel& k : kQuantKernels)
      if ((want & ~k.forms) == 0 && (k.forms & kDp4aBit) == (want & kDp4aBit) &&
          (!a.all_forms || (k.forms & ~kDp4aBit) == kAllForms))
        return k.fn.pick(a);
    fail("persistent decode: no kernel for quantized form mask ", a.quant_forms);
  }
  return (a.pair_rows ? kernels<true, 0>() : kernels<false, 0>()).pick(a);
}

size_t smem_bytes(const PersistentDecodeArgs& a) { return size_t(smem_layout(a).bytes); }

}  // namespace

const char* persistent_part_name(int part) {
  static const char* names[kPersistentParts] = {"wait", "norm+stage", "qkv+rope", "attention", "o",
                                                "gate_up", "down", "head", "other"};
  return part >= 0 && part < kPersistentParts ? names[part] : "?";
}

PersistentMatrix persistent_matrix_bf16(const uint16_t* data, int64_t ld) {
  PersistentMatrix m;
  m.form = kPFBf16;
  m.data = data;
  m.ld = ld;
  return m;
}

PersistentMatrix persistent_matrix(const QuantGemvWeight& w) {
  using namespace quant_type_id;
  PersistentMatrix m;
  switch (w.type_id) {
    case kQ4_0: m.form = kPFQ4_0; break;
    case kQ4_1: m.form = kPFQ4_1; break;
    case kQ4_K: m.form = kPFQ4_K; break;
    case kQ8_0:
    case kQ5_0: m.form = kPFInt8; break;
    case kQ5_1: m.form = kPFInt8Min; break;
    case kQ6_K: m.form = kPFQ6_K; break;
    default: fail("persistent decode: no form for GGML type id ", w.type_id);
  }
  if (!w.codes || (w.ld_codes % 16) != 0 || w.k % 32 != 0)
    fail("persistent decode: a ", quant_type_traits(w.type_id).name, " matrix [", w.n, ", ", w.k,
         "] without prepacked codes (16-byte rows, K a multiple of 32)");
  const QuantPackedArgs q = quant_packed_args(w, QuantGemvPlan{}, nullptr, nullptr, false);
  m.data = q.codes;
  m.ld = q.ld_codes;
  m.scales = q.scales;
  m.mins = q.mins;
  m.sub_scales = q.sub_scales;
  m.sub_mins = q.sub_mins;
  m.super_d = q.super_d;
  m.super_dmin = q.super_dmin;
  m.ld_groups = q.ld_groups;
  m.ld_sub = q.ld_sub;
  m.ld_super = q.ld_super;
  m.group_shift = q.group_shift;
  m.super_shift = q.super_shift;
  m.bias = q.bias;
  m.code_offset = q.code_offset;
  return m;
}

size_t persistent_decode_sync_words(int n_layers, int n_heads) {
  return size_t(kLine) * size_t(1 + n_layers * kCounters + n_heads + 2);  // ... the exit counter, the argmax line
}
int persistent_decode_max_splits(int grid) { return grid; }
size_t persistent_decode_scratch_floats(int n_heads, int head_dim, int grid) {
  return size_t(n_heads) * size_t(persistent_decode_max_splits(grid)) * size_t(head_dim + 2);
}

PersistentPlan persistent_decode_plan(const PersistentDecodeArgs& a, int max_blocks) {
  const int lpk = a.head_dim / 8;
  if (a.head_dim % 8 != 0 || a.head_dim > kMaxHeadDim || lpk <= 0 || (lpk & (lpk - 1)) != 0)
    fail("persistent decode: head_dim ", a.head_dim, " is not 8, 16, 32, 64, 128 or 256");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    fail("persistent decode: n_heads ", a.n_heads, " is not a multiple of n_kv_heads ", a.n_kv_heads);
  PersistentPlan p;
  p.block = kThreads;
  p.smem = smem_bytes(a);
  // Both forms get the shared-memory opt-in (a later step may switch mapping); the grid fits the hungrier one.
  int per_sm = 1 << 30;
  std::vector<KernelPair> all = {kernels<true, 0>(), kernels<false, 0>()};
  for (const QuantKernel& k : kQuantKernels) all.push_back(k.fn);
  std::vector<KernelFn> fns;
  for (const KernelPair& k : all) fns.insert(fns.end(), {k.timed, k.prof});
  for (KernelFn fn : fns) {
    const void* k = reinterpret_cast<const void*>(fn);
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem)));
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, p.smem));
    per_sm = std::min(per_sm, n);
  }
  if (per_sm < 1)
    fail("persistent decode: the kernel cannot have one block of ", kThreads, " threads with ", p.smem,
         " bytes of shared memory per SM");
  const int resident = per_sm * gemv_sm_count();
  // No more blocks than the widest stage has two-row units for every warp of.
  const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
  const int widest = std::max({(q_dim + 2 * kv_dim) / 2, a.hidden, (a.vocab + 1) / 2, (a.dim + 1) / 2});
  // A full grid is rounded down to a multiple of 16 blocks. On the H200 (132 SMs) 128 blocks ran the 8B shape at
  // 228 t/s against 214 with 131 or 132, and 184-193 with 124-127; SmolLM2 and TinyLlama moved by 0-3% (unexplained:
  // see docs/results/persistent-decode.md). LLM_PERSISTENT_BLOCKS (max_blocks) overrides it.
  const int full = resident >= 32 ? resident / 16 * 16 : resident;
  p.grid = std::max(1, std::min(full, (widest + kWarps - 1) / kWarps));
  if (max_blocks > 0) p.grid = std::min(p.grid, max_blocks);
  return p;
}

void persistent_decode_launch(const PersistentDecodeArgs& a, const PersistentPlan& plan, cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(plan.grid));
  config.blockDim = dim3(unsigned(plan.block));
  config.dynamicSmemBytes = plan.smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, pick_kernel(a), a));
}

std::string persistent_decode_error_text(unsigned code) {
  if (code == 0) return "";
  if ((code & 0xff000000u) == kErrTimeout) {
    static const char* stages[kCounters] = {"q|k|v", "attention", "o", "gate|up", "down"};
    const unsigned layer = (code >> 8) & 0xffffu, c = code & 0xffu;
    const std::string what = c < unsigned(kCounters) ? stages[c] : "?";
    if (layer == kHeadWait) return "persistent decode: the head's wait for the last layer's " + what + " timed out";
    return "persistent decode: a wait for layer " + std::to_string(layer) + "'s " + what +
           " stage timed out (a block never arrived)";
  }
  return "persistent decode: unknown error code " + std::to_string(code);
}

}  // namespace llm
