// The RMSNorm fold's epilogue (kernels/gemv/gemv_epilogue.h) checked on one GEMV, for the BF16 and the quantized
// mapping tests alike, against FP64: as a producer (y += W x, then xg = g * y) and as a consumer (y = W x / rms(v),
// every block computing 1 / rms(v) itself).
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

// Producer: y += W x and xg = g * y (xg's guards poisoned, the same bits on a second launch). Consumer: y = W x / rms(v)
// for a residual v of awkward lengths (1, 33, 1000, 4097: each block sums v's squares itself), also the same bits twice.
inline void check_rmsnorm_fold(int N, const std::vector<double>& dot, const std::vector<float>& y0,
                               const std::vector<double>& scale, float* d_y, cudaStream_t stream, double tol,
                               uint64_t seed, const FoldLaunch& launch) {
  constexpr int kGuard = 32;
  const float eps = 1e-5f;
  std::vector<float> gains(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) gains[size_t(i)] = llm::rng_value(seed, 7, uint64_t(i), 0.5f, 1.5f);
  float *d_g = nullptr, *d_xg_buf = nullptr, *d_v = nullptr;
  constexpr int kMaxV = 4097;
  CUDA_CHECK(cudaMalloc(&d_g, size_t(N) * 4));
  CUDA_CHECK(cudaMalloc(&d_xg_buf, (size_t(N) + 2 * kGuard) * 4));
  CUDA_CHECK(cudaMalloc(&d_v, size_t(kMaxV) * 4));
  CUDA_CHECK(cudaMemcpy(d_g, gains.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
  float* d_xg = d_xg_buf + kGuard;

  llm::GemvEpilogue prod;
  prod.norm_w = d_g;
  prod.xg = d_xg;

  // The FP64 reference of the producer.
  std::vector<double> want_y(static_cast<size_t>(N)), want_xg(static_cast<size_t>(N)), xg_scale(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) {
    want_y[size_t(i)] = double(y0[size_t(i)]) + dot[size_t(i)];
    want_xg[size_t(i)] = double(gains[size_t(i)]) * want_y[size_t(i)];
    xg_scale[size_t(i)] = double(gains[size_t(i)]) * scale[size_t(i)];
  }

  std::vector<float> y_first, xg_first;
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "producer, first launch" : "producer, second launch");
    CUDA_CHECK(cudaMemcpyAsync(d_y, y0.data(), size_t(N) * 4, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemsetAsync(d_xg_buf, 0xFF, (size_t(N) + 2 * kGuard) * 4, stream));  // NaN, guards included
    launch(d_y, true, prod);
    std::vector<float> y(static_cast<size_t>(N)), xg_buf(size_t(N) + 2 * kGuard);
    CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, size_t(N) * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(xg_buf.data(), d_xg_buf, xg_buf.size() * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const float* xg = xg_buf.data() + kGuard;
    EXPECT_LE(fold_rel_l2(y.data(), want_y, scale), tol) << "y += W x";
    EXPECT_LE(fold_rel_l2(xg, want_xg, xg_scale), tol) << "xg = g * y";
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
    } else {
      EXPECT_EQ(std::memcmp(y.data(), y_first.data(), size_t(N) * 4), 0) << "y differs between launches";
      EXPECT_EQ(std::memcmp(xg, xg_first.data(), size_t(N) * 4), 0) << "xg differs between launches";
    }
  }

  for (int vn : {1, 33, 1000, kMaxV}) {
    SCOPED_TRACE("consumer: y = W x / rms(v), v of " + std::to_string(vn));
    std::vector<float> v(static_cast<size_t>(vn));
    double ss = 0.0;
    for (int i = 0; i < vn; ++i) {
      v[size_t(i)] = llm::rng_value(seed, 8, uint64_t(i), 0.0f, 3.0f);
      ss += double(v[size_t(i)]) * double(v[size_t(i)]);
    }
    const double s = 1.0 / std::sqrt(ss / double(vn) + double(eps));
    CUDA_CHECK(cudaMemcpyAsync(d_v, v.data(), size_t(vn) * 4, cudaMemcpyHostToDevice, stream));
    llm::GemvEpilogue cons;
    cons.norm_x = d_v;
    cons.norm_n = vn;
    cons.eps = eps;
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      CUDA_CHECK(cudaMemsetAsync(d_y, 0xFF, size_t(N) * 4, stream));
      launch(d_y, false, cons);
      std::vector<float> y(static_cast<size_t>(N));
      CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, size_t(N) * 4, cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<double> want(static_cast<size_t>(N)), sc(static_cast<size_t>(N));
      for (int i = 0; i < N; ++i) {
        want[size_t(i)] = s * dot[size_t(i)];
        sc[size_t(i)] = s * scale[size_t(i)];
      }
      EXPECT_LE(fold_rel_l2(y.data(), want, sc), tol);
      if (run == 0)
        first = y;
      else
        EXPECT_EQ(std::memcmp(y.data(), first.data(), size_t(N) * 4), 0) << "consumer y differs between launches";
    }
  }
  cudaFree(d_g);
  cudaFree(d_xg_buf);
  cudaFree(d_v);
}

}  // namespace llm_test
