// "warp-r2" (the default mapping): lanes along K of the padded row-major weight, two rows per warp share each x chunk,
// a ring of 8 weight loads per lane stays in flight across batches and rows, PDL launch. The fastest end to end on the
// H200 (synthetic llama3.1-8b: 226 t/s against 200 for "warp" and cuBLAS), hence the default.
//
// Same padded layout as "warp" (warp_gemv_prepack: ld % 8 == 0, zero-padded, 16-byte aligned rows). Choices, and why:
// - R = 2 rows per warp: one pair of float4 x loads serves two weight chunks, so x's L1 traffic falls from 2x to 1x
//   the weight bytes, and each lane has two independent rows in flight.
// - Ring of U = 4 slots per row: slot u of the next batch is reloaded right after slot u of this batch is consumed, so
//   a lane keeps about U * R = 8 loads outstanding all the time (also across a row boundary, where the reduction of
//   the finished row runs under the next row's loads) instead of "issue 8, wait, compute, issue 8".
// - Work is cut into groups of R consecutive rows, one group per warp "lane" (splits warps each, one K-slice per
//   warp); the hardware schedules blocks as for "warp". (A balanced persistent plan, one row per warp and an L2
//   prefetch hint were measured slower on the H200 and removed.)
// - Split-K partials meet in shared memory and are summed in slice order: deterministic, no atomics.
// - PDL: nothing but weights is read before griddepcontrol.wait; dependents may launch as soon as all blocks started.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_device.cuh"
#include "kernels/gemv/gemv_epilogue.cuh"
#include "kernels/ops/pdl.cuh"

namespace llm {
namespace {

constexpr int kWarpsPerBlock = kWarpGemvThreads / 32;
constexpr int kMaxSplitGroups = 4;  // groups one split lane may own (the plan gives split lanes exactly one)

// volatile keeps the first ring fill ahead of pdl_wait() (weights never change, so early loads are safe).
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p)
      : "memory");
  return v;
}

// x[k .. k+7], zeros past K (x is never read past K: the padded weight columns meet exact zeros). kVecX: x is 16-byte
// aligned and K % 8 == 0, so every chunk is two float4 loads and the loop carries no scalar fallback (which costs
// registers the ring needs).
template <bool kVecX>
__device__ __forceinline__ void load_x8_ring(const float* __restrict__ x, int k, int K, float (&xv)[8]) {
  if (kVecX) {
    // volatile: stays after the ring refill written before it (an x load hoisted early holds 4 more registers).
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%8];\n\t"
                 "ld.global.nc.v4.f32 {%4, %5, %6, %7}, [%8+16];"
        : "=f"(xv[0]), "=f"(xv[1]), "=f"(xv[2]), "=f"(xv[3]), "=f"(xv[4]), "=f"(xv[5]), "=f"(xv[6]), "=f"(xv[7])
        : "l"(x + k));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) xv[i] = k + i < K ? __ldg(x + k + i) : 0.0f;
  }
}

// W [N, ld] BF16 bits (ld % 8 == 0, zero-padded past K); x [K]; y [N]. Group g = rows [g * R, g * R + R) clipped to N;
// lane j < lanes owns groups [j * groups / lanes, (j + 1) * groups / lanes); splits in {1, 2, 4, 8} warps per lane.
// Two rows need ~80 registers with 8 loads in flight (the second row's pointer and checks): 3 blocks (24 warps) per SM,
// still 96 KiB of weights in flight per SM.
constexpr int kR2MinBlocks = 3;

