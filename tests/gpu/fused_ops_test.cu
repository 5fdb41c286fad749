// The fused decode ops of kernels/ops/ops.h (rope_kv_store, swiglu_fused) against the separate ops they replace (rope +
// kv_store, swiglu; those are checked against CPU references in ops_test.cu): bit-identical results, and cache rows
// outside the written range left untouched. Skips with "no CUDA device" where there is none.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend.h"  // cuda_device_available
#include "kernels/cuda_check.h"
#include "kernels/ops/ops.h"

namespace llm {
namespace {

template <typename T>
T* device_copy(const std::vector<T>& v) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// GQA shape (8 query heads over 2 KV heads, head_dim 16), 1 token (decode) and 3 tokens (prefill) at position 5.
TEST(FusedOps, RopeKvStoreEqualsRopeThenKvStore) {
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int n_heads = 8, n_kv = 2, hd = 16, ctx = 12, pos0 = 5, kv_dim = n_kv * hd;
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = 1.0f / float(std::pow(10000.0, 2.0 * i / hd));
  for (int n : {1, 3}) {
    SCOPED_TRACE(n);
    const auto q = random_floats(size_t(n) * n_heads * hd, 1, 2.0f);
    const auto k = random_floats(size_t(n) * kv_dim, 2, 2.0f);
    const auto v = random_floats(size_t(n) * kv_dim, 3, 2.0f);
    const std::vector<uint16_t> poison(size_t(ctx) * kv_dim, 0xFFFF);
    float *d_inv = device_copy(inv), *q1 = device_copy(q), *q2 = device_copy(q), *k1 = device_copy(k),
          *k2 = device_copy(k), *v1 = device_copy(v);
    uint16_t *kc1 = device_copy(poison), *vc1 = device_copy(poison), *kc2 = device_copy(poison),
             *vc2 = device_copy(poison);
    int* d_pos = device_copy(std::vector<int>{pos0});

    rope(q1, k1, d_inv, d_pos, n, n_heads, n_kv, hd, nullptr);
    kv_store(k1, v1, kc1, vc1, d_pos, n, kv_dim, nullptr);
    rope_kv_store(q2, k2, v1, d_inv, d_pos, n, n_heads, n_kv, hd, kc2, vc2, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());

    EXPECT_TRUE(same_bits(host_copy(q1, q.size()), host_copy(q2, q.size()))) << "rotated q";
    EXPECT_FALSE(same_bits(host_copy(q2, q.size()), q)) << "q was not rotated at all";
    EXPECT_EQ(host_copy(kc1, poison.size()), host_copy(kc2, poison.size())) << "k cache";
    EXPECT_EQ(host_copy(vc1, poison.size()), host_copy(vc2, poison.size())) << "v cache";
    // Rows outside pos0 .. pos0 + n - 1 keep the poison; the written ones do not.
    const auto kc = host_copy(kc2, poison.size());
    for (int r = 0; r < ctx; ++r) {
      const bool written = r >= pos0 && r < pos0 + n;
      int untouched = 0;
      for (int c = 0; c < kv_dim; ++c) untouched += kc[size_t(r) * kv_dim + c] == 0xFFFF;
      EXPECT_EQ(untouched, written ? 0 : kv_dim) << "cache row " << r;
    }
    for (void* p : {static_cast<void*>(d_inv), static_cast<void*>(q1), static_cast<void*>(q2),
                    static_cast<void*>(k1), static_cast<void*>(k2), static_cast<void*>(v1), static_cast<void*>(kc1),
                    static_cast<void*>(vc1), static_cast<void*>(kc2), static_cast<void*>(vc2),
                    static_cast<void*>(d_pos)})
      cudaFree(p);
  }
}

TEST(FusedOps, SwigluFusedReadsTheTwoHalves) {
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 1000;
  const auto gu = random_floats(2 * n, 4, 4.0f);
  float* d_gu = device_copy(gu);
  float* d_a = device_copy(std::vector<float>(n, 0.0f));
  float* d_b = device_copy(std::vector<float>(n, 0.0f));
  swiglu(d_gu, d_gu + n, d_a, n, nullptr);
  swiglu_fused(d_gu, d_b, n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto a = host_copy(d_a, n), b = host_copy(d_b, n);
  EXPECT_TRUE(same_bits(a, b));
  // One element by hand: silu(g) * u with g = gate_up[7], u = gate_up[n + 7].
  const double g = gu[7], u = gu[n + 7];
  EXPECT_NEAR(b[7], g / (1.0 + std::exp(-g)) * u, 1e-5 * (1.0 + std::fabs(g * u)));
  cudaFree(d_gu);
  cudaFree(d_a);
  cudaFree(d_b);
}

}  // namespace
}  // namespace llm
