// Every registered GEMV mapping against an FP64 CPU reference on the same BF16-rounded inputs (fresh random inputs
// each run, seed printed), plus negative controls showing the check does fail on a broken kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>

#include "core/gemv_table.h"  // gemv_mapping_names
#include "engine/backend.h"  // cuda_device_available
#include "engine/gemv_choice.h"  // gemv_plan: a name's BF16 form
#include "core/counter_rng.h"  // rng_value, rng_mix: the random inputs
#include "random_util.h"       // test_seed, parallel_for
#include "rmsnorm_fold_check.h"  // check_rmsnorm_fold
#include "core/dtype.h"        // f32_to_bf16 / bf16_to_f32
#include "kernels/cuda_check.h"
#include "kernels/gemv/gemv.h"

namespace llm {
namespace {

// Outputs are FP32 sums of K <= 4104 products of BF16 values: FP32 accumulation error stays near 1e-6 relative.
constexpr double kTol = 1e-5;
constexpr size_t kGuard = 64;  // floats of poison on each side of x and y (keeps x and y 16-byte aligned)

// Fresh each run; LLM_TEST_SEED=<n> reproduces a failing run (tests/gpu/random_util.h).
using llm_test::parallel_for;
using llm_test::test_seed;

// y = W x on the host, in FP64, from the same BF16 bits the device sees. W [N, K] row-major, x [K].
// abs_out (optional): sum_k |W[n, k] x[k]|, the scale FP32 rounding errors grow with.
std::vector<double> reference_gemv(const std::vector<uint16_t>& w, const std::vector<float>& x, int N, int K,
                                   std::vector<double>* abs_out = nullptr) {
  std::vector<double> y(static_cast<size_t>(N));
  if (abs_out) abs_out->assign(size_t(N), 0.0);
  parallel_for(size_t(N), [&](size_t b, size_t e) {
    for (size_t n = b; n < e; ++n) {
      const uint16_t* row = w.data() + n * size_t(K);
      double s = 0.0, a = 0.0;
      for (int k = 0; k < K; ++k) {
        const double t = double(bf16_to_f32(row[k])) * double(x[size_t(k)]);
        s += t;
        a += std::fabs(t);
      }
      y[n] = s;
      if (abs_out) (*abs_out)[n] = a;
    }
  });
  return y;
}

// ||got - want|| / ||want|| (absolute where want is all zeros). NaN anywhere gives NaN, which fails any <= check.
// scale (optional, sum_k |w x| per output): the denominator is at least 1e-4 ||scale||^2, so a few outputs that
// cancel to almost zero (N = 1 makes that likely) do not turn FP32 rounding into a spurious failure; at typical
// shapes the floor is far below ||want||^2 and changes nothing.
double relative_l2_error(const float* got, const std::vector<double>& want, const std::vector<double>* scale = nullptr) {
  double num = 0.0, den = 0.0, floor = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
    if (scale) floor += 1e-4 * (*scale)[i] * (*scale)[i];
  }
  den = std::max(den, floor);
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// One problem: random BF16 W [N, K] and x [K] (x BF16-rounded too, so cuBLAS's BF16 copy of x is exact), the FP64
// reference, and device copies with NaN-poisoned guards around x (a kernel reading past K turns the output into NaN).
struct Problem {
  int N = 0, K = 0;
  std::vector<uint16_t> w;            // [N, K] BF16 bits
  std::vector<float> x, y0;           // x [K], y0 [N] (the accumulate test's starting y)
  std::vector<double> ref, ref_acc;   // W x and y0 + W x, FP64
  std::vector<double> ref_abs;        // sum_k |W x| per output (error scale)
  uint16_t* d_w = nullptr;            // [N, K] row-major
  float* d_xbuf = nullptr;            // [kGuard + K + kGuard + 1]
  float* d_ybuf = nullptr;            // [kGuard + N + kGuard + 1]

