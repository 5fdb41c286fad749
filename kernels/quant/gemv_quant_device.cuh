// The quantized GEMV kernels' device side (kernels/quant/gemv_quant_*.cu, and the persistent kernel's quantized
// stages), in three rooms it includes: the per-chunk arithmetic (gemv_quant_decode.cuh), the per-lane loops of the
// prepacked forms (gemv_quant_lanes.cuh) and GGUF's blocks as stored (gemv_quant_blocks.cuh); here: the kernel that
// "warp" and "warp-dp4a" share, the host side of the kernel arguments, and the one dispatch from a GGML type id to a
// kernel template's instantiation (each form's launcher asks it; no per-file type switch).
#pragma once
#include "core/error.h"
#include "kernels/quant/gemv_quant_blocks.cuh"
#include "kernels/quant/gemv_quant_decode.cuh"
#include "kernels/quant/gemv_quant_lanes.cuh"
#if defined(__CUDACC__)
#include "kernels/attention/split_merge.cuh"  // GemvEpilogue::merge: the merge as the kernels it replaces run it
#include "kernels/ops/swiglu.cuh"             // GemvEpilogue::glu
#endif

namespace llm {

// ---- the kernels shared by two mappings --------------------------------------------------------------------------

#if defined(__CUDACC__)
// The "warp" and "warp-dp4a" kernel (kernels/quant/gemv_quant_warp.cu, gemv_quant_warp_dp4a.cu). Warp lane j (splits warps
// of one block, one K slice each) walks row groups [j * groups / lanes, (j + 1) * groups / lanes) of R rows. A ring of
// U slots per row: slot u holds, for each row of the group, the 16-byte code chunk c_begin + lane + 32 * (U * b + u)
// of batch b and its scale words; as soon as slot u of this batch is used it is refilled with slot u of the next
// batch, or of batch 0 of the next group, so R * U loads stay in flight across batches and row groups (the reduction
// of a finished group runs under the next group's loads). A lane's chunks are summed in the same order as
// quant_warp_lane's (the host emulation's reference), so a row's per-lane sums are identical. Only weights are read
// before griddepcontrol.wait; then a shuffle reduction per row and, with split-K (one group per lane), a sum of the
// slices in order through shared memory (deterministic, no atomics).
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX, bool kDp4a, bool kSmemX = false, bool kTokens = false>
__global__ void __launch_bounds__(kQuantGemvThreads, kQuantWarpMinBlocks) quant_gemv_warp_kernel(QuantPackedArgs a) {
  // kTokens, the token axis (GemvEpilogue::tokens; its own instantiation, so the decode step's is untouched):
  // gridDim.x = blocks * tokens, the token fastest, so the blocks of every token that read one slice of the weights
  // run side by side (DRAM reads it once, L2 serves the rest); token tok's x, y and epilogue pointers. Each token's
  // block `vblock` does what block vblock of a one-token launch does.
  const unsigned n_tok = kTokens ? unsigned(a.ep.tokens.n) : 1u;
  const int tok = kTokens ? int(blockIdx.x % n_tok) : 0;
  const unsigned vblock = kTokens ? blockIdx.x / n_tok : blockIdx.x;
  const unsigned vblocks = kTokens ? gridDim.x / n_tok : gridDim.x;
  const float* const x = kTokens ? token_ptr(a.x, a.ep.tokens.stride, tok) : a.x;
  float* const y = kTokens ? token_ptr(a.y, a.ep.tokens.stride, tok) : a.y;
  GemvEpilogue ep_tok;
  if constexpr (kTokens) ep_tok = gemv_epilogue_at_token(a.ep, tok);
  const GemvEpilogue& ep = kTokens ? ep_tok : a.ep;
  constexpr int R = kQuantWarpRows, U = quant_warp_unroll(quant_split_hi_bits(kInt4, kTwoLevel, kHasMin));
  __shared__ float slice_sums[kQuantWarpsPerBlock][R];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int splits = a.splits;
  const int64_t j = int64_t(vblock) * (kQuantWarpsPerBlock / splits) + warp / splits;
  const int slice = warp % splits;
  const int c_begin = min(a.chunks, slice * a.slice_units);
  const int c_end = min(a.chunks, c_begin + a.slice_units);
  const int batches = max(1, (c_end - c_begin + 32 * U - 1) / (32 * U));
  const int64_t g_begin = j < a.lanes ? j * a.groups / a.lanes : 0;
  const int64_t g_end = j < a.lanes ? (j + 1) * a.groups / a.lanes : 0;
  pdl_launch_dependents();

  QuantCodes<kInt4, kTwoLevel, kHasMin> wv[U][R];  // the code chunks as loaded (QuantCodeSlot)
  // The scale words of each slot as loaded (QuantScaleSlot: Q4_K/Q5_K keep the 16-byte head and decode it when the
  // chunk is used, so no load is waited on while the ring refills).
  QuantScaleSlot<kTwoLevel && kHasMin> raw[U][R];
  // Slot u of batch b of group g; zeros past the slice, past n and past the lane's run (no checks in the dots).
  auto fill = [&](int64_t g, int b, int u) {
    const int c = c_begin + b * 32 * U + 32 * u + lane;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t row = g * R + i;
      if (g < g_end && c < c_end && row < a.n) {
        wv[u][i].load(a, row, c);
        raw[u][i].template load<kTwoLevel, kHasMin>(a, row, c);
      } else {
        wv[u][i].zero();
        raw[u][i].zero();
      }
    }
  };
#pragma unroll
  for (int u = 0; u < U; ++u) fill(g_begin, 0, u);
  pdl_wait();  // x and y belong to the predecessor: only weights were read above

