// The batch-k quantized GEMV on int8 tensor cores (kernels/quant/gemv_quant_batch.h, QuantBatchKernel::kMma): the
// same planes, the same int8 forms of the nb vectors and the same per-group arithmetic as the dp4a kernel, with each
// group's integer dots of 16 rows x 8 vectors done by one mma.sync instead of 16 x 8 x 8 dp4a. At 8 vectors the dp4a
// kernel is bound by its integer pipe (8 dp4a per 32 weights per vector); here the dots cost ~1/64 of that and the
// kernel is left with the weight stream it exists to read once.
//
// A block is 16 rows (one MMA tile of M) and 8 warps, each warp over one K slice of those rows (split-K, reduced
// through shared memory in a fixed order: deterministic). A warp walks its slice 4 code chunks (64 bytes of a row) at
// a time: lane (g = lane / 4, t = lane % 4) loads chunk c0 + t of rows g and g + 8 with one 16-byte load each (Q5_K,
// Q6_K: their nibbles and high bits, widened to int8 codes, QuantCodeSlot), and a
// 4 x 4 transpose among the 4 lanes of a quad (4 shuffles per row) leaves each lane word t of chunks c0 .. c0 + 3:
// exactly the A fragments of mma.m16n8k32 (a0 = row g, k 4t..4t+3; a1 = row g + 8; a2 / a3 = k 16 + 4t..), as
//   Int4 (Q4_0, Q4_1, Q4_K): chunk c = group c; word t's low nibbles are weights 4t..4t+3, its high nibbles weights
//     16 + 4t..: a0 = low nibbles, a2 = high nibbles; codes 0..15 as u8 against the vectors' s8 (u8.s8 MMA);
//   Int8 with groups of 32 (Q8_0, Q5_0, Q5_1, Q5_K): chunks 2G and 2G + 1 are group G: a0 = word t of 2G, a2 of 2G + 1;
//   Q6_K (groups of 16): one mma.m16n8k16 per chunk (a0 / a1 = word t of rows g / g + 8).
// B (the vectors, k x 8): b0 = vector g's int8 x at k 4t..4t+3, b1 at 16 + 4t..; C: rows g, g + 8 x vectors 2t, 2t + 1.
// Per group, row and vector: acc += (s * d_x) * float(dot + code_offset * sum q) (+ (m * d_x) * float(sum q)), the
// dp4a kernel's expression (the int dot is exact either way; only the order of the FP32 sums over groups differs).
#include "core/error.h"

#include "kernels/cuda_check.h"
#include "kernels/quant/gemv_quant.h"
#include "kernels/quant/gemv_quant_batch.h"
#include "kernels/quant/gemv_quant_device.cuh"
#include "kernels/quant/gemv_quant_internal.h"

namespace llm {
namespace {

constexpr int kWarps = 8;     // K slices per block
constexpr int kTileRows = 16;  // MMA M

// D = A (16 x 32, u8 or s8) * B (32 x 8, s8), integer, exact.
template <bool kUnsignedA>
__device__ __forceinline__ void mma_k32(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  if constexpr (kUnsignedA)
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
  else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}
// D = A (16 x 16, s8) * B (16 x 8, s8).
__device__ __forceinline__ void mma_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// Lane t of a quad holds v[0..3] = words 0..3 of chunk c0 + t; afterwards v[j] = word t of chunk c0 + j. Two rounds
// of exchanges (partners 2 apart, then 1 apart), each swapping the off-diagonal halves: 4 shuffles.
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int t) {
#pragma unroll
  for (int s = 2; s >= 1; s >>= 1) {
    const bool hi = (t & s) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i & s) continue;  // pairs (i, i + s)
      const uint32_t send = hi ? v[i] : v[i + s];
      const uint32_t recv = __shfl_xor_sync(0xffffffffu, send, s);
      if (hi)
        v[i] = recv;
      else
        v[i + s] = recv;
    }
  }
}

// The x of vector v for one group: d (per 32 values), sum of q over the group's weights. Zero past the vectors.
struct GroupX {
  float d;
  int qsum;
};

