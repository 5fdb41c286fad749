// The persistent decode step (kernels/persistent/persistent_decode.h says what and why): the kernel, as one walk over
// the layers with a wait between stages, and its host side (the kernel table, the plan, the launch).
//
// The stages live beside it, one concern per header (all included here: one translation unit, so the kernel inlines
// them as before):
//   persistent_sync.cuh       the counters, arrive / wait with timeout and error codes, the exit, the cycle Clock
//   persistent_norm.cuh       staging a GEMV's input in shared memory: RMSNorm, copy, x's int8 form (dp4a)
//   persistent_gemv.cuh       the GEMV stage: task units, the mappings' lane code (rings, quantized pairs), gemv_block
//   persistent_attention.cuh  split-KV attention over the blocks and the merge of the ranges
//   persistent_sample.cuh     greedy sampling in the kernel (the argmax of the head's rows)
#include "kernels/persistent/persistent_decode.h"
#include "kernels/persistent/persistent_decode_smem.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"  // gemv_sm_count
#include "kernels/ops/rope_device.cuh"  // rotate_pair: the same bits as rope_kv_store
#include "kernels/ops/swiglu.cuh"       // swiglu_value: the same bits as the graph path's SwiGLU
#include "kernels/persistent/persistent_attention.cuh"
#include "kernels/persistent/persistent_gemv.cuh"
#include "kernels/persistent/persistent_norm.cuh"
#include "kernels/persistent/persistent_sample.cuh"
#include "kernels/persistent/persistent_sync.cuh"
#include "kernels/quant/gemv_quant_device.cuh"  // quant_packed_args (persistent_matrix)

