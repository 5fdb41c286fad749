// Attention over the FP8 KV cache (kernels/ops/ops.h attention_decode_fp8 / attention_prefill_fp8) against a double
// reference on the same codes and scales (the values code * scale, engine/kv_cache.h's rule, as the CPU reference
// decodes them): the kernels' only error is their arithmetic (BF16 conversion of the codes is exact, the scales are
// applied in FP32), so the bound is the BF16 one, 2e-3 (the issue asks 3e-2 for FP8). Against the rows before
// quantization the error is E4M3's own (3 mantissa bits: ~2-4% per element, less after the weighted sum): a loose
// 1e-1 bound there only shows that the codes stand for the right rows.
// Rows past the attended length hold the NaN code 0xFF and NaN scales: a kernel that reads them produces NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "core/kv_dtype.h"
#include "device_test_util.h"
#include "kernels/ops/ops.h"

namespace llm {
namespace gpu_test {
namespace {

constexpr int kBlock = kKvFp8Block;
constexpr double kExactTol = 2e-3;    // against the values the codes and scales stand for
constexpr double kQuantTol = 1e-1;    // against the rows before quantization

// K and V rows [ctx, kv_dim] as computed, their FP8 codes and scales [n_blocks, n_kv], and the decoded values.
struct Fp8Cache {
  int ctx, n_kv, hd, kv_dim, n_blocks;
  std::vector<float> k, v;              // as computed
  std::vector<uint8_t> kq, vq;          // codes
  std::vector<float> ks, vs;            // scales
  std::vector<float> kd, vd;            // decoded: code * scale
  DeviceBuffer<uint8_t> dk, dv;
  DeviceBuffer<float> dks, dvs;

  Fp8Cache(int ctx_, int n_kv_, int hd_, uint32_t seed)
      : ctx(ctx_), n_kv(n_kv_), hd(hd_), kv_dim(n_kv_ * hd_), n_blocks((ctx_ + kBlock - 1) / kBlock),
        k(random_normal(size_t(ctx_) * kv_dim, 1.0f, seed)), v(random_normal(size_t(ctx_) * kv_dim, 1.0f, seed + 1)),
        dk(size_t(ctx_) * kv_dim), dv(size_t(ctx_) * kv_dim), dks(size_t(n_blocks) * n_kv_),
        dvs(size_t(n_blocks) * n_kv_) {
    // Magnitudes that vary by position (x 1/4 .. 4), so blocks get different scales.
    std::vector<float> mag = random_normal(size_t(ctx), 1.0f, seed + 7);
    for (int p = 0; p < ctx; ++p) {
      const float f = std::exp2(std::fmax(-2.0f, std::fmin(2.0f, mag[size_t(p)])));
      for (int i = 0; i < kv_dim; ++i) k[size_t(p) * kv_dim + i] *= f, v[size_t(p) * kv_dim + i] *= f;
    }
    quantize(k, kq, ks, kd);
    quantize(v, vq, vs, vd);
  }

  void quantize(const std::vector<float>& x, std::vector<uint8_t>& q, std::vector<float>& sc,
                std::vector<float>& dec) const {
    q.assign(x.size(), 0);
    dec.assign(x.size(), 0.0f);
    sc.assign(size_t(n_blocks) * n_kv, 0.0f);
    for (int b = 0; b < n_blocks; ++b)
      for (int h = 0; h < n_kv; ++h) {
        const int p0 = b * kBlock, p1 = std::min(ctx, p0 + kBlock);
        float amax = 0.0f;
        for (int p = p0; p < p1; ++p) amax = std::fmax(amax, fp8_block_amax(&x[size_t(p) * kv_dim + h * hd], hd));
        const float s = fp8_block_scale(amax);
        sc[size_t(b) * n_kv + h] = s;
        for (int p = p0; p < p1; ++p)
          for (int i = 0; i < hd; ++i) {
            const size_t at = size_t(p) * kv_dim + h * hd + i;
            q[at] = fp8_quantize(x[at], s);
            dec[at] = fp8_dequantize(q[at], s);
          }
      }
  }