// kKind: 0 Int4, 1 Int8 with groups of 32, 2 Q6_K (Int8, groups of 16). NT: tiles of 8 vectors (nb <= 8 NT).
template <int kKind, bool kTwoLevel, bool kHasMin, int NT>
__global__ void __launch_bounds__(kWarps * 32) quant_batch_mma_kernel(QuantBatchArgs a) {
  __shared__ float red[kWarps][NT * 8][kTileRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t local0 = int64_t(blockIdx.x) * kTileRows;
  const bool ok0 = local0 + g < a.rows, ok1 = local0 + g + 8 < a.rows;
  const int64_t rg0 = a.row0 + local0 + g, rg1 = rg0 + 8;
  const int cbeg = warp * a.slice, cend = min(a.p.chunks, cbeg + a.slice);

  float acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

  // The x form of group `grp` for the vector of C column 2t + e of tile n.
  auto group_x = [&](int n, int e, int grp) {
    const int v = n * 8 + 2 * t + e;
    GroupX gx{0.0f, 0};
    if (v < a.nb) {
      const unsigned char* base = a.xq + int64_t(v) * a.x_stride;
      const int* s16 = reinterpret_cast<const int*>(base + a.off_s16);
      if (kKind == 2) {  // a group is one 16-weight chunk
        gx.d = reinterpret_cast<const float*>(base + a.off_d)[grp >> 1];
        gx.qsum = s16[grp];
      } else {
        gx.d = reinterpret_cast<const float*>(base + a.off_d)[grp];
        gx.qsum = s16[2 * grp] + s16[2 * grp + 1];
      }
    }
    return gx;
  };
  // acc += the group's contribution of rows g (d[0], d[1]) and g + 8 (d[2], d[3]) for tile n.
  auto fold = [&](int n, const int (&d)[4], int grp, const uint2& raw0, const uint2& raw1) {
    const float s0 = quant_scale<kTwoLevel>(raw0), s1 = quant_scale<kTwoLevel>(raw1);
    const float m0 = kHasMin ? quant_min<kTwoLevel>(raw0) : 0.0f, m1 = kHasMin ? quant_min<kTwoLevel>(raw1) : 0.0f;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const GroupX gx = group_x(n, e, grp);
      acc[n][e] = fmaf(s0 * gx.d, float(d[e] + a.p.code_offset * gx.qsum), acc[n][e]);
      acc[n][2 + e] = fmaf(s1 * gx.d, float(d[2 + e] + a.p.code_offset * gx.qsum), acc[n][2 + e]);
      if (kHasMin) {
        acc[n][e] = fmaf(m0 * gx.d, float(gx.qsum), acc[n][e]);
        acc[n][2 + e] = fmaf(m1 * gx.d, float(gx.qsum), acc[n][2 + e]);
      }
    }
  };
  // Vector n * 8 + g's int8 x at byte `at` of its form (0 past the vectors).
  auto xword = [&](int n, int64_t at) -> uint32_t {
    const int v = n * 8 + g;
    if (v >= a.nb) return 0u;
    return *reinterpret_cast<const uint32_t*>(a.xq + int64_t(v) * a.x_stride + at);
  };

  constexpr int U = 2;  // steps of 4 chunks whose loads are in flight together
  for (int s0 = cbeg; s0 < cend; s0 += 4 * U) {
    uint32_t w0[U][4], w1[U][4];
    QuantCodes<kKind == 0, kTwoLevel, kHasMin> q0[U], q1[U];  // the loads of all U steps first (QuantCodeSlot)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = s0 + 4 * u + t;
      q0[u].zero();
      q1[u].zero();
      if (c < cend) {
        if (ok0) q0[u].load(a.p, rg0, c);
        if (ok1) q1[u].load(a.p, rg1, c);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint4 v0 = q0[u].codes(), v1 = q1[u].codes();
      w0[u][0] = v0.x; w0[u][1] = v0.y; w0[u][2] = v0.z; w0[u][3] = v0.w;
      w1[u][0] = v1.x; w1[u][1] = v1.y; w1[u][2] = v1.z; w1[u][3] = v1.w;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c0 = s0 + 4 * u;
      if (c0 >= cend) break;  // warp-uniform
      quad_transpose(w0[u], t);
      quad_transpose(w1[u], t);
      if constexpr (kKind == 0 || kKind == 2) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = c0 + j;
          if (c >= cend) break;  // warp-uniform
          const uint2 raw0 = ok0 ? quant_load_scale_raw<kTwoLevel, kHasMin>(a.p, rg0, c) : make_uint2(0u, 0u);
          const uint2 raw1 = ok1 ? quant_load_scale_raw<kTwoLevel, kHasMin>(a.p, rg1, c) : make_uint2(0u, 0u);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            int d[4];
            if constexpr (kKind == 0) {
              const uint32_t lo0 = w0[u][j] & 0x0F0F0F0Fu, hi0 = (w0[u][j] >> 4) & 0x0F0F0F0Fu;
              const uint32_t lo1 = w1[u][j] & 0x0F0F0F0Fu, hi1 = (w1[u][j] >> 4) & 0x0F0F0F0Fu;
              mma_k32<true>(d, lo0, lo1, hi0, hi1, xword(n, 32 * int64_t(c) + 4 * t),
                            xword(n, 32 * int64_t(c) + 16 + 4 * t));
            } else {
              mma_k16(d, w0[u][j], w1[u][j], xword(n, 16 * int64_t(c) + 4 * t));
            }
            fold(n, d, c, raw0, raw1);
          }
        }
      } else {  // Int8, groups of 32: chunks (c0, c0 + 1) and (c0 + 2, c0 + 3) are two groups
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
          const int c = c0 + j;
          if (c >= cend) break;  // warp-uniform (slices and k are whole groups: c + 1 < cend too)
          const int grp = c >> 1;
          const uint2 raw0 = ok0 ? quant_load_scale_raw<kTwoLevel, kHasMin>(a.p, rg0, c) : make_uint2(0u, 0u);
          const uint2 raw1 = ok1 ? quant_load_scale_raw<kTwoLevel, kHasMin>(a.p, rg1, c) : make_uint2(0u, 0u);
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            int d[4];
            mma_k32<false>(d, w0[u][j], w1[u][j], w0[u][j + 1], w1[u][j + 1], xword(n, 16 * int64_t(c) + 4 * t),
                           xword(n, 16 * int64_t(c) + 16 + 4 * t));
            fold(n, d, grp, raw0, raw1);
          }
        }
      }
    }
  }

  // Split-K: every warp's partial sums of the 16 rows x nb vectors into shared memory, then one thread per (vector,
  // row) adds the 8 warps' in warp order.
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][n * 8 + 2 * t + (e & 1)][g + 8 * (e >> 1)] = acc[n][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < NT * 8 * kTileRows; idx += kWarps * 32) {
    const int v = idx / kTileRows, r = idx % kTileRows;
    if (v >= a.nb || local0 + r >= a.rows) continue;
    float sum = red[0][v][r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += red[w][v][r];
    float* yp = quant_batch_out(a, v, local0 + r);
    *yp = a.accumulate ? *yp + sum : sum;
  }
}

