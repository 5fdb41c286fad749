// Probe kernels on the "warp" layout (kernels/gemv/gemv_batched.h): a batched GEMV reusing each weight chunk for B
// vectors, and a several-rows-per-warp GEMV for tiny K (`bench probes` measures them, measure/bench/probes_section.cu;
// not registered as decode mappings), and the profiler marker of `bench profile-target`
// (measure/bench/profile_section.cu).
//
// Batched, and why:
// - B FP32 x vectors cost 4B bytes of L1 traffic per 2 weight bytes when each x chunk serves one row; at B = 8 that
//   is 16 x the weight stream, above what L1 delivers. So a warp takes R = max(1, B / 2) rows at once and uses each
//   x chunk for all R: x traffic stays at <= 4 bytes per weight byte.
// - 8 independent 16-byte weight loads per lane before the first FMA (U = 8 / R chunks of R rows), as "warp" does;
//   at most 128 registers (2 blocks per SM), so even B = 8 keeps 16 warps x 4 KiB = 64 KiB in flight per SM.
// - Fewer row groups (N / R) than "warp" has rows, so K is split over 2, 4 or 8 warps of a block (combined through
//   shared memory in a fixed order: deterministic) until the GPU's resident warps are filled, as in "warp".
#include <algorithm>
#include <atomic>
#include <utility>

#include "kernels/gemv/gemv_device.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_batched.h"
#include "kernels/gemv/gemv_internal.h"

namespace llm {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLoadsInFlight = 8;  // 16-byte weight loads per lane before the first FMA

__device__ __forceinline__ void store_y(float* y, float v, bool accumulate) { *y = accumulate ? *y + v : v; }

// Chunk c (8 BF16) of a row: one 16-byte streaming load (kVecW: 16-byte aligned rows, zero-padded to 8), or for rows
// of any pitch (an unpadded row-major view whose K is not a multiple of 8) 8 two-byte loads, zeros past K.
template <bool kVecW>
__device__ __forceinline__ uint4 load_w8(const uint16_t* __restrict__ row, int c, int K) {
  if constexpr (kVecW) {
    return load_weights_streaming(reinterpret_cast<const uint4*>(row) + c);
  } else {
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = c * 8 + j < K ? uint32_t(__ldg(row + c * 8 + j)) : 0u;
    return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
  }
}


// W [N, ld] BF16 bits (kVecW: ld % 8 == 0, 16-byte aligned rows zero-padded past K; else any ld >= K); X [B, ldx];
// Y [B, ldy] (+= with accumulate). `splits` warps (1, 2, 4, 8) share one group of R rows, each taking a contiguous
// slice of the row's 8-weight chunks.
template <int B, int R, bool kVecX, bool kVecW>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_batched_bf16(const uint16_t* __restrict__ W, int64_t ld, int N, int K, const float* __restrict__ x,
                      int64_t ldx, float* __restrict__ y, int64_t ldy, int splits, bool accumulate) {
  constexpr int U = kLoadsInFlight / R;
  __shared__ float slice_sums[kWarps][R * B];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int groups_per_block = kWarps / splits;
  const int slice = warp % splits;
  const int chunks = kVecW ? int(ld >> 3) : (K + 7) / 8;
  const int slice_chunks = (chunks + splits - 1) / splits;
  const int c_begin = slice * slice_chunks;
  const int c_end = min(chunks, c_begin + slice_chunks);
  const int n_groups = (N + R - 1) / R;

  // Block-uniform loop (every warp takes the same trips), so __syncthreads below is safe.
  for (int g0 = blockIdx.x * groups_per_block; g0 < n_groups; g0 += gridDim.x * groups_per_block) {
    const int row0 = (g0 + warp / splits) * R;  // may be >= N on the last trip: loads masked, no store
    float acc[R][B];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < B; ++b) acc[r][b] = 0.0f;

    for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
      uint4 wv[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int c = c0 + 32 * u;
          wv[u][r] = c < c_end && row0 + r < N
                         ? load_w8<kVecW>(W + int64_t(row0 + r) * ld, c, K)
                         : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        if (c >= c_end) continue;
#pragma unroll
        for (int b = 0; b < B; ++b) {
          float xv[8];
          load_x8<kVecX>(x + int64_t(b) * ldx, c * 8, K, xv);  // one x chunk, R rows
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][b] = dot8(wv[u][r], xv, acc[r][b]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int b = 0; b < B; ++b) acc[r][b] = warp_sum(acc[r][b]);

    if (splits == 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int b = 0; b < B; ++b)
            if (row0 + r < N) store_y(y + int64_t(b) * ldy + row0 + r, acc[r][b], accumulate);
      }
    } else {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int b = 0; b < B; ++b) slice_sums[warp][r * B + b] = acc[r][b];
      }
      __syncthreads();
      if (slice == 0 && lane < R * B) {  // lane i combines output (r, b) = (i / B, i % B), slices in order
        const int r = lane / B, b = lane % B;
        float s = 0.0f;
        for (int i = 0; i < splits; ++i) s += slice_sums[warp + i][lane];
        if (row0 + r < N) store_y(y + int64_t(b) * ldy + row0 + r, s, accumulate);
      }
      __syncthreads();
    }
  }
}

