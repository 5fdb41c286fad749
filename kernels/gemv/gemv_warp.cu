// "warp": lanes along K of a padded row-major [N, ld] BF16 weight, 16-byte streaming loads, FP32 sums, shuffle
// reduction: the coalesced mapping (each warp load is 512 contiguous bytes), split over K where N cannot fill the GPU.
//
// Choices, and why:
// - ld = K rounded up to 8 elements, zero-padded (prepack): every row starts 16-byte aligned, so the loop is 16-byte
//   loads only; the padded columns meet x = 0 (x is read with bounds, never past K), so they add exact zeros.
// - 8 independent 16-byte loads per lane are issued before the first FMA: 4 KiB in flight per warp, ~128 KiB per SM
//   at 32 resident warps, several times what Little's law asks for (4.3 TB/s x ~1 us / 132 SMs = ~33 KiB).
// - Weights go through ld.global.nc.L1::no_allocate (read once per call: keep them out of L1); x through __ldg so its
//   K floats stay in L1 for all the warps of an SM. The weight loads come first, so x's latency hides under theirs
//   (no shared-memory staging barrier in front of the weight stream).
// - Split-K (2, 4 or 8 warps per row, combined through shared memory in a fixed order: deterministic) when N alone
//   gives fewer warps than the GPU holds at once: a 1024 x 4096 launch then puts the whole 8 MiB in flight at once.
// - Launched with programmatic dependent launch (kernels/ops/pdl.cuh): it starts streaming its weights while the kernel
//   before it (a norm, SwiGLU, attention's merge, another GEMV) drains, and reads x and y only after pdl_wait().
//   Measured on the H200: +14% at 4096x4096 and +24% at 1024x4096 (graph-timed), where launch ramp dominates.
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


// W [N, ld] BF16 bits, ld % 8 == 0, zero-padded past K; x [K]; y [N]. splits in {1, 2, 4, 8}.
template <bool kVecX>
__global__ void __launch_bounds__(kWarpGemvThreads, 4)
    gemv_warp_per_row_bf16(const uint16_t* __restrict__ W, int64_t ld, int N, int K, const float* __restrict__ x,
                           float* __restrict__ y, int accumulate, int splits, GemvEpilogue ep) {
  __shared__ float slice_sums[kWarpsPerBlock];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kWarpsPerBlock / splits;
  const int slice = warp % splits;
  const int chunks = int(ld >> 3);  // 16-byte chunks per padded row
  const int slice_chunks = (chunks + splits - 1) / splits;
  const int c_begin = slice * slice_chunks;
  const int c_end = min(chunks, c_begin + slice_chunks);
  // A PDL-launched successor may start as soon as every block of this grid has started; it loads only weights
  // before its own pdl_wait().
  pdl_launch_dependents();
  // Nothing but weights is read before this thread has waited once.
  bool waited = false;
  float ss = 0.0f;  // the RMSNorm fold's sum of squares of this thread's rows (producer)

  // Block-uniform loop (every warp takes the same trips), so __syncthreads below is safe.
  for (int row0 = blockIdx.x * rows_per_block; row0 < N; row0 += gridDim.x * rows_per_block) {
    const int row = row0 + warp / splits;
    float acc = 0.0f;
    if (row < N) {
      const uint4* wrow = reinterpret_cast<const uint4*>(W + int64_t(row) * ld);
      for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * kWarpGemvUnroll) {
        uint4 wv[kWarpGemvUnroll];
#pragma unroll
        for (int u = 0; u < kWarpGemvUnroll; ++u) {
          const int c = c0 + 32 * u;
          wv[u] = c < c_end ? load_weights_streaming(wrow + c) : make_uint4(0u, 0u, 0u, 0u);
        }
        if (!waited) {
          pdl_wait();
          waited = true;
        }
#pragma unroll
        for (int u = 0; u < kWarpGemvUnroll; ++u) {
          const int c = c0 + 32 * u;
          if (c < c_end) {
            float xv[8];
            load_x8<kVecX>(x, c * 8, K, xv);
            acc = dot8(wv[u], xv, acc);
          }
        }
      }
    }
    if (!waited) {
      pdl_wait();
      waited = true;
    }
    acc = warp_sum(acc);
    if (splits == 1) {
      if (lane == 0 && row < N) gemv_store_row(ep, y, row, acc, accumulate, &ss);
    } else {
      if (lane == 0) slice_sums[warp] = acc;
      __syncthreads();
      if (slice == 0 && lane == 0 && row < N) {
        float s = 0.0f;
        for (int i = 0; i < splits; ++i) s += slice_sums[warp + i];
        gemv_store_row(ep, y, row, s, accumulate, &ss);
      }
      __syncthreads();
    }
  }
  gemv_epilogue_finish(ep, ss, N);
}