  Problem(int n, int k) : N(n), K(k) {
    const uint64_t seed = rng_mix(test_seed() ^ (uint64_t(N) << 24) ^ uint64_t(K));
    w.resize(size_t(N) * size_t(K));
    parallel_for(w.size(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) w[i] = f32_to_bf16(rng_value(seed, 0, i, 0.0f, 1.0f));
    });
    x.resize(size_t(K));
    for (int i = 0; i < K; ++i) x[size_t(i)] = round_bf16(rng_value(seed, 1, uint64_t(i), 0.0f, 1.0f));
    y0.resize(size_t(N));
    for (int i = 0; i < N; ++i) y0[size_t(i)] = rng_value(seed, 2, uint64_t(i), 0.0f, 4.0f);
    ref = reference_gemv(w, x, N, K, &ref_abs);
    ref_acc.resize(size_t(N));
    for (int i = 0; i < N; ++i) ref_acc[size_t(i)] = double(y0[size_t(i)]) + ref[size_t(i)];

    CUDA_CHECK(cudaMalloc(&d_w, w.size() * 2));
    CUDA_CHECK(cudaMemcpy(d_w, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&d_xbuf, (kGuard + size_t(K) + kGuard + 1) * 4));
    upload_x(0, nullptr);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
    CUDA_CHECK(cudaMalloc(&d_ybuf, (kGuard + size_t(N) + kGuard + 1) * 4));
  }
  ~Problem() {
    cudaFree(d_w);
    cudaFree(d_xbuf);
    cudaFree(d_ybuf);
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  size_t ybuf_floats() const { return kGuard + size_t(N) + kGuard + 1; }
  // x at d_x(offset), NaN everywhere else in the buffer (a read past either end of x poisons the output).
  void upload_x(int offset, cudaStream_t stream) const {
    xbuf_host.assign(kGuard + size_t(K) + kGuard + 1, std::nanf(""));
    std::copy(x.begin(), x.end(), xbuf_host.begin() + kGuard + offset);
    CUDA_CHECK(cudaMemcpyAsync(d_xbuf, xbuf_host.data(), xbuf_host.size() * 4, cudaMemcpyHostToDevice, stream));
  }
  mutable std::vector<float> xbuf_host;
  // offset 1 gives 4-byte-aligned (not 16-byte-aligned) x and y.
  const float* d_x(int offset) const { return d_xbuf + kGuard + offset; }
  float* d_y(int offset) const { return d_ybuf + kGuard + offset; }
};

// Runs one launch into a y poisoned with 0xFF bytes (NaN) or preset to y0, and returns its relative L2 error against
// the reference. Fails the test if anything outside y[0, N) changed.
template <typename Launch>
double run_and_measure(const Problem& p, bool accumulate, int offset, cudaStream_t stream, Launch launch) {
  p.upload_x(offset, stream);
  CUDA_CHECK(cudaMemsetAsync(p.d_ybuf, 0xFF, p.ybuf_floats() * 4, stream));
  if (accumulate)
    CUDA_CHECK(cudaMemcpyAsync(p.d_y(offset), p.y0.data(), size_t(p.N) * 4, cudaMemcpyHostToDevice, stream));
  launch(p.d_x(offset), p.d_y(offset));
  std::vector<float> ybuf(p.ybuf_floats());
  CUDA_CHECK(cudaMemcpyAsync(ybuf.data(), p.d_ybuf, ybuf.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < ybuf.size(); ++i) {
    const bool inside = i >= kGuard + size_t(offset) && i < kGuard + size_t(offset) + size_t(p.N);
    uint32_t bits;
    std::memcpy(&bits, &ybuf[i], 4);
    if (!inside && bits != 0xFFFFFFFFu) {
      ADD_FAILURE() << "write outside y[0, " << p.N << "): element " << int64_t(i) - int64_t(kGuard + offset);
      break;
    }
  }
  return relative_l2_error(ybuf.data() + kGuard + offset, accumulate ? p.ref_acc : p.ref, &p.ref_abs);
}

class GemvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    CUDA_CHECK(cudaStreamCreate(&stream_));
    gemv_context_init(&ctx_, stream_, 8192);
  }
  void TearDown() override {
    if (stream_ == nullptr) return;
    gemv_context_destroy(&ctx_);
    cudaStreamDestroy(stream_);
  }