// Warps the GPU holds at once for one kernel instantiation, queried once per instantiation (so nothing but the launch
// reaches the driver while a graph is captured); 32 per SM assumed where no device answers.
template <int B, int R, bool kVecX, bool kVecW>
int64_t resident_warps() {
  static std::atomic<int64_t> cached{0};
  int64_t n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int blocks_per_sm = 0;
  const auto kernel = gemv_batched_bf16<B, R, kVecX, kVecW>;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreads, 0) != cudaSuccess ||
      blocks_per_sm <= 0) {
    cudaGetLastError();
    blocks_per_sm = 32 / kWarps;
  }
  n = int64_t(gemv_sm_count()) * blocks_per_sm * kWarps;
  cached.store(n, std::memory_order_relaxed);
  return n;
}

template <int B, int R, bool kVecX, bool kVecW>
void launch_batched(const GemvWeight& w, const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                    cudaStream_t stream) {
  auto kernel = gemv_batched_bf16<B, R, kVecX, kVecW>;
  // Split K while the row groups alone fill less than half the resident warps, keeping >= 32 chunks per slice.
  const int64_t chunks = kVecW ? w.ld / 8 : (int64_t(w.K) + 7) / 8, groups = (int64_t(w.N) + R - 1) / R,
                resident = resident_warps<B, R, kVecX, kVecW>();
  int splits = 1;
  while (splits < kWarps && groups * splits * 2 <= resident && chunks / (splits * 2) >= 32) splits *= 2;
  const int groups_per_block = kWarps / splits;
  const int64_t grid = std::min<int64_t>((groups + groups_per_block - 1) / groups_per_block, int64_t(1) << 30);
  kernel<<<unsigned(grid), kThreads, 0, stream>>>(w.data, w.ld, w.N, w.K, x, ldx, y, ldy, splits, accumulate);
  CUDA_CHECK_LAUNCH("gemv_batched_bf16");
}

// R rows per warp for B vectors: x traffic at most 4 bytes per weight byte up to B = 8, and at most 128 registers
// (B = 9 .. 16 take 2 rows: acc[4][16] would spill).
template <int B>
constexpr int rows_for_batch() {
  return B <= 2 ? 1 : B < 8 ? 2 : B == 8 ? 4 : 2;
}

template <int B>
void launch_batched(const GemvWeight& w, const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                    cudaStream_t stream) {
  constexpr int R = rows_for_batch<B>();
  const bool vec_w = w.ld % 8 == 0 && (reinterpret_cast<uintptr_t>(w.data) & 15) == 0;
  const bool vec_x = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && ldx % 4 == 0;
  if (!vec_w)  // rows of any pitch: two-byte weight loads (tiny or odd shapes only)
    launch_batched<B, R, false, false>(w, x, ldx, y, ldy, accumulate, stream);
  else if (vec_x)
    launch_batched<B, R, true, true>(w, x, ldx, y, ldy, accumulate, stream);
  else
    launch_batched<B, R, false, true>(w, x, ldx, y, ldy, accumulate, stream);
}

template <int... Bs>
bool launch_batch_of(int B, const GemvWeight& w, const float* x, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                     cudaStream_t stream, std::integer_sequence<int, Bs...>) {
  return ((B == Bs + 1 ? (launch_batched<Bs + 1>(w, x, ldx, y, ldy, accumulate, stream), true) : false) || ...);
}

// ---- several rows per warp (tiny K) ----

constexpr int kRowGroupsInFlight = 4;  // row groups per warp trip: 4 independent loads per lane when K is tiny

// G lanes per row (a power of two), 32 / G rows per warp, kRowGroupsInFlight such sets of rows per trip.
template <int G, bool kVecX>
__global__ void __launch_bounds__(kThreads)
    gemv_rows_per_warp_bf16(const uint16_t* __restrict__ W, int64_t ld, int N, int K, const float* __restrict__ x,
                            float* __restrict__ y) {
  constexpr int kRows = 32 / G;                         // rows per warp per row group
  constexpr int kRowsPerTrip = kRows * kRowGroupsInFlight;
  const int lane = threadIdx.x & 31, sub = lane / G, j = lane % G;
  const int chunks = int(ld >> 3);
  const int64_t warp = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t base = warp * kRowsPerTrip; base < N; base += warps * kRowsPerTrip) {
    float acc[kRowGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kRowGroupsInFlight; ++u) acc[u] = 0.0f;
    for (int c = j; c < chunks; c += G) {
      uint4 wv[kRowGroupsInFlight];
#pragma unroll
      for (int u = 0; u < kRowGroupsInFlight; ++u) {
        const int64_t row = base + u * kRows + sub;
        wv[u] = row < N ? load_weights_streaming(reinterpret_cast<const uint4*>(W + row * ld) + c)
                        : make_uint4(0u, 0u, 0u, 0u);
      }
      float xv[8];
      load_x8<kVecX>(x, c * 8, K, xv);
#pragma unroll
      for (int u = 0; u < kRowGroupsInFlight; ++u) acc[u] = dot8(wv[u], xv, acc[u]);
    }
#pragma unroll
    for (int u = 0; u < kRowGroupsInFlight; ++u) {
#pragma unroll
      for (int off = G / 2; off > 0; off >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
      const int64_t row = base + u * kRows + sub;
      if (j == 0 && row < N) y[row] = acc[u];
    }
  }
}