  // Rows [0, len) on the device; the rest NaN codes, and the scales of blocks wholly past len NaN.
  void upload(int len) {
    const size_t valid = size_t(len) * kv_dim;
    std::vector<uint8_t> a(kq.size(), 0xFF), b(vq.size(), 0xFF);
    std::copy(kq.begin(), kq.begin() + valid, a.begin());
    std::copy(vq.begin(), vq.begin() + valid, b.begin());
    dk.upload(a);
    dv.upload(b);
    const size_t live = size_t((len + kBlock - 1) / kBlock) * n_kv;
    std::vector<float> s1(ks.size(), std::nanf("")), s2(vs.size(), std::nanf(""));
    std::copy(ks.begin(), ks.begin() + live, s1.begin());
    std::copy(vs.begin(), vs.begin() + live, s2.begin());
    dks.upload(s1);
    dvs.upload(s2);
  }
};

// One query q [n_heads, hd] over rows [0, len) of K/V values [*, kv_dim]; double softmax and sum.
void ref_attention(const float* q, const float* kc, const float* vc, int len, int n_heads, int n_kv, int hd,
                   double* out) {
  const int g = n_heads / n_kv, kv_dim = n_kv * hd;
  std::vector<double> s(static_cast<size_t>(len));
  for (int h = 0; h < n_heads; ++h) {
    const int col = (h / g) * hd;
    double mx = -INFINITY;
    for (int p = 0; p < len; ++p) {
      double d = 0.0;
      for (int i = 0; i < hd; ++i) d += double(q[h * hd + i]) * kc[size_t(p) * kv_dim + col + i];
      s[size_t(p)] = d / std::sqrt(double(hd));
      mx = std::max(mx, s[size_t(p)]);
    }
    double z = 0.0;
    for (int p = 0; p < len; ++p) z += s[size_t(p)] = std::exp(s[size_t(p)] - mx);
    for (int i = 0; i < hd; ++i) {
      double o = 0.0;
      for (int p = 0; p < len; ++p) o += s[size_t(p)] * vc[size_t(p) * kv_dim + col + i];
      out[h * hd + i] = o / z;
    }
  }
}

std::string shape(int hd, int g, int n_kv) {
  return "head_dim " + std::to_string(hd) + " group " + std::to_string(g) + " n_kv_heads " + std::to_string(n_kv);
}

void check_decode_fp8(int hd, int g, int n_kv, int max_ctx, const std::vector<int>& lens, uint32_t seed) {
  SCOPED_TRACE(shape(hd, g, n_kv) + " max_ctx " + std::to_string(max_ctx));
  const int n_heads = n_kv * g;
  Fp8Cache cache(max_ctx, n_kv, hd, seed);
  const std::vector<float> q = random_normal(size_t(n_heads) * hd, 0.5f, seed + 2);
  DeviceBuffer<float> dq(q), dout(q.size());
  DeviceBuffer<int> dpos(1);
  DeviceBuffer<uint8_t> scratch(attention_decode_scratch_bytes(n_heads, hd, max_ctx));
  std::vector<double> exact(q.size()), plain(q.size());
  for (int len : lens) {
    SCOPED_TRACE("context " + std::to_string(len));
    cache.upload(len);
    dpos.upload({len - 1});
    dout.poison();
    scratch.poison();
    attention_decode_fp8(dq.get(), cache.dk.get(), cache.dv.get(), cache.dks.get(), cache.dvs.get(), dpos.get(),
                         n_heads, n_kv, hd, max_ctx, dout.get(), scratch.get(), nullptr);
    sync_and_check();
    const std::vector<float> out = dout.download();
    ref_attention(q.data(), cache.kd.data(), cache.vd.data(), len, n_heads, n_kv, hd, exact.data());
    ref_attention(q.data(), cache.k.data(), cache.v.data(), len, n_heads, n_kv, hd, plain.data());
    EXPECT_LE(rel_l2(out.data(), exact.data(), out.size()), kExactTol) << "against the decoded codes";
    EXPECT_LE(rel_l2(out.data(), plain.data(), out.size()), kQuantTol) << "against the rows before quantization";
  }
}

TEST(AttentionFp8, DecodeHeadDim64And128AcrossBlocksAndSplits) {
  SKIP_WITHOUT_CUDA();
  const std::vector<int> lens = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 257, 1000, 2047, 2048};
  uint32_t seed = 9000;
  for (int hd : {64, 128})
    for (int g : {1, 4, 8}) check_decode_fp8(hd, g, 2, 2048, lens, seed += 10);
  check_decode_fp8(128, 4, 8, 8192, {1, 33, 4097, 8191, 8192}, 9500);  // Llama 3.1 8B's shape
}

// split: with a poisoned scratch for the cache's rows, so that a short pass splits its keys across blocks.
void check_prefill_fp8(int hd, int g, int n_kv, int pos0, int n_tokens, uint32_t seed, bool split = false) {
  SCOPED_TRACE(shape(hd, g, n_kv) + " pos0 " + std::to_string(pos0) + " n_tokens " + std::to_string(n_tokens) +
               (split ? " key splits" : ""));
  const int n_heads = n_kv * g, q_dim = n_heads * hd, rows = pos0 + n_tokens;
  Fp8Cache cache(rows + 40, n_kv, hd, seed);
  cache.upload(rows);
  const std::vector<float> q = random_normal(size_t(n_tokens) * q_dim, 0.5f, seed + 2);
  DeviceBuffer<float> dq(q), dout(q.size());
  dout.poison();
  DeviceBuffer<uint8_t> scratch(split ? attention_prefill_scratch_bytes(n_heads, n_kv, hd, rows + 40) : 1);
  scratch.poison();
  attention_prefill_fp8(dq.get(), cache.dk.get(), cache.dv.get(), cache.dks.get(), cache.dvs.get(), pos0, n_tokens,
                        n_heads, n_kv, hd, dout.get(), nullptr, split ? scratch.get() : nullptr,
                        split ? rows + 40 : 0);
  sync_and_check();
  const std::vector<float> out = dout.download();
  std::vector<double> exact(static_cast<size_t>(q_dim)), plain(static_cast<size_t>(q_dim));
  std::vector<float> got_all;  // the checked tokens' outputs, and the unquantized reference for them
  std::vector<double> plain_all;
  for (int t = 0; t < n_tokens; t += (t < 70 || t + 70 > n_tokens) ? 1 : 13) {
    ref_attention(q.data() + size_t(t) * q_dim, cache.kd.data(), cache.vd.data(), pos0 + t + 1, n_heads, n_kv, hd,
                  exact.data());
    ref_attention(q.data() + size_t(t) * q_dim, cache.k.data(), cache.v.data(), pos0 + t + 1, n_heads, n_kv, hd,
                  plain.data());
    ASSERT_LE(rel_l2(out.data() + size_t(t) * q_dim, exact.data(), size_t(q_dim)), kExactTol) << "token " << t;
    got_all.insert(got_all.end(), out.begin() + size_t(t) * q_dim, out.begin() + size_t(t + 1) * q_dim);
    plain_all.insert(plain_all.end(), plain.begin(), plain.end());
  }
  // E4M3's own error, over all the checked tokens (one token with few keys can reach ~0.11).
  EXPECT_LE(rel_l2(got_all.data(), plain_all.data(), got_all.size()), kQuantTol);
}

TEST(AttentionFp8, PrefillHeadDim64And128CausalAcrossTiles) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 9600;
  for (int hd : {64, 128})
    for (int g : {1, 3, 8}) {
      check_prefill_fp8(hd, g, 2, 0, 1, seed += 10);
      check_prefill_fp8(hd, g, 2, 0, 130, seed += 10);
      check_prefill_fp8(hd, g, 2, 45, 64, seed += 10);
      check_prefill_fp8(hd, g, 2, 100, 300, seed += 10);
    }
}

// A verify pass over the FP8 cache: the keys split across blocks and merged (scratch given).
TEST(AttentionFp8, ShortPassSplitsKeysAcrossBlocks) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 9800;
  for (int hd : {64, 128}) {
    check_prefill_fp8(hd, 3, 3, 300, 9, seed += 10, true);
    check_prefill_fp8(hd, 4, 2, 1000, 16, seed += 10, true);
    check_prefill_fp8(hd, 1, 2, 63, 32, seed += 10, true);
    check_prefill_fp8(hd, 8, 1, 4000, 8, seed += 10, true);
  }
}

TEST(AttentionFp8, OtherHeadDimsFailByName) {
  SKIP_WITHOUT_CUDA();
  EXPECT_FALSE(attention_fp8_supported(96, 8, 2));
  EXPECT_TRUE(attention_fp8_supported(128, 32, 8));
  DeviceBuffer<float> q(64), out(64);
  DeviceBuffer<uint8_t> k(1024), v(1024), scratch(attention_decode_scratch_bytes(2, 32, 16));
  DeviceBuffer<float> s(16);
  DeviceBuffer<int> pos(std::vector<int>{0});
  try {
    attention_decode_fp8(q.get(), k.get(), v.get(), s.get(), s.get(), pos.get(), 2, 1, 32, 16, out.get(),
                         scratch.get(), nullptr);
    FAIL() << "head_dim 32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 64 or 128 (found 32)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpu_test
}  // namespace llm
