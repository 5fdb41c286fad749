// The kernels of kernels/gemv/gemv_batched.h (batched GEMV for 1 to 16 vectors, with accumulate; several rows per warp) against an FP64 CPU reference on
// random BF16 weights, with NaN-poisoned outputs and guards, on awkward shapes; plus a negative control.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"  // cuda_device_available
#include "core/dtype.h"  // f32_to_bf16 / bf16_to_f32
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_batched.h"

namespace llm {
namespace {

constexpr double kTol = 1e-5;  // FP32 sums of <= ~5,000 BF16 x FP32 products: ~1e-6 relative

// Random BF16 W [N, K] (row-major, unpadded) and B FP32 vectors X [B, ldx] (BF16-rounded values), on host and device,
// and the FP64 reference Y [B, N].
struct Problem {
  int N, K, B;
  int64_t ldx;
  std::vector<uint16_t> w;
  std::vector<float> x;      // [B, ldx], NaN in the row padding (never read)
  std::vector<double> ref;   // [B, N]
  uint16_t* d_w = nullptr;
  float* d_x = nullptr;

  Problem(int n, int k, int b, int64_t ld_x, uint32_t seed) : N(n), K(k), B(b), ldx(ld_x) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    w.resize(size_t(N) * size_t(K));
    for (auto& v : w) v = f32_to_bf16(u(gen));
    x.assign(size_t(B) * size_t(ldx), std::nanf(""));
    for (int bi = 0; bi < B; ++bi)
      for (int i = 0; i < K; ++i) x[size_t(bi) * size_t(ldx) + size_t(i)] = bf16_to_f32(f32_to_bf16(u(gen)));
    ref.assign(size_t(B) * size_t(N), 0.0);
    for (int bi = 0; bi < B; ++bi)
      for (int r = 0; r < N; ++r) {
        double s = 0.0;
        for (int i = 0; i < K; ++i)
          s += double(bf16_to_f32(w[size_t(r) * size_t(K) + size_t(i)])) *
               double(x[size_t(bi) * size_t(ldx) + size_t(i)]);
        ref[size_t(bi) * size_t(N) + size_t(r)] = s;
      }
    CUDA_CHECK(cudaMalloc(&d_w, w.size() * 2));
    CUDA_CHECK(cudaMemcpy(d_w, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&d_x, x.size() * 4));
    CUDA_CHECK(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  }
  ~Problem() {
    cudaFree(d_w);
    cudaFree(d_x);
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
};

// Runs `launch(y)` into a Y buffer [B, ldy] poisoned with 0xFF (NaN); checks every element outside [b, 0..N) is
// untouched and returns the worst relative L2 error over the B rows.
template <typename Launch>
double run_poisoned(const Problem& p, int64_t ldy, Launch launch) {
  const size_t floats = size_t(p.B) * size_t(ldy);
  float* d_y = nullptr;
  CUDA_CHECK(cudaMalloc(&d_y, floats * 4));
  CUDA_CHECK(cudaMemset(d_y, 0xFF, floats * 4));
  launch(d_y);
  std::vector<float> y(floats);
  CUDA_CHECK(cudaMemcpy(y.data(), d_y, floats * 4, cudaMemcpyDeviceToHost));
  cudaFree(d_y);
  double worst = 0.0;
  for (int b = 0; b < p.B; ++b) {
    for (int64_t i = p.N; i < ldy; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &y[size_t(b) * size_t(ldy) + size_t(i)], 4);
      if (bits != 0xFFFFFFFFu) {
        ADD_FAILURE() << "write outside Y[" << b << ", 0.." << p.N << "): column " << i;
        return INFINITY;
      }
    }
    double num = 0.0, den = 0.0;
    for (int n = 0; n < p.N; ++n) {
      const double want = p.ref[size_t(b) * size_t(p.N) + size_t(n)];
      const double d = double(y[size_t(b) * size_t(ldy) + size_t(n)]) - want;
      num += d * d;
      den += want * want;
    }
    const double err = den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
    if (!(err <= worst)) worst = err;  // NaN propagates
  }
  return worst;
}

class GemvBatchedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// Shapes: N not a multiple of the rows a warp takes (R = 1, 2, 4), K not a multiple of 8 (padded rows, scalar x
// tail), K below one lane's chunk, K long enough to be split over warps, N small enough that K splits 8 ways.
const std::vector<std::pair<int, int>> kShapes = {{1, 1}, {7, 13}, {33, 200}, {1000, 4097}, {4096, 4096},
                                                  {5, 14336}, {1027, 64}};

TEST_F(GemvBatchedTest, MatchesFp64ReferenceForEveryBatch) {
  uint32_t seed = 1;
  for (const auto& [n, k] : kShapes) {
    for (int b : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16}) {  // every rows-per-warp class (1, 2, 4) and the 2-row tail
      // ldx = K + 4 keeps 16-byte aligned rows; K + 1 forces the scalar x path.
      for (int64_t pad : {int64_t(4) - (k % 4 == 0 ? 0 : k % 4), int64_t(1)}) {
        const int64_t ldx = k + pad;
        SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k) + " B=" + std::to_string(b) +
                     " ldx=" + std::to_string(ldx));
        const Problem p(n, k, b, ldx, seed++);
        GemvWeight w;
        gemv_batched_prepack(p.d_w, n, k, &w, nullptr);
        const int64_t ldy = n + 3;
        const double err = run_poisoned(p, ldy, [&](float* y) {
          gemv_batched_launch(w, b, p.d_x, p.ldx, y, ldy, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
        });
        gemv_free(&w);
        EXPECT_LE(err, kTol) << "relative L2 error " << err;
      }
    }
  }
}