  // warp-dp4a: the block quantizes x to int8 per 32 into shared memory (quant_x_q8_block, one thread per block of 32)
  // while the ring's first loads are in flight: no separate launch, no scratch, and the dots read x from shared memory.
  extern __shared__ __align__(16) unsigned char quant_x_smem[];
  __shared__ float merge_mx[kQuantMergeMaxHeads];  // GemvEpilogue::merge: each head's max over its splits
  QuantXq8 xq{nullptr, nullptr, nullptr};
  if constexpr (kDp4a) {
    const int k = a.chunks * (kInt4 ? 32 : 16);
    int8_t* sq = reinterpret_cast<int8_t*>(quant_x_smem);
    float* sd = reinterpret_cast<float*>(quant_x_smem + quant_x_smem_offset_d(k));
    int* ss = reinterpret_cast<int*>(quant_x_smem + quant_x_smem_offset_s16(k));
    if (ep.x_q8) {  // the kernel before left x's int8 form (GemvEpilogue::x_q8): copy it, 16 bytes per load
      const int words = int(quant_x_smem_bytes(k) / 4);
      const uint4* src = static_cast<const uint4*>(ep.x_q8);
      uint4* dst = reinterpret_cast<uint4*>(quant_x_smem);
      for (int i = threadIdx.x; i < words / 4; i += kQuantGemvThreads) dst[i] = __ldcg(src + i);
      for (int i = (words / 4) * 4 + threadIdx.x; i < words; i += kQuantGemvThreads)
        reinterpret_cast<unsigned*>(quant_x_smem)[i] = __ldcg(static_cast<const unsigned*>(ep.x_q8) + i);
    } else {
      quant_x_q8_block_warps(x, k, sq, sd, ss, warp, lane);
    }
    __syncthreads();
    xq = QuantXq8{sq, sd, ss};
  }
  // "warp" with kSmemX: the block stages x in shared memory transposed to float4 [W / 4][chunks] (QuantXShared), read
  // coalesced from x once; the dots then read it conflict-free instead of 32 L1 sectors per request.
  const QuantXShared xsh{reinterpret_cast<const float4*>(quant_x_smem), a.chunks};
  if constexpr (!kDp4a && kSmemX) {
    constexpr int kWords = kInt4 ? 8 : 4;  // float4 words per chunk
    float4* sp = reinterpret_cast<float4*>(quant_x_smem);
    const int words = a.chunks * kWords;
    // x as the kernel before would have written it (GemvEpilogue's input forms; block-uniform branches).
    if (ep.glu) {  // down: SwiGLU of the [gate | up] row (swiglu_fused's expression)
      const float* gate = ep.glu;
      const float* up = ep.glu + int64_t(words) * 4;
      for (int i = threadIdx.x; i < words; i += kQuantGemvThreads) {
        const float4 g = quant_load_x4<true>(gate, int64_t(i) * 4), u = quant_load_x4<true>(up, int64_t(i) * 4);
        sp[(i % kWords) * a.chunks + i / kWords] = make_float4(swiglu_value(g.x, u.x), swiglu_value(g.y, u.y),
                                                               swiglu_value(g.z, u.z), swiglu_value(g.w, u.w));
      }
    } else if (ep.merge.part_o) {  // o: decode attention's key splits merged (attention_decode_merge_kernel's loop)
      const AttnSplitParts& m = ep.merge;
      const float2* ml = reinterpret_cast<const float2*>(m.part_ml);
      const int n_active = attention_decode_splits(*m.d_pos, m.max_ctx, m.n_kv_heads, m.sms);
      for (int h = threadIdx.x; h < m.n_heads; h += kQuantGemvThreads)
        merge_mx[h] = merge_split_max(ml, h, m.n_heads, n_active);
      __syncthreads();
      for (int i = threadIdx.x; i < words; i += kQuantGemvThreads) {
        const int e = 4 * i, h = e / m.head_dim, d = e - h * m.head_dim;  // head_dim % 4 == 0: one head per word
        float v[4];
#pragma unroll
        for (int t = 0; t < 4; ++t)
          v[t] = merge_split_value(m.part_o, ml, h, m.n_heads, n_active, m.head_dim, d + t, merge_mx[h]);
        sp[(i % kWords) * a.chunks + i / kWords] = make_float4(v[0], v[1], v[2], v[3]);
      }
    } else {
      for (int i = threadIdx.x; i < words; i += kQuantGemvThreads)
        sp[(i % kWords) * a.chunks + i / kWords] = quant_load_x4<kVecX>(x, int64_t(i) * 4);
    }
    __syncthreads();
  }

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  float ss = 0.0f;  // the RMSNorm fold's sum of squares of this thread's rows (producer)
  // A consumer of block sums (GemvEpilogue::scale_sums): s at the warp's first stored row, a converged point (the
  // group loop and the split-K branch are warp-uniform), while the next group's loads are in flight. 1 otherwise.
  float norm_scale = 1.0f;
  bool have_scale = ep.scale_sums == nullptr;
  int64_t g = g_begin;
  int b = 0;
  while (g < g_end) {
    int next_b = b + 1;
    int64_t next_g = g;
    if (next_b == batches) {
      next_b = 0;
      ++next_g;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
      if (c < c_end) {
        uint2 r[R];
        uint4 w[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
          r[i] = raw[u][i].words((c >> a.group_shift) & 7);
          w[i] = wv[u][i].codes();
        }
        if constexpr (kDp4a)
          quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, R>(w, r, xq, c, a.code_offset, acc);
        else
          if constexpr (kSmemX)
            quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(w, r, xsh, c, a.bias, acc);
          else
            quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(w, r, QuantXGlobal<kVecX, kInt4 ? 32 : 16>{x}, c,
                                                          a.bias, acc);
      }
      fill(next_g, next_b, u);
    }
    if (next_b == 0) {  // group g is complete; the next group's first batch is already in flight
      const float mine = warp_sum_rows(acc, lane);  // lane i < R keeps row g * R + i
      if (splits == 1 && !have_scale) {
        norm_scale = gemv_norm_scale_warp(ep, lane);
        have_scale = true;
      }
      const int64_t row = g * R + lane;
      if (lane < R && row < a.n) {
        if (splits == 1)
          gemv_store_row(ep, y, row, mine * norm_scale, a.accumulate, &ss);
        else
          slice_sums[warp][lane] = mine;
      }
    }
    g = next_g;
    b = next_b;
  }
  if (splits > 1) {  // block-uniform branch: every thread reaches the barrier; a split lane owns one group
    if (!have_scale) norm_scale = gemv_norm_scale_warp(ep, lane);
    __syncthreads();
    const int64_t row = g_begin * R + lane;
    if (slice == 0 && g_begin < g_end && lane < R && row < a.n) {
      float s = 0.0f;
      for (int i = 0; i < splits; ++i) s += slice_sums[warp + i][lane];
      gemv_store_row(ep, y, row, s * norm_scale, a.accumulate, &ss);
    }
  }
  gemv_epilogue_finish(ep, ss, a.n, vblock, vblocks);
}
#endif