// Warps the GPU holds at once with this kernel's register use (queried once; 32 per SM assumed without a device).
int warp_gemv_resident_warps() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int blocks_per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, gemv_warp_per_row_bf16<true>, kWarpGemvThreads,
                                                    0) != cudaSuccess ||
      blocks_per_sm <= 0) {
    cudaGetLastError();
    blocks_per_sm = 32 / kWarpsPerBlock;
  }
  n = gemv_sm_count() * blocks_per_sm * kWarpsPerBlock;
  cached.store(n, std::memory_order_relaxed);
  return n;
}

void prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

GemvLaunchShape shape(int N, int K) { return warp_gemv_shape(N, K, warp_gemv_plan_fill(N, K)); }

void launch(const GemvWeight& w, const float* x, float* y, bool accumulate, const GemvEpilogue& ep,
            GemvContext* ctx) {
  WarpGemvPlan plan = warp_gemv_plan_fill(w.N, w.K);
  plan.pdl = true;
  warp_gemv_launch("warp", w, x, y, accumulate, ep, plan, gemv_stream(ctx));
}

}  // namespace

void warp_gemv_prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  gemv_prepack_rowmajor(w_rowmajor, N, K, 8, out, stream);
}

// Split K only while N * splits stays within one wave of resident warps, and never below 32 chunks (one per lane)
// per slice. 4096 x 4096 -> 1 warp per row (4,096 warps, 16 loads per lane); 1024 x 4096 -> 4 warps per row (4,096
// warps, 4 loads per lane, all issued at once).
WarpGemvPlan warp_gemv_plan_fill(int N, int K) {
  const int64_t chunks = gemv_round_up(K, 8) / 8;
  const int64_t resident = warp_gemv_resident_warps();
  WarpGemvPlan plan;
  while (plan.splits < kWarpsPerBlock && int64_t(N) * plan.splits * 2 <= resident &&
         chunks / (plan.splits * 2) >= 32)
    plan.splits *= 2;
  const int rows_per_block = kWarpsPerBlock / plan.splits;
  plan.grid = int((int64_t(N) + rows_per_block - 1) / rows_per_block);
  return plan;
}

GemvLaunchShape warp_gemv_shape(int N, int K, const WarpGemvPlan& plan) {
  (void)N;
  const int64_t chunks = gemv_round_up(K, 8) / 8;
  const int64_t per_lane = ((chunks + plan.splits - 1) / plan.splits + 31) / 32;
  GemvLaunchShape s;
  s.grid = plan.grid;
  s.block = kWarpGemvThreads;
  s.bytes_in_flight_per_thread = int(std::min<int64_t>(kWarpGemvUnroll, per_lane) * 16);
  return s;
}

void warp_gemv_launch(const char* mapping, const GemvWeight& w, const float* x, float* y, bool accumulate,
                      const GemvEpilogue& ep, const WarpGemvPlan& plan, cudaStream_t stream) {
  gemv_check_launch(mapping, w, x, y);
  gemv_check_epilogue(mapping, ep, plan.grid);
  gemv_check_padded_rows(mapping, w);
  if (plan.grid <= 0 || plan.splits < 1 || plan.splits > kWarpsPerBlock || kWarpsPerBlock % plan.splits != 0)
    fail("gemv '", mapping, "': bad plan (grid ", plan.grid, ", splits ", plan.splits, ")");
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t config =
      pdl_launch_config(unsigned(plan.grid), kWarpGemvThreads, stream, plan.pdl, &attr);
  const int acc = accumulate ? 1 : 0;
  if (vec_x)
    CUDA_CHECK(cudaLaunchKernelEx(&config, gemv_warp_per_row_bf16<true>, w.data, w.ld, w.N, w.K, x, y, acc,
                                  plan.splits, ep));
  else
    CUDA_CHECK(cudaLaunchKernelEx(&config, gemv_warp_per_row_bf16<false>, w.data, w.ld, w.N, w.K, x, y, acc,
                                  plan.splits, ep));
}

extern const GemvMapping gemv_mapping_warp = gemv_mapping_of(GemvBf16Form::Warp, prepack, launch, shape, 8);

}  // namespace llm
