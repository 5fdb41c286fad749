// The per-lane bodies of the prepacked-plane forms as plain loops (kernels/quant/gemv_quant_device.cuh): where a warp
// works, "warp"'s lane (the reference the host emulation runs and the device kernel's ring reproduces), "thread"'s
// row. __host__ __device__, as the chunk dots they call (kernels/quant/gemv_quant_decode.cuh).
#pragma once
#include "kernels/quant/gemv_quant_decode.cuh"

namespace llm {

// ---- per-lane bodies -------------------------------------------------------------------------------------------------

// Where warp `warp` of block `block` works (warp and as-stored mappings): row group rg = block * (8 / splits) +
// warp / splits (rows rg * rows_per_warp ..), K slice warp % splits = units [slice * slice_units, + slice_units)
// clipped to units.
struct QuantWarpCoords {
  int64_t row0;
  int slice, begin, end;
};
QHD QuantWarpCoords quant_warp_coords(int block, int warp, int splits, int slice_units, int units, int rows_per_warp) {
  QuantWarpCoords c;
  const int64_t rg = int64_t(block) * (kQuantWarpsPerBlock / splits) + warp / splits;
  c.row0 = rg * rows_per_warp;
  c.slice = warp % splits;
  const int begin = c.slice * slice_units;
  c.begin = begin < units ? begin : units;
  c.end = units - c.begin < slice_units ? units : c.begin + slice_units;
  return c;
}

// "warp" as a plain loop (the reference the host emulation runs; the device kernel, quant_gemv_warp_kernel below,
// keeps a ring of these loads across batches and row groups and sums each lane's chunks in this same order):
// lane `lane`'s partial sums acc[i] of rows row0 + i (i < R) over chunks [c_begin, c_end): lane l takes chunks
// c_begin + l + 32 * (U * batch + u); all R * U code loads (and their scales) of a batch are issued before the first
// is used; only weights are read before griddepcontrol.wait (device). Rows >= n and chunks past c_end load zeros.
// kDp4a ("warp-dp4a"): the same loads, the chunk through quant_chunk_dp4a (the int8 x of a.xq) instead.
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX, int R, int U, bool kDp4a = false>
QHD void quant_warp_lane(const QuantPackedArgs& a, int64_t row0, int c_begin, int c_end, int lane, float (&acc)[R]) {
  bool row_ok[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    row_ok[i] = row0 + i < a.n;
    acc[i] = 0.0f;
  }
  const int batches = (c_end - c_begin + 32 * U - 1) / (32 * U);  // warp-uniform
  bool waited = false;
  for (int b = 0; b < batches; ++b) {
    QuantCodes<kInt4, kTwoLevel, kHasMin> slot[U][R];
    uint2 raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (c < c_end && row_ok[i]) {
          slot[u][i].load(a, row0 + i, c);
          raw[u][i] = quant_load_scale_raw<kTwoLevel, kHasMin>(a, row0 + i, c);
        } else {
          slot[u][i].zero();
          raw[u][i] = make_uint2(0u, 0u);
        }
      }
    }
    if (!waited) {
      quant_pdl_wait();  // x and y belong to the predecessor: only weights were read above
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c_begin + b * 32 * U + 32 * u + lane;
      if (c < c_end) {
        uint4 wv[R];
#pragma unroll
        for (int i = 0; i < R; ++i) wv[i] = slot[u][i].codes();
        if constexpr (kDp4a)
          quant_chunk_dp4a<kInt4, kTwoLevel, kHasMin, R>(wv, raw[u], QuantXq8{a.xq, a.xd, a.xs16}, c, a.code_offset,
                                                         acc);
        else
          quant_chunk_fma<kInt4, kTwoLevel, kHasMin, R>(wv, raw[u], QuantXGlobal<kVecX, kInt4 ? 32 : 16>{a.x}, c,
                                                        a.bias, acc);
      }
    }
  }
  if (!waited) quant_pdl_wait();
}

// "thread": the whole of row `row` (< n), kQuantThreadUnroll chunks in flight.
template <bool kInt4, bool kTwoLevel, bool kHasMin, bool kVecX>
QHD float quant_thread_row(const QuantPackedArgs& a, int64_t row) {
  constexpr int U = kQuantThreadUnroll;
  float acc[1] = {0.0f};
  for (int c0 = 0; c0 < a.chunks; c0 += U) {
    QuantCodes<kInt4, kTwoLevel, kHasMin> slot[U];
    uint2 raw[U][1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u;
      if (c < a.chunks) {
        slot[u].load(a, row, c);
        raw[u][0] = quant_load_scale_raw<kTwoLevel, kHasMin>(a, row, c);
      } else {
        slot[u].zero();
        raw[u][0] = make_uint2(0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (c0 + u < a.chunks) {
        const uint4 wv[1] = {slot[u].codes()};
        quant_chunk_fma<kInt4, kTwoLevel, kHasMin, 1>(wv, raw[u], QuantXGlobal<kVecX, kInt4 ? 32 : 16>{a.x}, c0 + u,
                                                      a.bias, acc);
      }
  }
  return acc[0];
}

}  // namespace llm
