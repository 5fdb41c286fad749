// Device ops of kernels/ops.h against plain CPU references written here (double accumulation), on random inputs.
// Outputs (and scratch, and cache rows past the attended range) are poisoned with all-ones bits (NaN as FP32 and as
// BF16) before each launch, so an element a kernel forgets to write, or a row it wrongly reads, shows up.
// Every test skips with "no CUDA device" where there is none.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/backend.h"  // cuda_device_available
#include "core/dtype.h"
#include "engine/sampler.h"
#include "kernels/cuda_check.h"
#include "kernels/ops.h"
#include "models/config.h"
#include "models/tensor.h"

namespace llm {
namespace {

#define SKIP_WITHOUT_CUDA()                                    \
  do {                                                         \
    if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device";   \
  } while (0)

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

void sync_and_check() {
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> random_bf16(size_t n, float stddev, uint32_t seed) {
  std::vector<float> f = random_normal(n, stddev, seed);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(f[i]);
  return v;
}

// ||a - b|| / ||b|| in double; infinite if a holds a non-finite value.
double rel_l2(const float* a, const double* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---------------------------------------------------------------------------------------------------------------
// RMSNorm

TEST(OpsRmsnorm, MatchesCpuReference) {
  SKIP_WITHOUT_CUDA();
  const int rows = 3;
  const float eps = 1e-5f;
  for (int dim : {64, 576, 4096, 4097}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const size_t n = size_t(rows) * dim;
    std::vector<float> x = random_normal(n, 2.0f, 100 + dim);
    std::vector<float> w = random_normal(size_t(dim), 0.3f, 200 + dim);
    for (auto& v : w) v += 1.0f;
    std::vector<double> ref(n);
    for (int r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int i = 0; i < dim; ++i) ss += double(x[size_t(r) * dim + i]) * x[size_t(r) * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + eps);
      for (int i = 0; i < dim; ++i) ref[size_t(r) * dim + i] = x[size_t(r) * dim + i] * inv * w[size_t(i)];
    }
    DeviceBuffer<float> dx(x), dw(w), dout(n);
    DeviceBuffer<uint16_t> dbf(n);
    dout.poison();
    dbf.poison();
    rmsnorm(dx.get(), dw.get(), dout.get(), rows, dim, eps, nullptr);
    rmsnorm_bf16(dx.get(), dw.get(), dbf.get(), rows, dim, eps, nullptr);
    rmsnorm(dx.get(), dw.get(), dx.get(), rows, dim, eps, nullptr);  // in place (out aliases x)
    sync_and_check();
    const std::vector<float> out = dout.download(), inplace = dx.download();
    const std::vector<uint16_t> bf = dbf.download();
    // FP32 sum of squares in a different order than the double reference: a few ulp.
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out[i], ref[i], 2e-5 * std::fabs(ref[i]) + 1e-6) << "element " << i;
      ASSERT_EQ(f32_to_bits(inplace[i]), f32_to_bits(out[i])) << "in-place differs at element " << i;
      // Same FP32 value rounded to BF16 on the device and on the host (both round to nearest even).
      ASSERT_EQ(bf[i], f32_to_bf16(out[i])) << "element " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// RoPE

TEST(OpsRope, MatchesCpuReferenceWithLlama3Frequencies) {
  SKIP_WITHOUT_CUDA();
  const int n_heads = 4, n_kv_heads = 2, n_tokens = 2;
  for (int hd : {8, 64, 128}) {
    ModelConfig c;
    c.head_dim = hd;
    c.rope_theta = 500000.0f;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.0f;
    c.rope_scaling.low_freq_factor = 1.0f;
    c.rope_scaling.high_freq_factor = 4.0f;
    c.rope_scaling.original_max_position_embeddings = 8192;
    const std::vector<float> inv_freq = rope_inv_freq(c);
    DeviceBuffer<float> dfreq(inv_freq);
    for (int pos0 : {0, 1, 1000, 100000}) {
      SCOPED_TRACE("head_dim " + std::to_string(hd) + " pos0 " + std::to_string(pos0));
      const size_t nq = size_t(n_tokens) * n_heads * hd, nk = size_t(n_tokens) * n_kv_heads * hd;
      std::vector<float> q = random_normal(nq, 1.0f, 300 + hd + pos0), k = random_normal(nk, 1.0f, 400 + hd + pos0);
      // Reference: angle in FP32 exactly as the CPU backend (one rounding), then sin/cos and rotation in double.
      auto rotate = [&](const std::vector<float>& x, int heads) {
        std::vector<double> out(x.size());
        for (int t = 0; t < n_tokens; ++t)
          for (int h = 0; h < heads; ++h)
            for (int i = 0; i < hd / 2; ++i) {
              const size_t o = (size_t(t) * heads + h) * hd + 2 * i;
              const float a = float(pos0 + t) * inv_freq[size_t(i)];
              const double cs = std::cos(double(a)), sn = std::sin(double(a));
              out[o] = x[o] * cs - x[o + 1] * sn;
              out[o + 1] = x[o] * sn + x[o + 1] * cs;
            }
        return out;
      };
      const std::vector<double> rq = rotate(q, n_heads), rk = rotate(k, n_kv_heads);
      DeviceBuffer<float> dq(q), dk(k);
      DeviceBuffer<int> dpos(std::vector<int>{pos0});
      rope(dq.get(), dk.get(), dfreq.get(), dpos.get(), n_tokens, n_heads, n_kv_heads, hd, nullptr);
      sync_and_check();
      const std::vector<float> gq = dq.download(), gk = dk.download();
      // sincosf is within 2 ulp; the pair magnitude bounds the error of the rotation.
      for (size_t i = 0; i < nq; ++i)
        ASSERT_NEAR(gq[i], rq[i], 1e-6 * (std::fabs(q[i ^ 1]) + std::fabs(q[i])) + 1e-6) << "q element " << i;
      for (size_t i = 0; i < nk; ++i)
        ASSERT_NEAR(gk[i], rk[i], 1e-6 * (std::fabs(k[i ^ 1]) + std::fabs(k[i])) + 1e-6) << "k element " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Element-wise ops

TEST(OpsKvStore, WritesBf16RowsAtDevicePosition) {
  SKIP_WITHOUT_CUDA();
  const int ctx = 16, kv_dim = 96, n_tokens = 3, pos0 = 5;
  std::vector<float> k = random_normal(size_t(n_tokens) * kv_dim, 1.0f, 1), v = random_normal(k.size(), 1.0f, 2);
  DeviceBuffer<float> dk(k), dv(v);
  DeviceBuffer<uint16_t> kc(size_t(ctx) * kv_dim), vc(size_t(ctx) * kv_dim);
  kc.poison();
  vc.poison();
  DeviceBuffer<int> dpos(std::vector<int>{pos0});
  kv_store(dk.get(), dv.get(), kc.get(), vc.get(), dpos.get(), n_tokens, kv_dim, nullptr);
  sync_and_check();
  const std::vector<uint16_t> gk = kc.download(), gv = vc.download();
  for (int r = 0; r < ctx; ++r)
    for (int c = 0; c < kv_dim; ++c) {
      const size_t i = size_t(r) * kv_dim + c;
      const bool written = r >= pos0 && r < pos0 + n_tokens;
      const size_t src = size_t(r - pos0) * kv_dim + c;
      ASSERT_EQ(gk[i], written ? f32_to_bf16(k[src]) : uint16_t(0xFFFF)) << "K row " << r << " col " << c;
      ASSERT_EQ(gv[i], written ? f32_to_bf16(v[src]) : uint16_t(0xFFFF)) << "V row " << r << " col " << c;
    }
}

TEST(OpsElementwise, SwigluAndAdd) {
  SKIP_WITHOUT_CUDA();
  const size_t n = 10007;
  std::vector<float> g = random_normal(n, 3.0f, 5), u = random_normal(n, 1.0f, 6), y = random_normal(n, 1.0f, 7);
  DeviceBuffer<float> dg(g), du(u), dout(n), dy(y);
  dout.poison();
  swiglu(dg.get(), du.get(), dout.get(), n, nullptr);
  add_inplace(dy.get(), du.get(), n, nullptr);
  sync_and_check();
  const std::vector<float> out = dout.download(), gy = dy.download();
  for (size_t i = 0; i < n; ++i) {
    const double ref = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    ASSERT_NEAR(out[i], ref, 2e-6 * std::fabs(ref) + 1e-7) << "swiglu element " << i;  // expf: 2 ulp
    ASSERT_EQ(f32_to_bits(gy[i]), f32_to_bits(y[i] + u[i])) << "add element " << i;    // one FP32 add, exact
  }
}

TEST(OpsElementwise, Bf16ConversionsAreExactRoundToNearestEven) {
  SKIP_WITHOUT_CUDA();
  std::vector<float> x = random_normal(5000, 10.0f, 8);
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                              0x00000001u, 0x00400000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu,
                              0xbf7fffffu, 0x3effffffu};
  for (uint32_t b : special) x.push_back(bits_to_f32(b));
  DeviceBuffer<float> dx(x), back(x.size());
  DeviceBuffer<uint16_t> dbf(x.size());
  dbf.poison();
  back.poison();
  convert_f32_to_bf16(dx.get(), dbf.get(), x.size(), nullptr);
  convert_bf16_to_f32(dbf.get(), back.get(), x.size(), nullptr);
  sync_and_check();
  const std::vector<uint16_t> bf = dbf.download();
  const std::vector<float> f = back.download();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bf[i], f32_to_bf16(x[i])) << "input bits 0x" << std::hex << f32_to_bits(x[i]);
    ASSERT_EQ(f32_to_bits(f[i]), uint32_t(bf[i]) << 16) << "element " << i;
  }
}

TEST(OpsElementwise, EmbedLookupCopiesRows) {
  SKIP_WITHOUT_CUDA();
  const int vocab = 50, dim = 72;
  const std::vector<int> tokens = {3, 0, 49, 3};
  std::vector<uint16_t> table = random_bf16(size_t(vocab) * dim, 1.0f, 9);
  DeviceBuffer<uint16_t> dt(table);
  DeviceBuffer<int> dtok(tokens);
  DeviceBuffer<float> out(tokens.size() * dim);
  out.poison();
  embed_lookup(dt.get(), dtok.get(), int(tokens.size()), dim, out.get(), nullptr);
  sync_and_check();
  const std::vector<float> o = out.download();
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int c = 0; c < dim; ++c)
      ASSERT_EQ(f32_to_bits(o[t * dim + c]), f32_to_bits(bf16_to_f32(table[size_t(tokens[t]) * dim + c])))
          << "token " << t << " col " << c;
}

// ---------------------------------------------------------------------------------------------------------------
// Attention

// One query q [n_heads, hd] over cache rows [0, len) of caches [*, n_kv * hd]; out [n_heads, hd]. Head h reads KV
// head h / (n_heads / n_kv), scores scaled by 1/sqrt(hd), softmax and weighted sum in double.
void attention_ref(const float* q, const uint16_t* kc, const uint16_t* vc, int len, int n_heads, int n_kv, int hd,
                   double* out) {
  const int g = n_heads / n_kv, kv_dim = n_kv * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> s(static_cast<size_t>(len));
  for (int h = 0; h < n_heads; ++h) {
    const int col = (h / g) * hd;
    double mx = -std::numeric_limits<double>::infinity();
    for (int p = 0; p < len; ++p) {
      double d = 0.0;
      for (int i = 0; i < hd; ++i) d += double(q[h * hd + i]) * bf16_to_f32(kc[size_t(p) * kv_dim + col + i]);
      s[size_t(p)] = d * scale;
      mx = std::max(mx, s[size_t(p)]);
    }
    double z = 0.0;
    for (int p = 0; p < len; ++p) z += s[size_t(p)] = std::exp(s[size_t(p)] - mx);
    for (int i = 0; i < hd; ++i) {
      double o = 0.0;
      for (int p = 0; p < len; ++p) o += s[size_t(p)] * bf16_to_f32(vc[size_t(p) * kv_dim + col + i]);
      out[h * hd + i] = o / z;
    }
  }
}

// FP32 accumulation in another order than the double reference: ~1e-6. A row missed or counted twice at 8192 rows
// moves the (zero-mean) output by ~1/sqrt(len) relative, about 1e-2: far above this bound.
constexpr double kAttnTol = 2e-3;

// Contexts that sit on both sides of every split size (64, 128, 256) and of the tile size.
const std::vector<int> kContexts = {1, 2, 255, 256, 257, 511, 512, 513, 1000, 4096, 8192};

struct CacheOnDevice {
  std::vector<uint16_t> k, v;  // host copies [max_ctx, kv_dim]
  DeviceBuffer<uint16_t> dk, dv;
  int kv_dim;
  CacheOnDevice(int max_ctx, int kv_dim_, uint32_t seed)
      : k(random_bf16(size_t(max_ctx) * kv_dim_, 1.0f, seed)),
        v(random_bf16(size_t(max_ctx) * kv_dim_, 1.0f, seed + 1)),
        dk(k.size()),
        dv(v.size()),
        kv_dim(kv_dim_) {}
  // Rows [0, len) hold the data, rows past it NaN bits: a kernel that reads them produces NaN.
  void upload_rows(int len) {
    const size_t valid = size_t(len) * kv_dim, total = k.size();
    CUDA_CHECK(cudaMemcpy(dk.get(), k.data(), valid * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dv.get(), v.data(), valid * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dk.get() + valid, 0xFF, (total - valid) * 2));
    CUDA_CHECK(cudaMemset(dv.get() + valid, 0xFF, (total - valid) * 2));
  }
};

void check_decode(int hd, int group, int n_kv, int max_ctx, const std::vector<int>& contexts, uint32_t seed) {
  const int n_heads = n_kv * group, kv_dim = n_kv * hd;
  SCOPED_TRACE("head_dim " + std::to_string(hd) + " group " + std::to_string(group) + " n_kv_heads " +
               std::to_string(n_kv) + " max_ctx " + std::to_string(max_ctx) + " chunk " +
               std::to_string(attention_decode_chunk(n_kv, max_ctx)));
  CacheOnDevice cache(max_ctx, kv_dim, seed);
  // Small queries keep attention broad, so that every row weighs in the result.
  const std::vector<float> q = random_normal(size_t(n_heads) * hd, 0.5f, seed + 2);
  DeviceBuffer<float> dq(q), dout(q.size());
  DeviceBuffer<int> dpos(1);
  DeviceBuffer<uint8_t> scratch(attention_decode_scratch_bytes(n_heads, hd, max_ctx));
  std::vector<double> ref(q.size());
  for (int len : contexts) {
    if (len > max_ctx) continue;
    SCOPED_TRACE("context " + std::to_string(len));
    cache.upload_rows(len);
    dpos.upload({len - 1});
    dout.poison();
    scratch.poison();
    attention_decode(dq.get(), cache.dk.get(), cache.dv.get(), dpos.get(), n_heads, n_kv, hd, max_ctx, dout.get(),
                     scratch.get(), nullptr);
    sync_and_check();
    const std::vector<float> out = dout.download();
    attention_ref(q.data(), cache.k.data(), cache.v.data(), len, n_heads, n_kv, hd, ref.data());
    const double err = rel_l2(out.data(), ref.data(), out.size());
    ASSERT_LE(err, kAttnTol) << "relative L2 error";
  }
}

TEST(OpsAttentionDecode, SplitSizesDependOnKvHeadsAndMaxCtxOnly) {
  EXPECT_EQ(attention_decode_chunk(8, 8192), 256);  // Llama 3 8B at 8K: 32 splits x 8 KV heads = 256 blocks
  EXPECT_EQ(attention_decode_chunk(4, 8192), 128);
  EXPECT_EQ(attention_decode_chunk(2, 8192), 64);
  EXPECT_EQ(attention_decode_chunk(1, 512), 64);
  EXPECT_GE(attention_decode_scratch_bytes(32, 128, 8192), size_t(32) * 128 * (8192 / 64) * sizeof(float));
}

TEST(OpsAttentionDecode, GqaHeadDimContextSweep) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1000;
  for (int hd : {8, 64, 128})
    for (int group : {1, 2, 4, 8}) check_decode(hd, group, /*n_kv=*/2, /*max_ctx=*/8192, kContexts, seed += 10);
}

TEST(OpsAttentionDecode, SplitsOf128And256Rows) {
  SKIP_WITHOUT_CUDA();
  check_decode(128, 4, /*n_kv=*/8, 8192, kContexts, 2000);  // chunk 256
  check_decode(64, 2, /*n_kv=*/4, 8192, kContexts, 2100);   // chunk 128
}

TEST(OpsAttentionDecode, OddPairCountsAndRaggedMaxCtx) {
  SKIP_WITHOUT_CUDA();
  // head_dim 18 and 10: 4-byte K/V loads; 24: 16-byte loads with 3 per row. max_ctx 1000 is no multiple of a split.
  const std::vector<int> contexts = {1, 2, 63, 64, 65, 127, 128, 129, 300, 999, 1000};
  check_decode(18, 3, 2, 1000, contexts, 3000);
  check_decode(10, 1, 3, 1000, contexts, 3100);
  check_decode(24, 5, 1, 1000, contexts, 3200);
}

TEST(OpsAttentionDecode, SingleRowReturnsItsValueRow) {
  SKIP_WITHOUT_CUDA();
  const int hd = 64, n_kv = 2, group = 4, n_heads = n_kv * group, max_ctx = 512;
  CacheOnDevice cache(max_ctx, n_kv * hd, 77);
  cache.upload_rows(1);
  DeviceBuffer<float> dq(random_normal(size_t(n_heads) * hd, 3.0f, 78)), dout(size_t(n_heads) * hd);
  DeviceBuffer<int> dpos(std::vector<int>{0});
  DeviceBuffer<uint8_t> scratch(attention_decode_scratch_bytes(n_heads, hd, max_ctx));
  dout.poison();
  scratch.poison();
  attention_decode(dq.get(), cache.dk.get(), cache.dv.get(), dpos.get(), n_heads, n_kv, hd, max_ctx, dout.get(),
                   scratch.get(), nullptr);
  sync_and_check();
  const std::vector<float> out = dout.download();
  // One row: weight exp2(0) = 1, sum 1, merge weight 1 -> V exactly.
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < hd; ++i)
      ASSERT_EQ(out[size_t(h) * hd + i], bf16_to_f32(cache.v[size_t(h / group) * hd + i])) << "head " << h;
}

TEST(OpsAttentionDecode, GraphReplayReadsPositionOnDevice) {
  SKIP_WITHOUT_CUDA();
  const int hd = 128, n_kv = 8, group = 4, n_heads = n_kv * group, max_ctx = 8192;
  CacheOnDevice cache(max_ctx, n_kv * hd, 88);
  cache.upload_rows(max_ctx);
  const std::vector<float> q = random_normal(size_t(n_heads) * hd, 0.5f, 89);
  DeviceBuffer<float> dq(q), dout(q.size());
  DeviceBuffer<int> dpos(std::vector<int>{0});
  DeviceBuffer<uint8_t> scratch(attention_decode_scratch_bytes(n_heads, hd, max_ctx));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  attention_decode(dq.get(), cache.dk.get(), cache.dv.get(), dpos.get(), n_heads, n_kv, hd, max_ctx, dout.get(),
                   scratch.get(), s);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<double> ref(q.size());
  for (int len : {100, 5000, 257, 8192, 1}) {
    SCOPED_TRACE("context " + std::to_string(len));
    dpos.upload({len - 1});
    dout.poison();
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<float> out = dout.download();
    attention_ref(q.data(), cache.k.data(), cache.v.data(), len, n_heads, n_kv, hd, ref.data());
    EXPECT_LE(rel_l2(out.data(), ref.data(), out.size()), kAttnTol);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(s));
}

// Prefill: token t (position pos0 + t) must match the decode reference over rows [0, pos0 + t]; the rows after it
// (later tokens) hold real data that only the causal mask keeps out. `stride` checks every stride-th token.
void check_prefill(int hd, int group, int n_kv, int pos0, int n_tokens, uint32_t seed, int stride = 1) {
  const int n_heads = n_kv * group, q_dim = n_heads * hd, rows = pos0 + n_tokens;
  SCOPED_TRACE("head_dim " + std::to_string(hd) + " group " + std::to_string(group) + " n_kv_heads " +
               std::to_string(n_kv) + " pos0 " + std::to_string(pos0) + " n_tokens " + std::to_string(n_tokens));
  CacheOnDevice cache(rows + 16, n_kv * hd, seed);
  cache.upload_rows(rows);
  const std::vector<float> q = random_normal(size_t(n_tokens) * q_dim, 0.5f, seed + 2);
  DeviceBuffer<float> dq(q), dout(q.size());
  dout.poison();
  attention_prefill(dq.get(), cache.dk.get(), cache.dv.get(), pos0, n_tokens, n_heads, n_kv, hd, dout.get(), nullptr);
  sync_and_check();
  const std::vector<float> out = dout.download();
  std::vector<double> ref(static_cast<size_t>(q_dim));
  for (int t = 0; t < n_tokens; ++t) {
    if (t % stride != 0 && t != n_tokens - 1) continue;
    attention_ref(q.data() + size_t(t) * q_dim, cache.k.data(), cache.v.data(), pos0 + t + 1, n_heads, n_kv, hd,
                  ref.data());
    ASSERT_LE(rel_l2(out.data() + size_t(t) * q_dim, ref.data(), size_t(q_dim)), kAttnTol) << "token " << t;
  }
}

TEST(OpsAttentionPrefill, CausalMatchesReference) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 5000;
  for (int pos0 : {0, 5})
    for (int n_tokens : {1, 7, 64, 300}) check_prefill(64, 4, 2, pos0, n_tokens, seed += 10);
  check_prefill(128, 1, 4, 5, 300, 5500);
  check_prefill(18, 8, 1, 5, 70, 5600);  // 4-byte load path, full group
}

TEST(OpsAttentionPrefill, LongPrompt2048) {
  SKIP_WITHOUT_CUDA();
  check_prefill(64, 2, 2, 0, 2048, 6000, /*stride=*/61);
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

struct KeptSet {
  std::vector<int> ids;    // engine/sampler.cpp's kept tokens, most likely first (ties: lower index first)
  std::vector<double> q;   // their probabilities renormalised over the kept set
  double margin = 1.0;     // distance of the top-p cumulative sums around the cut to top_p
};

// The rule of engine/sampler.cpp, in double, returning the kept set instead of drawing.
KeptSet cpu_kept_set(const std::vector<float>& logits, float temperature, int top_k, float top_p) {
  const int n = int(logits.size());
  KeptSet ks;
  if (temperature <= 0.0f || top_k == 1) {
    ks.ids = {argmax(logits.data(), n)};
    ks.q = {1.0};
    return ks;
  }
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += p[size_t(i)] = std::exp(double(logits[size_t(i)] - mx) / temperature);
  for (auto& x : p) x /= sum;
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  int keep = (top_k > 0 && top_k < n) ? top_k : n;
  if (top_p < 1.0f) {
    double cum = 0.0;
    int k = 0;
    while (k < keep) {
      cum += p[size_t(idx[size_t(k)])];
      ++k;
      if (cum >= top_p) break;
    }
    if (cum >= top_p && top_p > 0.0f)
      ks.margin = std::min(cum - top_p, top_p - (cum - p[size_t(idx[size_t(k - 1)])]));
    keep = k;
  }
  double total = 0.0;
  for (int k = 0; k < keep; ++k) total += p[size_t(idx[size_t(k)])];
  for (int k = 0; k < keep; ++k) {
    ks.ids.push_back(idx[size_t(k)]);
    ks.q.push_back(p[size_t(idx[size_t(k)])] / total);
  }
  return ks;
}

// The token the device picks for u: kept tokens laid out in INDEX order (see kernels/sampling.cu); -1 when u lies
// within `guard` of an interval boundary (FP32 probabilities may move it).
int index_order_pick(const KeptSet& ks, double u, double guard) {
  std::vector<std::pair<int, double>> v;
  for (size_t i = 0; i < ks.ids.size(); ++i) v.push_back({ks.ids[i], ks.q[i]});
  std::sort(v.begin(), v.end());
  double cum = 0.0;
  for (size_t k = 0; k < v.size(); ++k) {
    const double lo = cum;
    cum += v[k].second;
    const bool last = k + 1 == v.size();
    if (u < cum || last) {
      if ((k > 0 && u - lo < guard) || (!last && cum - u < guard)) return -1;  // interior boundaries only
      return v[k].first;
    }
  }
  return -1;
}

class DeviceSampler {
 public:
  explicit DeviceSampler(const std::vector<float>& logits)
      : n_(int(logits.size())), logits_(logits), out_(1), scratch_(sample_scratch_bytes(n_)) {}
  int operator()(float temperature, int top_k, float top_p, float u) {
    out_.poison();  // -1
    sample_device(logits_.get(), n_, temperature, top_k, top_p, u, out_.get(), scratch_.get(), nullptr);
    sync_and_check();
    return out_.download()[0];
  }

 private:
  int n_;
  DeviceBuffer<float> logits_;
  DeviceBuffer<int> out_;
  DeviceBuffer<uint8_t> scratch_;
};

TEST(OpsSample, GreedyIsArgmaxWithLowestIndexOnTies) {
  SKIP_WITHOUT_CUDA();
  std::vector<float> big = random_normal(128256, 3.0f, 11);
  const float top = *std::max_element(big.begin(), big.end()) + 1.0f;
  for (int i : {90000, 70, 128255}) big[size_t(i)] = top;
  DeviceSampler s_big(big);
  EXPECT_EQ(s_big(0.0f, 0, 1.0f, 0.5f), 70);
  EXPECT_EQ(s_big(-1.0f, 40, 0.9f, 0.5f), 70);
  EXPECT_EQ(s_big(0.8f, 1, 0.9f, 0.99f), 70);  // top_k = 1 is greedy, as on the CPU

  const std::vector<float> small = random_normal(32000, 2.0f, 12);
  DeviceSampler s_small(small);
  EXPECT_EQ(s_small(0.0f, 0, 1.0f, 0.0f), argmax(small.data(), int(small.size())));

  DeviceSampler s_flat(std::vector<float>(1000, 0.25f));
  EXPECT_EQ(s_flat(0.0f, 0, 1.0f, 0.0f), 0);
}

// 1000 tokens: ten distinct logits, 990 tied at -8 (ties stress the top-k and top-p cuts).
std::vector<float> handmade_logits() {
  std::vector<float> l(1000, -8.0f);
  const std::map<int, float> special = {{5, 3.0f},  {17, 2.5f},  {400, 2.5f}, {999, 2.0f}, {3, 1.0f},
                                        {600, 0.5f}, {123, 0.5f}, {42, 0.0f},  {777, -1.0f}, {888, -3.0f}};
  for (const auto& [i, v] : special) l[size_t(i)] = v;
  return l;
}

struct SampleCase {
  float temperature;
  int top_k;
  float top_p;
};

// Draws on a uniform grid of u: every token comes from the CPU's kept set, and each kept token is drawn
// N * q_i times up to the grid's rounding (so the set is covered and the distribution is the CPU's).
void check_distribution(DeviceSampler& sampler, const std::vector<float>& logits, const SampleCase& c, int n_draws,
                        double count_slack) {
  SCOPED_TRACE("T " + std::to_string(c.temperature) + " top_k " + std::to_string(c.top_k) + " top_p " +
               std::to_string(c.top_p));
  const KeptSet ks = cpu_kept_set(logits, c.temperature, c.top_k, c.top_p);
  ASSERT_GT(ks.margin, 1e-5) << "test data puts top_p within rounding of a cumulative sum";
  std::map<int, int> count;
  for (int j = 0; j < n_draws; ++j) ++count[sampler(c.temperature, c.top_k, c.top_p, float((j + 0.5) / n_draws))];
  std::set<int> kept(ks.ids.begin(), ks.ids.end());
  for (const auto& [id, n] : count) ASSERT_TRUE(kept.count(id)) << "token " << id << " drawn " << n << " times";
  for (size_t i = 0; i < ks.ids.size(); ++i)
    EXPECT_NEAR(count[ks.ids[i]], n_draws * ks.q[i], count_slack) << "token " << ks.ids[i];
  // Edges: u = 0 takes the first kept token in index order, u just below 1 the last.
  for (float u : {0.0f, 0.25f, 0.5f, 0.75f, std::nextafter(1.0f, 0.0f)}) {
    const int want = index_order_pick(ks, u, 1e-6);
    if (want >= 0) EXPECT_EQ(sampler(c.temperature, c.top_k, c.top_p, u), want) << "u " << u;
  }
}

TEST(OpsSample, HandmadeDistributionKeptSetAndFrequencies) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> logits = handmade_logits();
  // The kept-set helper agrees with engine/sampler.cpp: its draws all land inside.
  {
    const SamplerParams p{1.0f, 15, 0.9f, 7};
    const KeptSet ks = cpu_kept_set(logits, p.temperature, p.top_k, p.top_p);
    const std::set<int> kept(ks.ids.begin(), ks.ids.end());
    for (uint64_t step = 0; step < 500; ++step)
      ASSERT_TRUE(kept.count(sample_cpu(logits.data(), int(logits.size()), p, step))) << "step " << step;
  }
  DeviceSampler sampler(logits);
  const SampleCase cases[] = {{1.0f, 0, 1.0f},  {0.7f, 2, 1.0f},  {1.0f, 0, 0.9f},    {1.3f, 15, 1.0f},
                              {1.0f, 3, 0.5f},  {1.0f, 0, 0.0f},  {2.0f, 0, 0.95f},   {0.5f, 50, 0.99f},
                              {2.0f, 700, 0.9f}, {2.0f, 800, 0.9f}, {1.0f, 600, 0.7f}, {2.0f, 995, 1.0f}};
  // {2, 0, 0.95} and {2, 800, 0.9} cut inside the block of 990 tied tokens (at 896 and 791 kept); {2, 700, 0.9}
  // has top-k binding before top-p.
  for (const SampleCase& c : cases) check_distribution(sampler, logits, c, 4000, 2.0);
  // Exact sets of a few cases, by hand: the tie 17/400 is broken by index, ties at -8 too.
  EXPECT_EQ(cpu_kept_set(logits, 0.7f, 2, 1.0f).ids, (std::vector<int>{5, 17}));
  EXPECT_EQ(cpu_kept_set(logits, 1.0f, 0, 0.0f).ids, (std::vector<int>{5}));
  const std::vector<int> k15 = cpu_kept_set(logits, 1.3f, 15, 1.0f).ids;
  EXPECT_EQ(std::set<int>(k15.begin() + 10, k15.end()), (std::set<int>{0, 1, 2, 4, 6}));
}

TEST(OpsSample, LargeVocabDrawsStayInKeptSet) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> logits = random_normal(128256, 2.0f, 13);
  DeviceSampler sampler(logits);
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const SampleCase& c : {SampleCase{0.8f, 40, 0.95f}, SampleCase{1.0f, 0, 0.9f}, SampleCase{1.5f, 0, 1.0f},
                              SampleCase{0.6f, 1000, 0.8f}}) {
    SCOPED_TRACE("T " + std::to_string(c.temperature) + " top_k " + std::to_string(c.top_k) + " top_p " +
                 std::to_string(c.top_p));
    const KeptSet ks = cpu_kept_set(logits, c.temperature, c.top_k, c.top_p);
    const std::set<int> kept(ks.ids.begin(), ks.ids.end());
    for (int j = 0; j < 200; ++j) {
      const int tok = sampler(c.temperature, c.top_k, c.top_p, uni(rng));
      ASSERT_TRUE(kept.count(tok)) << "token " << tok << " outside the kept set of " << kept.size();
    }
    for (float u : {0.0f, 0.5f, std::nextafter(1.0f, 0.0f)}) {
      const int want = index_order_pick(ks, u, 1e-6);
      if (want >= 0) EXPECT_EQ(sampler(c.temperature, c.top_k, c.top_p, u), want) << "u " << u;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Synthetic weights

HostTensor synthetic_tensor(int64_t rows, int64_t cols, int rope_head_dim) {
  HostTensor t;
  t.name = "synthetic_test";
  t.dtype = DType::BF16;
  t.rows = rows;
  t.cols = cols;
  t.synthetic = true;
  t.fill = SyntheticFill{1234, 7, 0.01f, 0.05f};
  t.rope_head_dim = rope_head_dim;
  return t;
}

TEST(OpsSyntheticFill, BitIdenticalToHostTensor) {
  SKIP_WITHOUT_CUDA();
  for (int rope_hd : {0, 64}) {
    SCOPED_TRACE("rope_head_dim " + std::to_string(rope_hd));
    const HostTensor t = synthetic_tensor(256, 72, rope_hd);
    std::vector<uint16_t> host(size_t(t.numel()));
    t.read_rows_bf16(0, t.rows, host.data());
    DeviceBuffer<uint16_t> d(host.size());
    d.poison();
    fill_synthetic_bf16(d.get(), t.rows, t.cols, t.fill.seed, t.fill.tensor_id, t.fill.offset, t.fill.scale, rope_hd,
                        nullptr);
    sync_and_check();
    const std::vector<uint16_t> dev = d.download();
    for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(dev[i], host[i]) << "element " << i;
  }
  // The permutation really moves rows (else the rope case above proves nothing).
  std::vector<uint16_t> a(72), b(72);
  synthetic_tensor(256, 72, 0).read_rows_bf16(1, 1, a.data());
  synthetic_tensor(256, 72, 64).read_rows_bf16(1, 1, b.data());
  EXPECT_NE(a, b);
}

TEST(OpsSyntheticFill, IndicesBeyond32Bits) {
  SKIP_WITHOUT_CUDA();
  const int64_t rows = 513 * 128, cols = 32768;  // 2.15e9 elements: element indices past 2^31
  uint16_t* d = nullptr;
  if (cudaMalloc(&d, size_t(rows * cols) * 2) != cudaSuccess) {
    cudaGetLastError();
    GTEST_SKIP() << "not enough device memory for a 4.3 GB tensor";
  }
  const HostTensor t = synthetic_tensor(rows, cols, 128);
  fill_synthetic_bf16(d, rows, cols, t.fill.seed, t.fill.tensor_id, t.fill.offset, t.fill.scale, 128, nullptr);
  sync_and_check();
  const int64_t r0 = rows - 3;
  std::vector<uint16_t> host(size_t(3 * cols)), dev(host.size());
  t.read_rows_bf16(r0, 3, host.data());
  CUDA_CHECK(cudaMemcpy(dev.data(), d + r0 * cols, dev.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(d));
  EXPECT_EQ(dev, host);
}

}  // namespace
}  // namespace llm
