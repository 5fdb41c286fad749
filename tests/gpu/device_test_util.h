// Shared by the device-op tests (ops_test.cu, attention_test.cu): the skip without a device, an owning device array
// that can be poisoned (all-ones bits: NaN as FP32 and as BF16), random inputs and the relative L2 error against a
// double reference.
#pragma once
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/backend.h"  // cuda_device_available
#include "kernels/cuda_check.h"
#include "models/config.h"  // ModelConfig: llama3_rope_config

#define SKIP_WITHOUT_CUDA()                                              \
  do {                                                                   \
    if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace llm {
namespace gpu_test {

// Owning device array of n elements.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& v) {
    ASSERT_LE(v.size(), n_);
    CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void poison() { CUDA_CHECK(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline void sync_and_check() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

inline std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> random_bf16(size_t n, float stddev, uint32_t seed) {
  std::vector<float> f = random_normal(n, stddev, seed);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(f[i]);
  return v;
}

// ||a - b|| / ||b|| in double; infinite if a holds a non-finite value.
inline double rel_l2(const float* a, const double* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A config whose RoPE frequencies (rope_inv_freq) are Llama 3's: theta 500000 with its long-context scaling, at
// head_dim hd; the RoPE kernels' tests rotate with it.
inline ModelConfig llama3_rope_config(int hd) {
  ModelConfig c;
  c.head_dim = hd;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

}  // namespace gpu_test
}  // namespace llm