namespace llm {

static_assert(kCounters == kPersistentStageCounters, "persistent_decode_waits_per_step counts the stage counters");
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kOwnRows = 512;         // rows of x a block keeps in shared memory (the rows it owns, where they fit)

// --- the stages ----------------------------------------------------------------------------------------------------

// Shared memory: kernels/persistent/persistent_decode_smem.h.
__host__ __device__ inline PersistentSmem smem_layout(const PersistentDecodeArgs& a) {
  return persistent_smem(a.dim, a.n_heads * a.head_dim, a.hidden, a.head_dim);
}

// What the stages of one step share: the arguments, the token's position, the shapes, this block's shared memory and
// the rows of x it owns.
struct Step {
  const PersistentDecodeArgs& a;
  int pos;
  int dim, q_dim, kv_dim, gq;  // gq: query heads per kv head
  const uint16_t* emb;  // the token's embedding row, BF16 [dim]
  float2* part;         // [kMaxTasks] the GEMV's partial sums
  float* xs;            // the GEMV input / the attention scratch
  float* gs;            // the next norm's weights (stage_norm_weights)
  // x's int8 form (stage_q8): dp4a kernels. A reference to the kernel's own object: the staging takes its address,
  // and a member whose address is taken keeps all of Step in local memory (measured: 536-byte stack frames).
  const QuantXq8& x8;
  Shared& sh;
  // The rows of x this block owns (written only by it: the embedding, then o's and down's residuals) are also kept in
  // shared memory, so the residual epilogues read them there instead of from L2 (where they fit: kOwnRows).
  float* xown;  // [kOwnRows]
  int own0;     // the first row this block owns; -1: its rows do not fit in xown (the epilogues read x from L2)
};

// A stage's wait: counter c of `layer` reaching target (its error code names code_layer: the layer, or kHeadWait).
// met: a wait this block already passed (q|k|v's parts after the first): nothing to wait for (and the cluster form
// must not wait twice per phase).
struct Wait {
  int layer, c;
  unsigned target, code_layer;
  bool met = false;
};
template <class Clk>
__device__ __forceinline__ bool wait_for(const Step& s, const Wait& w, Clk& clk) {
  if (w.met) return true;
  return block_wait(s.a, counter(s.a.sync, w.layer, w.c), w.target, err_code(w.code_layer, w.c), s.sh, clk);
}

// A GEMV's staging when it reads RMSNorm(x): the norm's weights w on their way first (they never change, so their
// load hides behind the wait), the wait for x's producers, then xs = RMSNorm(x) in the order m's lane code reads it.
// `first` (the first layer's q|k|v): no wait, and the norm of the embedding row (BF16) instead of x.
template <unsigned kForms, class Clk>
__device__ __forceinline__ bool stage_rmsnorm(const Step& s, const float* w, const PersistentMatrix& m, bool first,
                                              const Wait& producers, const QuantXq8* q8, Clk& clk) {
  const XLayout lay = x_layout<kForms>(m, s.dim);
  stage_norm_weights(w, s.dim, s.gs, lay);
  if (!first && !wait_for(s, producers, clk)) return false;
  stage_norm(s.a.cluster > 0 ? mirrors(s.a).x : s.a.x, first ? s.emb : nullptr, s.gs, s.dim, s.a.norm_eps, s.xs,
             lay, s.sh, q8);
  clk.mark(kPNorm);
  return true;
}

// A GEMV's staging when it reads a vector another stage wrote (att, hb): the wait for its producers, then xs = src [n]
// in the order m's lane code reads it.
template <unsigned kForms, class Clk>
__device__ __forceinline__ bool stage_vector(const Step& s, const float* src, int n, const PersistentMatrix& m,
                                             const Wait& producers, const QuantXq8* q8, Clk& clk) {
  if (!wait_for(s, producers, clk)) return false;
  stage_copy(src, n, s.xs, x_layout<kForms>(m, n), q8);
  clk.mark(kPNorm);
  return true;
}

// The q|k|v epilogue for rows r, r + 1 (a RoPE pair of q or k, or two values of v): q rotated to a.q, k rotated and v
// into the KV cache at pos.
__device__ __forceinline__ void rope_kv_store(const Step& s, const PersistentLayer& L, int r, float ya, float yb) {
  const PersistentDecodeArgs& a = s.a;
  const int q_dim = s.q_dim, kv_dim = s.kv_dim, hd = a.head_dim, pos = s.pos;
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
}

// x += W v on the rows this block owns (unit u: rows 2u, 2u + 1), in xown too where they fit.
__device__ __forceinline__ void residual_add(const Step& s, int u, float ya, float yb) {
  const PersistentDecodeArgs& a = s.a;
  const int r = 2 * u;
  const bool two = r + 1 < s.dim;
  float v0, v1 = 0.0f;
  if (s.own0 >= 0) {
    float* o = s.xown + (r - s.own0);
    a.x[r] = v0 = o[0] = o[0] + ya;
    if (two) a.x[r + 1] = v1 = o[1] = o[1] + yb;
  } else {
    a.x[r] = v0 = __ldcg(a.x + r) + ya;
    if (two) a.x[r + 1] = v1 = __ldcg(a.x + r + 1) + yb;
  }
  if (a.cluster > 0) {  // every block's mirror of x
    float* mx = mirrors(a).x;
    mirror_put(a, mx, r, v0);
    if (two) mirror_put(a, mx, r + 1, v1);
  }
}

// Layer l's q|k|v: RMSNorm(x) after the previous layer's down stage, the q|k|v GEMV, RoPE and the KV store; part by
// part where the members differ in type (each part stages the norm in its form's order; the wait is met by then).
template <bool kPair, unsigned kForms, class Clk>
__device__ __forceinline__ bool qkv_stage(const Step& s, const PersistentLayer& L, int l, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  for (int p = 0; p < L.qkv_parts; ++p) {
    const PersistentMatrix& m = L.wqkv[p];
    const int r0 = L.qkv_row0[p], n = L.qkv_row0[p + 1] - r0;
    const GemvDesc d{&m, n, s.dim, n / 2, 2, 1};
    const bool ok = gemv_block<kPair, kForms>(d, s.xs, s.x8, s.part, clk, [&](const QuantXq8* q8) {
      const Wait down{l - 1, kCDown, gridDim.x, unsigned(l - 1), p > 0};  // met by the first part
      return stage_rmsnorm<kForms>(s, L.attn_norm, m, l == 0, down, q8, clk);
    }, [&](int u, float ya, float yb) { rope_kv_store(s, L, r0 + 2 * u, ya, yb); });
    if (!ok) return false;
    clk.mark(kPQkv);
  }
  block_arrive(a, counter(a.sync, l, kCQkv));
  return true;
}

// Layer l's o: att after every (kv head, pass) of attention, the o GEMV, x += in the epilogue.
template <bool kPair, unsigned kForms, class Clk>
__device__ __forceinline__ bool o_stage(const Step& s, const PersistentLayer& L, int l, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  const GemvDesc d{&L.wo, s.dim, s.q_dim, (s.dim + 1) / 2, 2, 1};
  const unsigned groups = a.n_kv_heads * attention_passes(s.gq);
  if (!gemv_block<kPair, kForms>(d, s.xs, s.x8, s.part, clk, [&](const QuantXq8* q8) {
        const float* att = a.cluster > 0 ? mirrors(a).att : a.att;
        return stage_vector<kForms>(s, att, s.q_dim, L.wo, Wait{l, kCAtt, groups, unsigned(l)}, q8, clk);
      }, [&](int u, float ya, float yb) { residual_add(s, u, ya, yb); }))
    return false;
  clk.mark(kPO);
  block_arrive(a, counter(a.sync, l, kCO));
  return true;
}

// Layer l's gate|up: RMSNorm(x) after every block's o, the gate|up GEMV (unit i: rows i and hidden + i), SwiGLU.
template <bool kPair, unsigned kForms, class Clk>
__device__ __forceinline__ bool gate_up_stage(const Step& s, const PersistentLayer& L, int l, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  const GemvDesc d{&L.wgu, 2 * a.hidden, s.dim, a.hidden, 1, a.hidden};
  if (!gemv_block<kPair, kForms>(d, s.xs, s.x8, s.part, clk, [&](const QuantXq8* q8) {
        return stage_rmsnorm<kForms>(s, L.ffn_norm, L.wgu, false, Wait{l, kCO, gridDim.x, unsigned(l)}, q8, clk);
      }, [&](int u, float g, float up) {
        const float h = swiglu_value(g, up);
        a.hb[u] = h;
        if (a.cluster > 0) mirror_put(a, mirrors(a).hb, u, h);
      }))
    return false;
  clk.mark(kPGateUp);
  block_arrive(a, counter(a.sync, l, kCGu));
  return true;
}

// Layer l's down: hb after every block's gate|up, the down GEMV, x += in the epilogue.
template <bool kPair, unsigned kForms, class Clk>
__device__ __forceinline__ bool down_stage(const Step& s, const PersistentLayer& L, int l, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  const GemvDesc d{&L.wdown, s.dim, a.hidden, (s.dim + 1) / 2, 2, 1};
  if (!gemv_block<kPair, kForms>(d, s.xs, s.x8, s.part, clk, [&](const QuantXq8* q8) {
        const float* hb = a.cluster > 0 ? mirrors(a).hb : a.hb;
        return stage_vector<kForms>(s, hb, a.hidden, L.wdown, Wait{l, kCGu, gridDim.x, unsigned(l)}, q8, clk);
      }, [&](int u, float ya, float yb) { residual_add(s, u, ya, yb); }))
    return false;
  clk.mark(kPDown);
  block_arrive(a, counter(a.sync, l, kCDown));
  return true;
}

// The final RMSNorm after the last layer's down stage, the head GEMV into logits, and (sample_vocab > 0) the block's
// greedy key folded into the sync area's argmax line (amax: where it is, for the exit).
template <bool kPair, unsigned kForms, class Clk>
__device__ __forceinline__ bool head_stage(const Step& s, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  const GemvDesc d{&a.head, a.vocab, s.dim, (a.vocab + 1) / 2, 2, 1};
  GreedyKey key;
  if (!gemv_block<kPair, kForms>(d, s.xs, s.x8, s.part, clk, [&](const QuantXq8* q8) {
        return stage_rmsnorm<kForms>(s, a.final_norm, a.head, false,
                                     Wait{a.n_layers - 1, kCDown, gridDim.x, kHeadWait}, q8, clk);
      }, [&](int u, float ya, float yb) {
        const int r = 2 * u;
        a.logits[r] = ya;
        key.consider(a, r, ya);
        if (r + 1 < a.vocab) {
          a.logits[r + 1] = yb;
          key.consider(a, r + 1, yb);
        }
      }))
    return false;
  if (a.sample_vocab > 0) greedy_fold_block(argmax_line(a.sync, a.n_layers, a.n_heads), key, s.sh);
  clk.mark(kPHead);
  return true;
}

// The final RMSNorm into head_x (PersistentDecodeArgs::head_x) after the last layer's down stage: every block sums
// the squares of all of x, then writes its share of the rows (x * inv_rms * g, the rmsnorm kernel's expression).
template <class Clk>
__device__ __forceinline__ bool final_norm_stage(const Step& s, Clk& clk) {
  const PersistentDecodeArgs& a = s.a;
  if (!wait_for(s, Wait{a.n_layers - 1, kCDown, gridDim.x, kHeadWait}, clk)) return false;
  const float* x = a.cluster > 0 ? mirrors(a).x : a.x;
  float ss = 0.0f;
  for (int k = threadIdx.x; k < s.dim; k += kThreads) {
    const float v = ld_stage(x + k);
    ss += v * v;
  }
  ss = block_sum(ss, s.sh.red);
  const float inv = 1.0f / sqrtf(ss / float(s.dim) + a.norm_eps);
  const int k0 = int(int64_t(blockIdx.x) * s.dim / gridDim.x), k1 = int(int64_t(blockIdx.x + 1) * s.dim / gridDim.x);
  for (int k = k0 + threadIdx.x; k < k1; k += kThreads) a.head_x[k] = ld_stage(x + k) * inv * a.final_norm[k];
  clk.mark(kPNorm);
  return true;
}

// --- L2 prefetch (PersistentDecodeArgs::prefetch) -------------------------------------------------------------------

// This block's share of [p, p + bytes) asked of L2, one 128-byte line per thread and request (a hint: nothing waits).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
  if (!p || bytes <= 0) return;
  const int64_t lines = (bytes + 127) >> 7;
  const int64_t l0 = int64_t(blockIdx.x) * lines / gridDim.x, l1 = int64_t(blockIdx.x + 1) * lines / gridDim.x;
  const char* base = static_cast<const char*>(p);
  for (int64_t i = l0 + threadIdx.x; i < l1; i += kThreads)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (i << 7)));
}
// Every plane of an N-row matrix (the pitches' units as the lane code reads them: BF16 and fp16 planes in 2-byte
// elements, the byte planes in bytes).
__device__ __forceinline__ void prefetch_matrix(const PersistentMatrix& m, int64_t n) {
  if (m.form == kPFBf16) {
    prefetch_l2(m.data, n * m.ld * 2);
    return;
  }
  prefetch_l2(m.data, n * m.ld);
  prefetch_l2(m.scales, n * m.ld_groups * 2);
  prefetch_l2(m.mins, n * m.ld_groups * 2);
  prefetch_l2(m.k_heads, n * m.ld_heads);
  prefetch_l2(m.code_hi, n * m.ld_hi);
  prefetch_l2(m.sub_scales, n * m.ld_sub);
  prefetch_l2(m.super_d, n * m.ld_super * 2);
}
// Layer l's matrices (l == n_layers: the head), this block's share.
__device__ __forceinline__ void prefetch_layer(const PersistentDecodeArgs& a, int l) {
  if (l > a.n_layers) return;
  if (l == a.n_layers) {
    prefetch_matrix(a.head, a.vocab);
    return;
  }
  const PersistentLayer& L = a.layers[l];
  for (int p = 0; p < L.qkv_parts; ++p) prefetch_matrix(L.wqkv[p], L.qkv_row0[p + 1] - L.qkv_row0[p]);
  prefetch_matrix(L.wo, a.dim);
  prefetch_matrix(L.wgu, 2 * int64_t(a.hidden));
  prefetch_matrix(L.wdown, a.dim);
}