using Kernel = void (*)(QuantBatchArgs);
template <int NT>
struct Pick {
  template <int kType>
  static Kernel get() {
    using F = QuantPackedForm<kType>;
    constexpr int kind = F::kInt4 ? 0 : kType == quant_type_id::kQ6_K ? 2 : 1;
    return quant_batch_mma_kernel<kind, F::kTwoLevel, F::kHasMin, NT>;
  }
};

}  // namespace

// Called by batch_launch (gemv_quant_batch.cu) after its checks, for at most kQuantBatchMmaMax vectors: the slices
// are whole steps of 4 chunks, one per warp.
void quant_batch_mma_launch(int type_id, QuantBatchArgs a, cudaStream_t stream) {
  const int nb = a.nb;
  if (nb < 1 || nb > kQuantBatchMmaMax || !a.xq)
    fail("batched quantized gemv (tensor cores): ", nb, " vectors in one launch (or no int8 x)");
  a.slice = ((a.p.chunks + kWarps - 1) / kWarps + 3) / 4 * 4;
  static_assert(kQuantBatchMmaMax == 64, "tiles of 8 vectors: 1, 2, 4 or 8 of them");
  const char* name = "batched (tensor cores)";
  const Kernel kernel = nb <= 8    ? quant_kernel_for<Pick<1>>(type_id, name)
                        : nb <= 16 ? quant_kernel_for<Pick<2>>(type_id, name)
                        : nb <= 32 ? quant_kernel_for<Pick<4>>(type_id, name)
                                   : quant_kernel_for<Pick<8>>(type_id, name);
  const unsigned grid = unsigned((a.rows + kTileRows - 1) / kTileRows);
  kernel<<<grid, kWarps * 32, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH("quant_batch_mma_kernel");
}

}  // namespace llm