// The code -> value bias: 2^23 (+ 128 for the XOR-biased int8 codes), minus code_offset.
inline float quant_code_bias(QuantCodeFamily family, int code_offset) {
  return -(8388608.0f + (family == QuantCodeFamily::Int8 ? 128.0f : 0.0f)) + float(code_offset);
}

// Host: the kernel arguments of w for a prepacked-plane launch.
inline QuantPackedArgs quant_packed_args(const QuantGemvWeight& w, const QuantGemvPlan& plan, const float* x, float* y,
                                         bool accumulate, const GemvEpilogue& ep = GemvEpilogue{}) {
  QuantPackedArgs a;
  static_cast<QuantPlanes&>(a) = w.planes();
  a.n = int(w.n);
  a.chunks = quant_gemv_chunks(w);
  a.group_shift = (w.family == QuantCodeFamily::Int8 && w.group == 32) ? 1 : 0;
  a.super_shift = !w.two_level ? 0 : w.groups_per_super == 8 ? 3 : 4;
  a.splits = plan.splits;
  a.slice_units = plan.slice_units;
  a.groups = plan.row_groups;
  a.lanes = plan.lanes;
  a.bias = quant_code_bias(w.family, w.code_offset);
  a.code_offset = w.code_offset;
  a.x = x;
  a.y = y;
  a.accumulate = accumulate ? 1 : 0;
  a.ep = ep;
  a.xq = nullptr;
  a.xd = nullptr;
  a.xs16 = nullptr;
  return a;
}

