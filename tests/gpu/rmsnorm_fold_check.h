// The RMSNorm fold's epilogue (kernels/gemv/gemv_epilogue.h) checked on one GEMV, for the BF16 and the quantized
// mapping tests alike: as a producer (y += W x, then xg = g * y and its block sums, whose 1 / rms is checked against
// FP64; xg's guards and the sums past the block count poisoned; the same bits on a second launch) and as a consumer
// (y = s * W x, s from one, the producer's, or 300 block sums).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/counter_rng.h"
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv_epilogue.h"

namespace llm_test {

// ||got - want|| / ||want||, with a floor from `scale` (sum |terms| per element) as the mapping tests use.
inline double fold_rel_l2(const float* got, const std::vector<double>& want, const std::vector<double>& scale) {
  double num = 0.0, den = 0.0, floor = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
    floor += 1e-4 * scale[i] * scale[i];
  }
  den = std::max(den, floor);
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// launch(y, accumulate, ep) runs the GEMV under test into y [N] on `stream`; dot = W x in FP64 (what the mapping
// computes, its own activations included), y0 the residual, scale the error scale per row (sum |W x| + |y0|).
using FoldLaunch = std::function<void(float* y, bool accumulate, const llm::GemvEpilogue& ep)>;

inline void check_rmsnorm_fold(int N, const std::vector<double>& dot, const std::vector<float>& y0,
                               const std::vector<double>& scale, float* d_y, cudaStream_t stream, double tol,
                               uint64_t seed, const FoldLaunch& launch) {
  constexpr int kGuard = 32;
  const float eps = 1e-5f;
  std::vector<float> gains(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) gains[size_t(i)] = llm::rng_value(seed, 7, uint64_t(i), 0.5f, 1.5f);
  float *d_g = nullptr, *d_xg_buf = nullptr, *d_sums = nullptr;
  unsigned* d_count = nullptr;
  const size_t sums_n = size_t(llm::kGemvEpiloguePartials);
  CUDA_CHECK(cudaMalloc(&d_g, size_t(N) * 4));
  CUDA_CHECK(cudaMalloc(&d_xg_buf, (size_t(N) + 2 * kGuard) * 4));
  CUDA_CHECK(cudaMalloc(&d_sums, sums_n * 4));
  CUDA_CHECK(cudaMalloc(&d_count, 4));
  CUDA_CHECK(cudaMemcpy(d_g, gains.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
  float* d_xg = d_xg_buf + kGuard;

  llm::GemvEpilogue prod;
  prod.norm_w = d_g;
  prod.xg = d_xg;
  prod.sums = d_sums;
  prod.count = d_count;

  // The FP64 reference of the producer.
  std::vector<double> want_y(static_cast<size_t>(N)), want_xg(static_cast<size_t>(N)), xg_scale(static_cast<size_t>(N));
  double ss = 0.0;
  for (int i = 0; i < N; ++i) {
    want_y[size_t(i)] = double(y0[size_t(i)]) + dot[size_t(i)];
    want_xg[size_t(i)] = double(gains[size_t(i)]) * want_y[size_t(i)];
    xg_scale[size_t(i)] = double(gains[size_t(i)]) * scale[size_t(i)];
    ss += want_y[size_t(i)] * want_y[size_t(i)];
  }
  const double want_inv = 1.0 / std::sqrt(ss / double(N) + double(eps));

  std::vector<float> y_first, xg_first, sums_first;
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "producer, first launch" : "producer, second launch (same bits)");
    CUDA_CHECK(cudaMemcpyAsync(d_y, y0.data(), size_t(N) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(d_xg_buf, 0xFF, (size_t(N) + 2 * kGuard) * 4, stream));  // NaN, guards included
    CUDA_CHECK(cudaMemsetAsync(d_sums, 0xFF, sums_n * 4, stream));
    CUDA_CHECK(cudaMemsetAsync(d_count, 0xFF, 4, stream));
    launch(d_y, true, prod);
    std::vector<float> y(static_cast<size_t>(N)), xg_buf(size_t(N) + 2 * kGuard), sums(sums_n);
    unsigned count = 0;
    CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, size_t(N) * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(xg_buf.data(), d_xg_buf, xg_buf.size() * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(sums.data(), d_sums, sums_n * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(&count, d_count, 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const float* xg = xg_buf.data() + kGuard;
    EXPECT_LE(fold_rel_l2(y.data(), want_y, scale), tol) << "y += W x";
    EXPECT_LE(fold_rel_l2(xg, want_xg, xg_scale), tol) << "xg = g * y";
    ASSERT_GE(count, 1u) << "the producer's block count";
    ASSERT_LE(count, unsigned(sums_n)) << "the producer's block count";
    const float inv = llm::gemv_norm_scale([&](unsigned i) { return sums[i]; }, count, N, eps);
    EXPECT_LE(std::fabs(double(inv) - want_inv) / want_inv, tol) << "1 / rms from the " << count << " block sums: "
                                                                 << inv << " want " << want_inv;
    for (size_t i = count; i < sums_n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &sums[i], 4);
      if (bits != 0xFFFFFFFFu) {
        ADD_FAILURE() << "block sum " << i << " written past the block count " << count;
        break;
      }
    }
    for (int i = 0; i < kGuard; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &xg_buf[size_t(i)], 4);
      std::memcpy(&b, &xg_buf[size_t(kGuard + N + i)], 4);
      if (a != 0xFFFFFFFFu || b != 0xFFFFFFFFu) {
        ADD_FAILURE() << "write outside xg[0, " << N << ")";
        break;
      }
    }
    if (run == 0) {
      y_first = y;
      xg_first.assign(xg, xg + N);
      sums_first.assign(sums.begin(), sums.begin() + count);
    } else {
      EXPECT_EQ(std::memcmp(y.data(), y_first.data(), size_t(N) * 4), 0) << "y differs between launches";
      EXPECT_EQ(std::memcmp(xg, xg_first.data(), size_t(N) * 4), 0) << "xg differs between launches";
      ASSERT_EQ(size_t(count), sums_first.size());
      EXPECT_EQ(std::memcmp(sums.data(), sums_first.data(), size_t(count) * 4), 0) << "block sums differ";
    }
  }

  // The consumer, y = s * W x, with s from block sums: one sum (the embedding's producer), the producer's own, and
  // 300 sums of random sizes (not a multiple of 8): s bit for bit gemv_norm_scale's on the host (its one order).
  std::vector<std::vector<float>> cases = {{float(ss)}, sums_first, {}};
  for (int i = 0; i < 300; ++i) cases.back().push_back(float(ss / 300.0) * llm::rng_value(seed, 9, uint64_t(i), 1.0f, 0.5f));
  const int norm_n = N;
  for (const std::vector<float>& sums : cases) {
    SCOPED_TRACE("consumer: y = s * W x, s from " + std::to_string(sums.size()) + " block sums");
    const unsigned count = unsigned(sums.size());
    CUDA_CHECK(cudaMemcpyAsync(d_sums, sums.data(), sums.size() * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(d_count, &count, 4, cudaMemcpyHostToDevice, stream));
    const float s = llm::gemv_norm_scale([&](unsigned i) { return sums[i]; }, count, norm_n, eps);
    llm::GemvEpilogue cons;
    cons.scale_sums = d_sums;
    cons.scale_count = d_count;
    cons.norm_n = norm_n;
    cons.eps = eps;
    CUDA_CHECK(cudaMemsetAsync(d_y, 0xFF, size_t(N) * 4, stream));
    launch(d_y, false, cons);
    std::vector<float> y(static_cast<size_t>(N));
    CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, size_t(N) * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> want(static_cast<size_t>(N)), sc(static_cast<size_t>(N));
    for (int i = 0; i < N; ++i) {
      want[size_t(i)] = double(s) * dot[size_t(i)];
      sc[size_t(i)] = double(s) * scale[size_t(i)];
    }
    EXPECT_LE(fold_rel_l2(y.data(), want, sc), tol);
  }
  cudaFree(d_g);
  cudaFree(d_xg_buf);
  cudaFree(d_sums);
  cudaFree(d_count);
}

}  // namespace llm_test