TEST_F(GemvBatchedTest, RowsPerWarpMatchesFp64Reference) {
  uint32_t seed = 100;
  // Every lanes-per-row class (1, 2, 4, 8, 16, 32 and rows longer than a warp), N not a multiple of rows per trip.
  for (int k : {1, 8, 13, 16, 24, 40, 64, 96, 128, 192, 256, 264, 1000}) {
    for (int n : {1, 77, 4099}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k));
      const Problem p(n, k, 1, k, seed++);
      GemvWeight w;
      gemv_batched_prepack(p.d_w, n, k, &w, nullptr);
      const double err = run_poisoned(p, n + 5, [&](float* y) {
        gemv_rows_per_warp_launch(w, p.d_x, y, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
      });
      gemv_free(&w);
      EXPECT_LE(err, kTol) << "relative L2 error " << err;
    }
  }
  EXPECT_EQ(gemv_rows_per_warp(8), 32);
  EXPECT_EQ(gemv_rows_per_warp(24), 8);  // 3 chunks -> 4 lanes
  EXPECT_EQ(gemv_rows_per_warp(256), 1);
  EXPECT_EQ(gemv_rows_per_warp(4096), 1);
}

// An unpadded row-major view (ld = K, the CUDA engine's BF16 copies) with K not a multiple of 8: rows are not 16-byte
// aligned, so the kernel takes two-byte weight loads; the same results as the padded layout's.
TEST_F(GemvBatchedTest, UnpaddedRowsOfAnyPitch) {
  uint32_t seed = 300;
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{7, 13}, {33, 172}, {1000, 4097}, {64, 64}}) {
    for (int b : {1, 3, 9}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k) + " B=" + std::to_string(b));
      const Problem p(n, k, b, k + 1, seed++);
      GemvWeight view;
      view.N = n;
      view.K = k;
      view.ld = k;
      view.data = p.d_w;
      view.owned = false;
      const double err = run_poisoned(p, n + 2, [&](float* y) {
        gemv_batched_launch(view, b, p.d_x, p.ldx, y, n + 2, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
      });
      EXPECT_LE(err, kTol) << "relative L2 error " << err;
    }
  }
}

