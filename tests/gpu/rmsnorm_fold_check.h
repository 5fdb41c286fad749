// The RMSNorm fold's epilogue (kernels/gemv/gemv_epilogue.h) checked on one GEMV, for the BF16 and the quantized
// mapping tests alike: as a producer (y += W x, then xg = g * y and 1 / rms(y) from the block sums: against FP64,
// xg's guards poisoned, the arrival counter re-armed, the same bits on a second launch) and as a consumer
// (y = s * W x).
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
  float *d_g = nullptr, *d_xg_buf = nullptr, *d_inv = nullptr, *d_partials = nullptr, *d_scale = nullptr;
  unsigned* d_arrivals = nullptr;
  CUDA_CHECK(cudaMalloc(&d_g, size_t(N) * 4));
  CUDA_CHECK(cudaMalloc(&d_xg_buf, (size_t(N) + 2 * kGuard) * 4));
  CUDA_CHECK(cudaMalloc(&d_inv, 4));
  CUDA_CHECK(cudaMalloc(&d_partials, size_t(llm::kGemvEpiloguePartials) * 4));
  CUDA_CHECK(cudaMalloc(&d_arrivals, 4));
  CUDA_CHECK(cudaMalloc(&d_scale, 4));
  CUDA_CHECK(cudaMemcpy(d_g, gains.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(d_arrivals, 0, 4));
  float* d_xg = d_xg_buf + kGuard;

  llm::GemvEpilogue prod;
  prod.norm_w = d_g;
  prod.xg = d_xg;
  prod.inv = d_inv;
  prod.partials = d_partials;
  prod.arrivals = d_arrivals;
  prod.eps = eps;

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

  std::vector<float> y_first, xg_first;
  float inv_first = 0.0f;
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "producer, first launch" : "producer, second launch (counter re-armed)");
    CUDA_CHECK(cudaMemcpyAsync(d_y, y0.data(), size_t(N) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(d_xg_buf, 0xFF, (size_t(N) + 2 * kGuard) * 4, stream));  // NaN, guards included
    CUDA_CHECK(cudaMemsetAsync(d_inv, 0xFF, 4, stream));
    launch(d_y, true, prod);
    std::vector<float> y(static_cast<size_t>(N)), xg_buf(size_t(N) + 2 * kGuard);
    float inv = 0.0f;
    unsigned arrivals = 1;
    CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, size_t(N) * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(xg_buf.data(), d_xg_buf, xg_buf.size() * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(&inv, d_inv, 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(&arrivals, d_arrivals, 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const float* xg = xg_buf.data() + kGuard;
    EXPECT_LE(fold_rel_l2(y.data(), want_y, scale), tol) << "y += W x";
    EXPECT_LE(fold_rel_l2(xg, want_xg, xg_scale), tol) << "xg = g * y";
    EXPECT_LE(std::fabs(double(inv) - want_inv) / want_inv, tol) << "1 / rms: " << inv << " want " << want_inv;
    EXPECT_EQ(arrivals, 0u) << "the arrival counter must be re-armed for the next launch";
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
      inv_first = inv;
    } else {
      EXPECT_EQ(std::memcmp(y.data(), y_first.data(), size_t(N) * 4), 0) << "y differs between launches";
      EXPECT_EQ(std::memcmp(xg, xg_first.data(), size_t(N) * 4), 0) << "xg differs between launches";
      EXPECT_EQ(std::memcmp(&inv, &inv_first, 4), 0) << "1 / rms differs between launches (block order)";
    }
  }

  {
    SCOPED_TRACE("consumer: y = s * W x");
    const float s = 0.37f;
    llm::GemvEpilogue cons;
    cons.scale = d_scale;
    CUDA_CHECK(cudaMemcpyAsync(d_scale, &s, 4, cudaMemcpyHostToDevice, stream));
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
  cudaFree(d_inv);
  cudaFree(d_partials);
  cudaFree(d_arrivals);
  cudaFree(d_scale);
}

}  // namespace llm_test