// --- the kernel ----------------------------------------------------------------------------------------------------

// kForms: 0 for BF16 weights, else the quantized forms the kernel has code for (bit f: form f; BF16 matrices always),
// with kDp4aBit for the dp4a lane code. kProf: the profiling build (args.prof read; Clock). Every stage returns false
// when the step failed (a wait timed out, or another block's did): the block then leaves.
template <bool kPair, unsigned kForms, bool kProf>
__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(PersistentDecodeArgs a) {
  // The block's shared memory and the step's sizes, in the order the kernel always computed them (moved into a
  // function they changed the generated code: more spills in several kernels).
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
  if (a.fault == 1 && a.cluster == 0 && blockIdx.x == G - 1) return;  // tests: a block that never arrives
  const int pos = a.step[0], tok = a.step[1];
  const int dim = a.dim, hd = a.head_dim, q_dim = a.n_heads * hd, kv_dim = a.n_kv_heads * hd;
  const int gq = a.n_heads / a.n_kv_heads;
  const uint16_t* emb = a.embedding + int64_t(tok) * dim;
  const GemvDesc dres0{nullptr, dim, 0, (dim + 1) / 2, 2, 1};  // the o/down partition of x's rows
  __shared__ float xown[kOwnRows];
  int own0;  // x = the embedding row on the rows this block owns, in xown too where they fit (Step::own0)
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
  const Step s{a, pos, dim, q_dim, kv_dim, gq, emb, part, xs, gs, x8, sh, xown, own0};
  clk.mark(kPOther);

  if (a.prefetch > 0)  // the first layers' weights on their way to L2 (then one layer more at each layer's start)
    for (int l = 0; l < a.prefetch; ++l) prefetch_layer(a, l);
  for (int l = 0; l < a.n_layers; ++l) {
    const PersistentLayer& L = a.layers[l];
    if (a.prefetch > 0) prefetch_layer(a, l + a.prefetch);
    if (!qkv_stage<kPair, kForms>(s, L, l, clk)) return;                 // norm, q|k|v, RoPE, KV store
    if (!attention_stage(a, L, l, s.pos, s.gq, s.xs, sh, clk)) return;   // split-KV attention, merge
    if (!o_stage<kPair, kForms>(s, L, l, clk)) return;                   // o, x +=
    if (!gate_up_stage<kPair, kForms>(s, L, l, clk)) return;             // norm, gate|up, SwiGLU
    if (!down_stage<kPair, kForms>(s, L, l, clk)) return;                // down, x +=
  }
  if (a.head_x) {                                                        // final norm only: the head is the caller's
    if (!final_norm_stage(s, clk)) return;
  } else if (!head_stage<kPair, kForms>(s, clk)) {                       // final norm, head, greedy key
    return;
  }
  unsigned* amax = argmax_line(a.sync, a.n_layers, a.n_heads);          // the greedy sample's line

  if (last_block_out(a, sh)) {  // resets every counter for the next step, then emits the greedy sample
    reset_counters(a);
    if (a.sample_vocab > 0 && threadIdx.x == 0) greedy_emit(a, amax, s.pos);
  }
  if (clk.on()) {
    clk.mark(kPOther);
    unsigned long long* row = a.prof + size_t(blockIdx.x) * kPersistentParts;
    for (int p = 0; p < kPersistentParts; ++p) row[p] += clk_acc[p];
  }
}