  // Every registered mapping on one problem: y = W x into poisoned y, then y += W x.
  void check_all_mappings(const Problem& p, int offset) {
    for (const GemvMapping* m : gemv_mappings()) {
      SCOPED_TRACE(std::string("mapping ") + m->name + ", N=" + std::to_string(p.N) + " K=" +
                   std::to_string(p.K) + (offset ? ", misaligned x and y" : ""));
      GemvWeight w;
      m->prepack(p.d_w, p.N, p.K, &w, stream_);
      ASSERT_EQ(w.N, p.N);
      ASSERT_EQ(w.K, p.K);
      ASSERT_GE(w.bytes, w.useful_bytes());
      for (bool accumulate : {false, true}) {
        const double err = run_and_measure(p, accumulate, offset, stream_, [&](const float* x, float* y) {
          m->launch(w, x, y, accumulate, {}, &ctx_);
        });
        EXPECT_LE(err, kTol) << (accumulate ? "y += W x" : "y = W x") << ": relative L2 error " << err;
      }
      gemv_free(&w);
      EXPECT_EQ(w.data, nullptr);
    }
  }

  cudaStream_t stream_ = nullptr;
  GemvContext ctx_;
};

// ---- every mapping, every shape -------------------------------------------------------------------------------

class GemvShapeTest : public GemvTest, public ::testing::WithParamInterface<std::tuple<int, int>> {};

TEST_P(GemvShapeTest, MatchesFp64Reference) {
  const Problem p(std::get<0>(GetParam()), std::get<1>(GetParam()));
  check_all_mappings(p, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvShapeTest,
                         ::testing::Combine(::testing::Values(1, 7, 1000, 4096, 128256),
                                            ::testing::Values(1, 13, 64, 172, 200, 4096, 4097, 4104)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "_K" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The RMSNorm fold (kernels/gemv/gemv_epilogue.h) in every mapping that runs it, as producer and consumer, on awkward
// shapes (one row; N and K not multiples of 32; split-K plans; more rows than one wave); cuBLAS refuses it by name.
TEST_F(GemvTest, RmsNormFoldEpilogue) {
  const std::vector<std::pair<int, int>> shapes = {{1, 8}, {7, 33}, {1000, 200}, {1024, 4096}, {4097, 4104}};
  for (const auto& [n, k] : shapes) {
    const Problem p(n, k);
    std::vector<double> scale(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) scale[size_t(i)] = p.ref_abs[size_t(i)] + std::fabs(double(p.y0[size_t(i)]));
    for (const GemvMapping* m : gemv_mappings()) {
      SCOPED_TRACE(std::string("mapping ") + m->name + ", N=" + std::to_string(n) + " K=" + std::to_string(k));
      GemvWeight w;
      m->prepack(p.d_w, p.N, p.K, &w, stream_);
      p.upload_x(0, stream_);
      if (!gemv_row(m->form)->bf16_fuses_norm) {
        GemvEpilogue ep;
        float s = 1.0f;
        ep.scale = &s;
        EXPECT_THROW(m->launch(w, p.d_x(0), p.d_y(0), false, ep, &ctx_), Error);
      } else {
        llm_test::check_rmsnorm_fold(n, p.ref, p.y0, scale, p.d_y(0), stream_, kTol, test_seed() + uint64_t(n),
                                     [&](float* y, bool acc, const GemvEpilogue& ep) {
                                       m->launch(w, p.d_x(0), y, acc, ep, &ctx_);
                                     });
      }
      gemv_free(&w);
    }
  }
}

// x and y at 4-byte (not 16-byte) alignment, as a slice of a larger activation buffer would be.
TEST_F(GemvTest, MisalignedXAndY) {
  const std::vector<std::pair<int, int>> shapes = {{1000, 200}, {7, 4097}, {1024, 4096}};
  for (const auto& [n, k] : shapes) {
    const Problem p(n, k);
    check_all_mappings(p, 1);
  }
}

// Same inputs, same bits: split-K partials are combined in a fixed order, never with atomics.
TEST_F(GemvTest, Deterministic) {
  const Problem p(1024, 4096);
  for (const GemvMapping* m : gemv_mappings()) {
    SCOPED_TRACE(m->name);
    GemvWeight w;
    m->prepack(p.d_w, p.N, p.K, &w, stream_);
    std::vector<float> first(size_t(p.N)), again(size_t(p.N));
    for (std::vector<float>* out : {&first, &again}) {
      CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(p.N) * 4, stream_));
      m->launch(w, p.d_x(0), p.d_y(0), false, {}, &ctx_);
      CUDA_CHECK(cudaMemcpyAsync(out->data(), p.d_y(0), size_t(p.N) * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    EXPECT_EQ(std::memcmp(first.data(), again.data(), size_t(p.N) * 4), 0);
    gemv_free(&w);
  }
}

// Two GEMVs back to back with no sync between, the second reading the first's output (as the engine chains them),
// launched on the stream and then captured in a CUDA graph: catches a mapping that reads x before its predecessor
// has finished (warp starts early by design: PDL) and any mapping that cannot be captured.
TEST_F(GemvTest, BackToBackLaunchesSeeThePreviousOutput) {
  const int n = 4096;
  const Problem p(n, n);  // the second GEMV: W2 = p.w
  // W1 holds one 1.0 per row: mid[r] = x[(7r + 3) % n] (7 is odd, so a permutation), exact in FP32 and in BF16, so
  // the second GEMV's FP64 reference is exact too.
  auto source = [n](int r) { return int((7ll * r + 3) % n); };
  std::vector<uint16_t> w1(size_t(n) * size_t(n), 0);
  std::vector<float> mid_want(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    w1[size_t(r) * size_t(n) + size_t(source(r))] = f32_to_bf16(1.0f);
    mid_want[size_t(r)] = p.x[size_t(source(r))];
  }
  const std::vector<double> want = reference_gemv(p.w, mid_want, n, n);
  uint16_t* d_w1 = nullptr;
  float* d_mid = nullptr;
  CUDA_CHECK(cudaMalloc(&d_w1, w1.size() * 2));
  CUDA_CHECK(cudaMemcpy(d_w1, w1.data(), w1.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&d_mid, size_t(n) * 4));

  for (const GemvMapping* m : gemv_mappings()) {
    GemvWeight a, b;
    m->prepack(d_w1, n, n, &a, stream_);
    m->prepack(p.d_w, n, n, &b, stream_);
    auto both = [&] {
      m->launch(a, p.d_x(0), d_mid, false, {}, &ctx_);
      m->launch(b, d_mid, p.d_y(0), false, {}, &ctx_);
    };
    for (bool graph : {false, true}) {  // the plain run first: it creates lazy state (the cuBLAS handle)
      SCOPED_TRACE(std::string("mapping ") + m->name + (graph ? ", CUDA graph" : ", stream"));
      CUDA_CHECK(cudaMemsetAsync(d_mid, 0xFF, size_t(n) * 4, stream_));  // NaN until the first GEMV writes it
      CUDA_CHECK(cudaMemsetAsync(p.d_y(0), 0xFF, size_t(n) * 4, stream_));
      if (graph) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        both();
        CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
        CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(g));
      } else {
        both();
      }
      std::vector<float> got(static_cast<size_t>(n));
      CUDA_CHECK(cudaMemcpyAsync(got.data(), p.d_y(0), size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      const double err = relative_l2_error(got.data(), want);
      EXPECT_LE(err, kTol) << "relative L2 error " << err;
    }
    gemv_free(&a);
    gemv_free(&b);
  }
  cudaFree(d_w1);
  cudaFree(d_mid);
}

// ---- negative controls: the same check must fail on broken GEMVs -----------------------------------------------

// The "warp" mapping minus its cross-lane reduction: one warp per row, lanes along K, and lane 0's partial sum (a
// 1/32 share of the row) written as the output. W [N, ld] zero-padded, ld % 8 == 0.
__global__ void gemv_warp_without_reduction(const uint16_t* W, int64_t ld, int N, int K, const float* x, float* y) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const uint4* wrow = reinterpret_cast<const uint4*>(W + int64_t(row) * ld);
  float acc = 0.0f;
  for (int c = lane; c < int(ld / 8); c += 32) {
    const uint4 v = wrow[c];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 8; ++i) {
      const int k = c * 8 + i;
      if (k < K) acc += __uint_as_float((i % 2 ? words[i / 2] >> 16 : words[i / 2] & 0xffffu) << 16) * x[k];
    }
  }
  if (lane == 0) y[row] = acc;
}

TEST_F(GemvTest, NegativeControlMissingReductionFails) {
  const Problem p(4096, 4096);
  const GemvMapping& warp = gemv_mapping(GemvBf16Form::Warp);
  GemvWeight w;
  warp.prepack(p.d_w, p.N, p.K, &w, stream_);
  const double good = run_and_measure(p, false, 0, stream_, [&](const float* x, float* y) {
    warp.launch(w, x, y, false, {}, &ctx_);
  });
  const double broken = run_and_measure(p, false, 0, stream_, [&](const float* x, float* y) {
    gemv_warp_without_reduction<<<(p.N + 7) / 8, 256, 0, stream_>>>(w.data, w.ld, p.N, p.K, x, y);
    CUDA_CHECK_LAUNCH("gemv_warp_without_reduction");
  });
  gemv_free(&w);
  EXPECT_LE(good, kTol) << "the mapping itself must pass on this problem";
  EXPECT_GT(broken, kTol) << "a GEMV without the cross-lane reduction passed the check: the check is too weak";
  std::cout << "[ gemv    ] missing reduction: relative L2 error " << broken << " (warp: " << good << ")\n";
}

TEST_F(GemvTest, NegativeControlCublasWrongTransposeFails) {
  const Problem p(4096, 4096);  // square, so CUBLAS_OP_N is a valid call on the same memory: it computes W^T x
  const GemvMapping& cublas = gemv_mapping(GemvBf16Form::Cublas);
  GemvWeight w;
  cublas.prepack(p.d_w, p.N, p.K, &w, stream_);
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  CUBLAS_CHECK(cublasSetStream(h, stream_));
  uint16_t* d_xb = nullptr;
  CUDA_CHECK(cudaMalloc(&d_xb, size_t(p.K) * 2));
  std::vector<uint16_t> xb(size_t(p.K));
  for (int k = 0; k < p.K; ++k) xb[size_t(k)] = f32_to_bf16(p.x[size_t(k)]);  // exact: x is BF16-rounded
  CUDA_CHECK(cudaMemcpy(d_xb, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  auto gemm = [&](cublasOperation_t op) {
    return [&, op](const float*, float* y) {
      const float alpha = 1.0f, beta = 0.0f;
      CUBLAS_CHECK(cublasGemmEx(h, op, CUBLAS_OP_N, p.N, 1, p.K, &alpha, w.data, CUDA_R_16BF, int(w.ld), d_xb,
                                CUDA_R_16BF, p.K, &beta, y, CUDA_R_32F, p.N, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    };
  };
  const double good = run_and_measure(p, false, 0, stream_, gemm(CUBLAS_OP_T));
  const double broken = run_and_measure(p, false, 0, stream_, gemm(CUBLAS_OP_N));
  cublasDestroy(h);
  cudaFree(d_xb);
  gemv_free(&w);
  EXPECT_LE(good, kTol) << "CUBLAS_OP_T on the row-major weight must pass";
  EXPECT_GT(broken, kTol) << "CUBLAS_OP_N (W^T x) passed the check: the check is too weak";
  std::cout << "[ gemv    ] cuBLAS OP_N: relative L2 error " << broken << " (OP_T: " << good << ")\n";
}

// ---- registry (no device needed) ------------------------------------------------------------------------------

// A name's plan finds its kernels in the registry (gemv_mapping(plan.bf16)); an unknown name fails in gemv_plan.
TEST(GemvRegistry, FindsEveryMappingAndNamesTheKnownOnesOnError) {
  const auto& all = gemv_mappings();
  ASSERT_GE(all.size(), 7u);
  EXPECT_STREQ(gemv_default_name(), "warp-r2");
  EXPECT_EQ(&gemv_mapping(gemv_plan("").bf16), &gemv_mapping(gemv_plan("warp-r2").bf16));
  EXPECT_STREQ(gemv_mapping(gemv_plan("").bf16).name, "warp-r2");
  for (const GemvMapping* m : all) {
    EXPECT_EQ(&gemv_mapping(gemv_plan(m->name).bf16), m);
    EXPECT_GT(std::strlen(m->why()), 10u) << m->name;
    EXPECT_TRUE(m->prepack && m->launch && m->shape) << m->name;
  }
  for (const char* name : {"thread", "colmajor", "cublas", "thread-splitk", "warp-few", "warp-r2"})
    EXPECT_STREQ(gemv_mapping(gemv_plan(name).bf16).name, name) << name;
  for (const char* name : {"as-stored", "warp-dp4a"}) {  // quantized only: no BF16 kernel
    EXPECT_EQ(gemv_plan(name).bf16, GemvBf16Form::None) << name;
    EXPECT_THROW(gemv_mapping(gemv_plan(name).bf16), Error) << name;
  }
  try {
    gemv_plan("nope");
    FAIL() << "gemv_plan accepted an unknown name";
  } catch (const Error& e) {
    std::string known;  // the registry's order, the default marked, as core/gemv_table.h lists them
    for (const GemvMapping* m : all)
      known += (known.empty() ? "" : ", ") + std::string(m->name) + (m == all.front() ? " (default)" : "");
    // gemv_mapping_names() lists the registry first, then the quantized forms (core/gemv_table.h).
    EXPECT_EQ(gemv_mapping_names().rfind(known, 0), 0u) << gemv_mapping_names();
    EXPECT_EQ(std::string(e.what()), "unknown GEMV mapping 'nope' (known: " + gemv_mapping_names() + ")");
  }
}

TEST(GemvRegistry, LaunchShapesFollowTheMapping) {
  // thread and warp-few launch the same threads: one per row, so N / 32 warps.
  const GemvLaunchShape thread = gemv_mapping(GemvBf16Form::Thread).shape(4096, 4096);
  const GemvLaunchShape few = gemv_mapping(GemvBf16Form::WarpFew).shape(4096, 4096);
  EXPECT_EQ(int64_t(thread.grid) * thread.block, 4096);
  EXPECT_EQ(int64_t(few.grid) * few.block, int64_t(thread.grid) * thread.block);
  EXPECT_EQ(thread.bytes_in_flight_per_thread, 2);
  EXPECT_EQ(few.bytes_in_flight_per_thread, 128);  // 8 loads of 16 bytes
  // warp splits K when N is small: 1024 rows must not give fewer threads than 4096 rows.
  const GemvLaunchShape warp_small = gemv_mapping(GemvBf16Form::Warp).shape(1024, 4096);
  const GemvLaunchShape warp_big = gemv_mapping(GemvBf16Form::Warp).shape(4096, 4096);
  EXPECT_GE(int64_t(warp_small.grid) * warp_small.block, int64_t(warp_big.grid) * warp_big.block);
  EXPECT_GE(int64_t(warp_big.grid) * warp_big.block, 4096 * 32);  // at least a warp per row
}

}  // namespace
}  // namespace llm