template <int R, int U, bool kVecX, bool kTokens = false>
__global__ void __launch_bounds__(kWarpGemvThreads, kR2MinBlocks)
    gemv_warp_r2_bf16(const uint16_t* __restrict__ W, int64_t ld, int N, int K, const float* __restrict__ x,
                         float* __restrict__ y, int accumulate, int splits, int64_t groups, int64_t lanes,
                         GemvEpilogue ep) {
  __shared__ float slice_sums[kWarpsPerBlock][kMaxSplitGroups * R];  // split lanes only: [warp][group * R + row]
  // kTokens, the token axis (GemvEpilogue::tokens; its own instantiation): gridDim.x = blocks * tokens, the token
  // fastest (as the quantized warp kernel's); token tok's block vblock does what block vblock of a one-token launch
  // does, on its own x, y and epilogue.
  const unsigned n_tok = kTokens ? unsigned(ep.tokens.n) : 1u;
  const int tok = kTokens ? int(blockIdx.x % n_tok) : 0;
  const unsigned vblock = kTokens ? blockIdx.x / n_tok : blockIdx.x;
  const unsigned vblocks = kTokens ? gridDim.x / n_tok : gridDim.x;
  if constexpr (kTokens) {
    x = token_ptr(x, ep.tokens.stride, tok);
    y = token_ptr(y, ep.tokens.stride, tok);
    ep = gemv_epilogue_at_token(ep, tok);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = int64_t(vblock) * (kWarpsPerBlock / splits) + warp / splits;
  const int slice = warp % splits;
  const int chunks = (K + 7) >> 3;  // 16-byte chunks holding the K columns (any further padding is never read)
  const int slice_chunks = (chunks + splits - 1) / splits;
  const int c_begin = min(chunks, slice * slice_chunks);
  const int c_end = min(chunks, c_begin + slice_chunks);
  const int batches = max(1, (c_end - c_begin + 32 * U - 1) / (32 * U));  // ring turns per group
  const int g_begin = j < lanes ? int(j * groups / lanes) : 0;
  const int g_end = j < lanes ? int((j + 1) * groups / lanes) : 0;
  const int64_t ld16 = ld >> 3;   // row stride in 16-byte chunks
  const int lane_chunks = c_end - c_begin - lane;  // chunks of one row slice at or after this lane's first

  pdl_launch_dependents();

  // The ring: slot u holds, for each row of the group, chunk c_begin + lane + 32 * (U * batch + u). A batch is named
  // by p (this lane's chunk of slot 0, first row) and rem (chunks left from there); zeros fill slots past the slice,
  // a second row past N and groups past the lane's run, so the FMAs need no checks.
  uint4 wv[U][R];
  auto fill_slot = [&](const uint4* p, int rem, bool live, bool second_row, int u) {
#pragma unroll
    for (int i = 0; i < R; ++i)
      wv[u][i] = live && 32 * u < rem && (i == 0 || second_row) ? load_weights(p + i * ld16 + 32 * u)
                                                                : make_uint4(0u, 0u, 0u, 0u);
  };
  const uint4* group_ptr = reinterpret_cast<const uint4*>(W) + int64_t(g_begin) * R * ld16 + c_begin + lane;
#pragma unroll
  for (int u = 0; u < U; ++u)
    fill_slot(group_ptr, lane_chunks, g_begin < g_end, int64_t(g_begin) * R + 1 < N, u);
  pdl_wait();  // x and y are the predecessor's: nothing but weights was read above

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  float ss = 0.0f;  // the RMSNorm fold's sum of squares of this thread's rows (producer)
  const uint4* p = group_ptr;
  int rem = lane_chunks, b = 0;
  for (int g = g_begin; g < g_end;) {
    // The batch after this one: the next turn of the ring, or batch 0 of the next group.
    int next_b = b + 1, next_g = g, next_rem = rem - 32 * U;
    const uint4* next_p = p + 32 * U;
    if (next_b == batches) {
      next_b = 0;
      ++next_g;
      group_ptr += R * ld16;
      next_p = group_ptr;
      next_rem = lane_chunks;
    }
    const bool next_live = next_g < g_end, next_second = int64_t(next_g) * R + 1 < N;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (32 * u < rem) {
        float xv[8];
        load_x8_ring<kVecX>(x, (c_end - rem + 32 * u) * 8, K, xv);
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] = dot8(wv[u][i], xv, acc[i]);
      }
      fill_slot(next_p, next_rem, next_live, next_second, u);
    }
    if (next_b == 0) {  // group g is complete; the next group's first batch is already in flight
      const float mine = warp_sum_rows(acc, lane);  // lane i < R keeps row g * R + i
      const int64_t row = int64_t(g) * R + lane;
      if (lane < R && row < N) {
        if (splits == 1)
          gemv_store_row(ep, y, row, mine, accumulate, &ss);
        else
          slice_sums[warp][(g - g_begin) * R + lane] = mine;
      }
    }
    g = next_g;
    b = next_b;
    p = next_p;
    rem = next_rem;
  }

  if (splits > 1) {  // block-uniform: every thread arrives
    __syncthreads();
    const int64_t row = int64_t(g_begin) * R + lane;
    if (slice == 0 && lane < (g_end - g_begin) * R && row < N) {
      float s = 0.0f;
      for (int i = 0; i < splits; ++i) s += slice_sums[warp + i][lane];
      gemv_store_row(ep, y, row, s, accumulate, &ss);
    }
  }
  gemv_epilogue_finish(ep, ss, N, vblock, vblocks);
}