int lanes_per_row(int64_t ld) {
  const int64_t chunks = ld / 8;
  int g = 1;
  while (g < 32 && g < chunks) g *= 2;
  return g;
}

template <int G>
void launch_rows_per_warp(const GemvWeight& w, const float* x, float* y, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlockTrip = int64_t(kWarps) * (32 / G) * kRowGroupsInFlight;
  const int64_t grid = std::min<int64_t>((int64_t(w.N) + kRowsPerBlockTrip - 1) / kRowsPerBlockTrip, int64_t(1) << 30);
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0)
    gemv_rows_per_warp_bf16<G, true><<<unsigned(grid), kThreads, 0, stream>>>(w.data, w.ld, w.N, w.K, x, y);
  else
    gemv_rows_per_warp_bf16<G, false><<<unsigned(grid), kThreads, 0, stream>>>(w.data, w.ld, w.N, w.K, x, y);
  CUDA_CHECK_LAUNCH("gemv_rows_per_warp_bf16");
}

void check_warp_layout(const char* what, const GemvWeight& w) {
  if (w.data == nullptr || w.N <= 0 || w.K <= 0)
    fail(what, ": weight not prepacked (N=", w.N, ", K=", w.K, ")");
  if (w.ld % 8 != 0 || w.ld < w.K || (reinterpret_cast<uintptr_t>(w.data) & 15) != 0)
    fail(what, ": weight [", w.N, ", ", w.K, "] needs 16-byte aligned rows, found ld = ", w.ld,
         " (prepack with gemv_batched_prepack)");
}

__global__ void gemv_profile_marker_kernel() {}

}  // namespace

void gemv_profile_marker(int id, cudaStream_t stream) {
  if (id < 1) fail("gemv_profile_marker: id must be >= 1, found ", id);
  gemv_profile_marker_kernel<<<unsigned(id), 32, 0, stream>>>();
  CUDA_CHECK_LAUNCH("gemv_profile_marker_kernel");
}

void gemv_batched_prepack(const uint16_t* w_rowmajor, int N, int K, GemvWeight* out, cudaStream_t stream) {
  warp_gemv_prepack(w_rowmajor, N, K, out, stream);
}

void gemv_batched_launch(const GemvWeight& w, int B, const float* x, int64_t ldx, float* y, int64_t ldy,
                         cudaStream_t stream, bool accumulate) {
  if (w.data == nullptr || w.N <= 0 || w.K <= 0 || w.ld < w.K || (reinterpret_cast<uintptr_t>(w.data) & 1) != 0)
    fail("gemv_batched: weight [", w.N, ", ", w.K, "] missing or with a row pitch ", w.ld, " below K");
  if (x == nullptr || y == nullptr || ldx < w.K || ldy < w.N)
    fail("gemv_batched: X [B, ", ldx, "] / Y [B, ", ldy, "] do not fit W [", w.N, ", ", w.K,
         "] (need ldx >= K, ldy >= N, non-null)");
  if (!launch_batch_of(B, w, x, ldx, y, ldy, accumulate, stream, std::make_integer_sequence<int, kGemvMaxBatch>{}))
    fail("gemv_batched: batch ", B, " is not supported: expected 1 to ", kGemvMaxBatch);
}

int gemv_rows_per_warp(int K) { return 32 / lanes_per_row(gemv_round_up(K, 8)); }

void gemv_rows_per_warp_launch(const GemvWeight& w, const float* x, float* y, cudaStream_t stream) {
  check_warp_layout("gemv_rows_per_warp", w);
  if (x == nullptr || y == nullptr) fail("gemv_rows_per_warp: null x or y for a [", w.N, ", ", w.K, "] weight");
  switch (lanes_per_row(w.ld)) {
    case 1: return launch_rows_per_warp<1>(w, x, y, stream);
    case 2: return launch_rows_per_warp<2>(w, x, y, stream);
    case 4: return launch_rows_per_warp<4>(w, x, y, stream);
    case 8: return launch_rows_per_warp<8>(w, x, y, stream);
    case 16: return launch_rows_per_warp<16>(w, x, y, stream);
    default: return launch_rows_per_warp<32>(w, x, y, stream);
  }
}

}  // namespace llm