// The quantized kernels: one per common set of forms (Q4_K_M and Q6_K files mix Q4_K and Q6_K), and one with all.
// Q5_K (llama.cpp's Q4_K_M keeps a 70B's attn_v in it) only in the one with all.
constexpr unsigned kAllForms = (1u << kPFQ4_0) | (1u << kPFQ4_1) | (1u << kPFQ4_K) | (1u << kPFInt8) |
                               (1u << kPFInt8Min) | (1u << kPFQ6_K) | (1u << kPFQ5_K);
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

// Every kernel build (timed and profiling, each form): the plans set their attributes on all of them (a later step
// may switch mapping).
std::vector<KernelFn> all_kernels() {
  std::vector<KernelPair> all = {kernels<true, 0>(), kernels<false, 0>()};
  for (const QuantKernel& k : kQuantKernels) all.push_back(k.fn);
  std::vector<KernelFn> fns;
  for (const KernelPair& k : all) fns.insert(fns.end(), {k.timed, k.prof});
  return fns;
}

size_t smem_bytes(const PersistentDecodeArgs& a) {
  const int64_t b = smem_layout(a).bytes;
  if (a.cluster <= 0) return size_t(b);
  return size_t(persistent_mirror_offset(b) + persistent_mirror_bytes(a.dim, a.n_heads * a.head_dim, a.hidden));
}

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
    case kQ5_K: m.form = kPFQ5_K; break;
    default: fail("persistent decode: no form for ", quant_type_traits(w.type_id).name, " (GGML type id ", w.type_id,
                  "); --decode graph runs it");
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
  m.super_d = q.super_d;
  m.k_heads = q.k_heads;
  m.code_hi = q.code_hi;
  m.ld_hi = q.ld_hi;
  m.ld_groups = q.ld_groups;
  m.ld_sub = q.ld_sub;
  m.ld_super = q.ld_super;
  m.ld_heads = q.ld_heads;
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
  for (KernelFn fn : all_kernels()) {
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
  // see docs/results/persistent-decode.md). --grid-cap (EngineTuning::persistent_max_blocks, the max_blocks
  // argument) overrides it.
  const int full = resident >= 32 ? resident / 16 * 16 : resident;
  p.grid = std::max(1, std::min(full, (widest + kWarps - 1) / kWarps));
  if (max_blocks > 0) p.grid = std::min(p.grid, max_blocks);
  return p;
}