using R2Kernel = void (*)(const uint16_t*, int64_t, int, int, const float*, float*, int, int, int64_t, int64_t,
                          GemvEpilogue);

// U * R = 8 loads of 16 bytes in flight per lane (128 bytes per lane, as in "warp").
constexpr int kRows = 2;
constexpr int kRing = 4;
template <bool kVecX, bool kTokens = false>
R2Kernel pick_kernel() { return gemv_warp_r2_bf16<kRows, kRing, kVecX, kTokens>; }

// Warps the GPU holds at once (queried once per process).
int resident_warps() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int blocks_per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, pick_kernel<true>(), kWarpGemvThreads, 0) !=
          cudaSuccess ||
      blocks_per_sm <= 0) {
    cudaGetLastError();
    blocks_per_sm = kR2MinBlocks;  // no device: the H200 figure
  }
  n = gemv_sm_count() * blocks_per_sm * kWarpsPerBlock;
  cached.store(n, std::memory_order_relaxed);
  return n;
}

struct Plan {
  int splits = 1;      // warps per lane (K-slices), 1, 2, 4 or 8
  int grid = 0;        // blocks of kWarpGemvThreads
  int64_t groups = 0;  // ceil(N / 2) groups of two consecutive rows, one per lane
};

// Splits as "warp" does (double while groups * splits stays within one wave and each slice keeps >= 32 chunks).
Plan plan_for(int N, int K) {
  const int64_t chunks = gemv_round_up(K, 8) / 8;
  const int64_t resident = resident_warps();
  Plan plan;
  plan.groups = (int64_t(N) + kRows - 1) / kRows;
  while (plan.splits < kWarpsPerBlock && plan.groups * plan.splits * 2 <= resident && chunks / (plan.splits * 2) >= 32)
    plan.splits *= 2;
  const int64_t lanes_per_block = kWarpsPerBlock / plan.splits;
  plan.grid = int((plan.groups + lanes_per_block - 1) / lanes_per_block);
  return plan;
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) {
  const Plan plan = plan_for(N, K);
  const int64_t chunks = gemv_round_up(K, 8) / 8;
  const int64_t per_lane = ((chunks + plan.splits - 1) / plan.splits + 31) / 32;  // chunks per lane per row
  GemvLaunchShape s;
  s.grid = plan.grid;
  s.block = kWarpGemvThreads;
  s.bytes_in_flight_per_thread = int(std::min<int64_t>(kRing, per_lane) * kRows * 16);
  return s;
}

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  const char* mapping = "warp-r2";
  gemv_check_launch(mapping, w, x, y);
  gemv_check_padded_rows(mapping, w);
  const Plan plan = plan_for(w.N, w.K);
  gemv_check_epilogue(mapping, ep, plan.grid, false, false, true);
  const int64_t lanes_per_block = kWarpsPerBlock / plan.splits;
  if (plan.grid <= 0 || plan.groups <= 0 || int64_t(plan.grid) * lanes_per_block < plan.groups)
    fail("gemv '", mapping, "': bad plan (grid ", plan.grid, ", splits ", plan.splits, ", groups ", plan.groups, ")");
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && w.K % 8 == 0;
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t config = pdl_launch_config(unsigned(plan.grid), kWarpGemvThreads, gemv_stream(ctx), true, &attr);
  config.gridDim.x *= unsigned(ep.tokens.n);  // the token axis (GemvEpilogue::tokens), token fastest
  const R2Kernel kernel = ep.tokens.many() ? (vec_x ? pick_kernel<true, true>() : pick_kernel<false, true>())
                                           : (vec_x ? pick_kernel<true>() : pick_kernel<false>());
  // lanes = groups: one group per lane.
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<const uint16_t*>(w.data), w.ld, w.N, w.K, x, y,
                                accumulate ? 1 : 0, plan.splits, plan.groups, plan.groups, ep));
}

}  // namespace

extern const GemvMapping gemv_mapping_warp_r2 = gemv_mapping_of(GemvBf16Form::WarpR2, prepack, launch, shape, 8);

}  // namespace llm