// ---- from a GGML type id to a kernel ----------------------------------------------------------------------------

// The prepacked forms' template parameters for a GGML type: 4-bit codes, two-level scales, an additive min (Q8_0 and
// Q5_0 share one instantiation: int8 codes, one fp16 scale per 32).
template <int kType>
struct QuantPackedForm {
  static constexpr bool kInt4 =
      kType == quant_type_id::kQ4_0 || kType == quant_type_id::kQ4_1 || kType == quant_type_id::kQ4_K;
  static constexpr bool kTwoLevel =
      kType == quant_type_id::kQ4_K || kType == quant_type_id::kQ5_K || kType == quant_type_id::kQ6_K;
  static constexpr bool kHasMin =
      kType == quant_type_id::kQ4_1 || kType == quant_type_id::kQ5_1 || kType == quant_type_id::kQ4_K ||
      kType == quant_type_id::kQ5_K;
};

// The one switch from a GGML type id to a kernel: Pick::get<kType>() for the seven types, where each form's launcher
// passes a Pick naming its kernel template's instantiation for that type (through QuantPackedForm for the prepacked
// forms). Fails naming the form for any other id.
template <typename Pick>
auto quant_kernel_for(int type_id, const char* mapping) -> decltype(Pick::template get<quant_type_id::kQ8_0>()) {
  using namespace quant_type_id;
  switch (type_id) {
    case kQ4_0: return Pick::template get<kQ4_0>();
    case kQ4_1: return Pick::template get<kQ4_1>();
    case kQ5_0: return Pick::template get<kQ5_0>();
    case kQ5_1: return Pick::template get<kQ5_1>();
    case kQ8_0: return Pick::template get<kQ8_0>();
    case kQ4_K: return Pick::template get<kQ4_K>();
    case kQ5_K: return Pick::template get<kQ5_K>();
    case kQ6_K: return Pick::template get<kQ6_K>();
  }
  fail("quantized gemv '", mapping, "': no kernel for GGML type id ", type_id);
}

}  // namespace llm