// accumulate adds W x to what Y holds (the engine's residual GEMVs): Y starts at known values, ends at them plus the
// reference, for a batch on each rows-per-warp class, K split over warps or not.
TEST_F(GemvBatchedTest, AccumulateAddsToY) {
  uint32_t seed = 200;
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{33, 200}, {1000, 4097}, {5, 14336}}) {
    for (int b : {1, 4, 8, 11}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k) + " B=" + std::to_string(b));
      const Problem p(n, k, b, k + 3, seed++);
      GemvWeight w;
      gemv_batched_prepack(p.d_w, n, k, &w, nullptr);
      std::vector<float> y0(size_t(b) * size_t(n));
      for (size_t i = 0; i < y0.size(); ++i) y0[i] = float(int(i % 7) - 3) * 0.5f;
      float* d_y = nullptr;
      CUDA_CHECK(cudaMalloc(&d_y, y0.size() * 4));
      CUDA_CHECK(cudaMemcpy(d_y, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
      gemv_batched_launch(w, b, p.d_x, p.ldx, d_y, n, nullptr, /*accumulate=*/true);
      std::vector<float> y(y0.size());
      CUDA_CHECK(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));
      cudaFree(d_y);
      gemv_free(&w);
      double num = 0.0, den = 0.0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double want = p.ref[i] + double(y0[i]), d = double(y[i]) - want;
        num += d * d;
        den += want * want;
      }
      EXPECT_LE(std::sqrt(num / den), kTol);
    }
  }
}

// Swapping two activation vectors must swap the two output rows: catches a kernel that mixes up b.
TEST_F(GemvBatchedTest, NegativeControlSwappedBatchRowsFail) {
  const Problem p(1000, 4097, 2, 4100, 7);
  GemvWeight w;
  gemv_batched_prepack(p.d_w, p.N, p.K, &w, nullptr);
  // X with its two rows swapped: the check against the unswapped reference must fail.
  float* d_swapped = nullptr;
  CUDA_CHECK(cudaMalloc(&d_swapped, p.x.size() * 4));
  CUDA_CHECK(cudaMemcpy(d_swapped, p.d_x + p.ldx, size_t(p.ldx) * 4, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaMemcpy(d_swapped + p.ldx, p.d_x, size_t(p.ldx) * 4, cudaMemcpyDeviceToDevice));
  const double good = run_poisoned(p, p.N, [&](float* y) { gemv_batched_launch(w, 2, p.d_x, p.ldx, y, p.N, nullptr); });
  const double broken =
      run_poisoned(p, p.N, [&](float* y) { gemv_batched_launch(w, 2, d_swapped, p.ldx, y, p.N, nullptr); });
  cudaFree(d_swapped);
  gemv_free(&w);
  EXPECT_LE(good, kTol);
  EXPECT_GT(broken, 0.1) << "swapped batch rows passed the check: the check is too weak";
  std::cout << "[ batched ] swapped rows: relative L2 error " << broken << " (correct: " << good << ")\n";
}

TEST_F(GemvBatchedTest, RejectsUnsupportedBatchAndLayout) {
  const Problem p(16, 16, 1, 16, 3);
  GemvWeight w;
  gemv_batched_prepack(p.d_w, p.N, p.K, &w, nullptr);
  float* d_y = nullptr;
  CUDA_CHECK(cudaMalloc(&d_y, 16 * 4 * 4));
  EXPECT_THROW(gemv_batched_launch(w, 0, p.d_x, 16, d_y, 16, nullptr), Error);
  EXPECT_THROW(gemv_batched_launch(w, kGemvMaxBatch + 1, p.d_x, 16, d_y, 16, nullptr), Error);
  EXPECT_THROW(gemv_batched_launch(w, 1, p.d_x, 8, d_y, 16, nullptr), Error);  // ldx < K
  GemvWeight short_pitch = w;
  short_pitch.ld = 15;  // row pitch below K
  EXPECT_THROW(gemv_batched_launch(short_pitch, 1, p.d_x, 16, d_y, 16, nullptr), Error);
  GemvWeight unpadded = w;
  unpadded.ld = 13;
  EXPECT_THROW(gemv_rows_per_warp_launch(unpadded, p.d_x, d_y, nullptr), Error);
  cudaFree(d_y);
  gemv_free(&w);
}

}  // namespace
}  // namespace llm