PersistentPlan persistent_decode_cluster_plan(const PersistentDecodeArgs& a, int cluster) {
  if (cluster != 8 && cluster != 16)
    fail("persistent decode: a cluster of ", cluster, " blocks (the cluster form takes 8 or 16)");
  PersistentDecodeArgs ac = a;  // the shared memory with the mirrors (smem_bytes)
  ac.cluster = cluster;
  if (int64_t(smem_bytes(ac)) > kPersistentMaxSmemBytes)
    fail("persistent decode: a cluster block needs ", smem_bytes(ac), " bytes of shared memory with its mirrors of x, ",
         "att and hb (dim ", a.dim, ", hidden ", a.hidden, "); the most is ", kPersistentMaxSmemBytes);
  PersistentPlan p = persistent_decode_plan(ac, cluster);  // the shape checks and the shared-memory opt-in
  if (p.grid < cluster)
    fail("persistent decode: a cluster of ", cluster, " blocks, but the model's widest stage has work for ", p.grid);
  p.grid = cluster;
  p.cluster = cluster;
  for (KernelFn fn : all_kernels()) {
    const void* k = reinterpret_cast<const void*>(fn);
    if (cluster > 8) CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(cluster));
    config.blockDim = dim3(unsigned(p.block));
    config.dynamicSmemBytes = p.smem;
    config.attrs = attr;
    config.numAttrs = 1;
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, k, &config));
    if (n < 1)
      fail("persistent decode: this GPU cannot hold a cluster of ", cluster, " blocks of ", p.block,
           " threads with ", p.smem, " bytes of shared memory each (try --cluster 8)");
  }
  return p;
}

void persistent_decode_launch(const PersistentDecodeArgs& a, const PersistentPlan& plan, cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  if (plan.cluster > 0) {  // one cluster; its blocks are co-resident by construction (no cooperative launch)
    if (a.cluster != plan.cluster) fail("persistent decode: arguments for a cluster of ", a.cluster, ", plan of ",
                                        plan.cluster);
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(plan.cluster);
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  } else {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
  }
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
