// The CPU reference's KV cache (engine/kv_cache.h) and the FP8 block rule (core/fp8.h): every element within the
// stated bound of its block, the same bytes however the rows arrive (one prefill, one row at a time, any chunking),
// rewinds (exact within the open block and from a block's start, bounded into a closed block), F32 and BF16 forms,
// and the bytes each form costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/kv_dtype.h"
#include "engine/kv_cache.h"

namespace {

using llm::CpuKvCache;
using llm::KvDtype;

// Rows that look like K or V: most elements N(0, sigma) with sigma varying by row, a few outlier channels 20x
// larger (K's usual shape), some elements tiny (the subnormal range of their block) and some exactly zero.
std::vector<float> kv_like_rows(int rows, int kv_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  std::vector<float> x(size_t(rows) * size_t(kv_dim));
  for (int r = 0; r < rows; ++r) {
    const float sigma = std::exp(2.0f * n01(rng));  // rows differ by orders of magnitude
    for (int i = 0; i < kv_dim; ++i) {
      float v = sigma * n01(rng);
      if (i % 17 == 3) v *= 20.0f;
      const float p = u01(rng);
      if (p < 0.03f) v *= 1e-6f;
      if (p > 0.99f) v = 0.0f;
      x[size_t(r) * size_t(kv_dim) + size_t(i)] = v;
    }
  }
  return x;
}

// The bound of core/fp8.h for element x of a block with largest magnitude amax: 2^-4 |x| + 2^-10 amax/448, with
// (1 + 2^-20) for the FP32 roundings.
double fp8_bound(double x, double amax) {
  return (std::ldexp(std::fabs(x), -4) + std::ldexp(amax / 448.0, -10)) * (1.0 + std::ldexp(1.0, -20));
}

TEST(Fp8Block, EveryElementWithinTheBoundAndTheBoundIsReached) {
  std::mt19937 rng(7);
  double worst_ratio = 0;  // max over elements of error / bound
  for (int trial = 0; trial < 2000; ++trial) {
    const std::vector<float> x = kv_like_rows(1, 64, uint32_t(rng()));
    const float amax = llm::fp8_block_amax(x.data(), int(x.size()));
    double want_amax = 0;
    for (float v : x) want_amax = std::max(want_amax, std::fabs(double(v)));
    ASSERT_EQ(double(amax), want_amax);
    const float s = llm::fp8_block_scale(amax);
    for (float v : x) {
      const float back = llm::fp8_dequantize(llm::fp8_quantize(v, s), s);
      const double err = std::fabs(double(back) - double(v)), bound = fp8_bound(v, amax);
      ASSERT_LE(err, bound) << "x " << v << " amax " << amax << " decoded " << back;
      worst_ratio = std::max(worst_ratio, err / bound);
    }
    // The largest element keeps its magnitude: no clipping.
    const float top = llm::fp8_dequantize(llm::fp8_quantize(amax, s), s);
    EXPECT_NEAR(top, amax, amax * 1e-6);
  }
  // A bound never approached would say nothing: E4M3's half step is reached to within a few percent.
  EXPECT_GT(worst_ratio, 0.9);
}

TEST(Fp8Block, ZeroBlocksNaNAndInfinity) {
  EXPECT_EQ(llm::fp8_block_scale(0.0f), 0.0f);
  EXPECT_EQ(llm::fp8_quantize(0.0f, 0.0f), 0x00);
  EXPECT_EQ(llm::fp8_quantize(-0.0f, 0.0f), 0x80);
  EXPECT_EQ(llm::fp8_dequantize(0x00, 0.0f), 0.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // NaN does not count in amax and stays NaN; the others are unaffected.
  const float with_nan[3] = {1.0f, nan, -2.0f};
  EXPECT_EQ(llm::fp8_block_amax(with_nan, 3), 2.0f);
  const float s = llm::fp8_block_scale(2.0f);
  EXPECT_TRUE(std::isnan(llm::fp8_dequantize(llm::fp8_quantize(nan, s), s)));
  EXPECT_EQ(llm::fp8_dequantize(llm::fp8_quantize(-2.0f, s), s), -2.0f);
  // An infinite element makes the whole block NaN when decoded (the logits check then names the step).
  const float with_inf[2] = {1.0f, inf};
  const float si = llm::fp8_block_scale(llm::fp8_block_amax(with_inf, 2));
  EXPECT_TRUE(std::isinf(si));
  EXPECT_TRUE(std::isnan(llm::fp8_dequantize(llm::fp8_quantize(1.0f, si), si)));
  EXPECT_TRUE(std::isnan(llm::fp8_dequantize(llm::fp8_quantize(inf, si), si)));
}

// ---- the cache ----

constexpr int kLayers = 2, kCtx = 100, kHeads = 3, kHeadDim = 8, kKvDim = kHeads * kHeadDim;

struct Rows {
  std::vector<float> k, v;  // [n, kv_dim]
};
Rows rows(int n, uint32_t seed) { return {kv_like_rows(n, kKvDim, seed), kv_like_rows(n, kKvDim, seed + 1000)}; }

// Stores rows [pos0, pos0 + n) of `r` (indexed from its row 0 = position 0) into every layer, in pieces of `piece`.
void store(CpuKvCache& c, const Rows& r, int pos0, int n, int piece) {
  for (int p = pos0; p < pos0 + n; p += piece) {
    const int m = std::min(piece, pos0 + n - p);
    for (int l = 0; l < kLayers; ++l)
      c.store(l, p, m, r.k.data() + size_t(p) * kKvDim, r.v.data() + size_t(p) * kKvDim);
  }
}

void expect_same_bytes(const CpuKvCache& a, const CpuKvCache& b) {
  for (int l = 0; l < kLayers; ++l)
    for (bool value : {false, true}) {
      EXPECT_EQ(a.stored_bytes(l, value), b.stored_bytes(l, value)) << "layer " << l << (value ? " V" : " K");
      EXPECT_EQ(a.scales(l, value), b.scales(l, value)) << "layer " << l << (value ? " V" : " K");
    }
}

TEST(CpuKvCache, Fp8BytesDoNotDependOnHowTheRowsArrive) {
  for (int block : {llm::kKvFp8Block, 16, 7}) {
    SCOPED_TRACE(testing::Message() << "block " << block);
    const int n = 90;  // the last block partly filled
    const Rows r = rows(n, 1);
    CpuKvCache prefill(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, block);
    store(prefill, r, 0, n, n);
    CpuKvCache decode(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, block);
    for (int p = 0; p < n; ++p) {
      store(decode, r, p, 1, 1);
      if (p % 11 == 5) {  // after every few steps: what a prefill of the tokens so far gives
        CpuKvCache so_far(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, block);
        store(so_far, r, 0, p + 1, p + 1);
        expect_same_bytes(decode, so_far);
      }
    }
    expect_same_bytes(prefill, decode);
    for (int piece : {3, 5, 32, 50}) {  // chunked prefills, chunks across block boundaries
      CpuKvCache chunked(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, block);
      store(chunked, r, 0, n, piece);
      expect_same_bytes(prefill, chunked);
    }
    // And the bytes are not trivially equal: a different row changes them.
    Rows r2 = r;
    r2.k[size_t(40) * kKvDim] += 1000.0f;
    CpuKvCache other(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, block);
    store(other, r2, 0, n, n);
    EXPECT_NE(other.stored_bytes(0, false), prefill.stored_bytes(0, false));
  }
}

// Every element read back (what attention sees) against the bound, with the amax the test computes itself from the
// rows of the element's block and head.
void expect_within_bound(const CpuKvCache& c, const Rows& r, int n, double factor = 1.0) {
  std::vector<float> scratch(kHeadDim);
  const int B = c.block();
  for (bool value : {false, true}) {
    const std::vector<float>& x = value ? r.v : r.k;
    for (int pos = 0; pos < n; ++pos)
      for (int h = 0; h < kHeads; ++h) {
        const int b0 = pos / B * B, b1 = std::min(n, b0 + B);
        double amax = 0;
        for (int t = b0; t < b1; ++t)
          for (int i = 0; i < kHeadDim; ++i)
            amax = std::max(amax, std::fabs(double(x[size_t(t) * kKvDim + size_t(h * kHeadDim + i)])));
        for (int l = 0; l < kLayers; ++l) {
          const float* got = value ? c.value(l, pos, h, scratch.data()) : c.key(l, pos, h, scratch.data());
          for (int i = 0; i < kHeadDim; ++i) {
            const double want = x[size_t(pos) * kKvDim + size_t(h * kHeadDim + i)];
            ASSERT_LE(std::fabs(double(got[i]) - want), factor * fp8_bound(want, amax))
                << (value ? "V" : "K") << " layer " << l << " pos " << pos << " head " << h << " elem " << i;
          }
        }
      }
  }
}

TEST(CpuKvCache, Fp8EveryElementWithinTheBoundOfItsBlock) {
  const int n = 90;
  const Rows r = rows(n, 2);
  CpuKvCache c(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim);
  store(c, r, 0, n, 1);
  expect_within_bound(c, r, n);
  // One scale per (layer, K or V, head, block): amax / 448 of the block's rows.
  const std::vector<float> s = c.scales(0, false);
  ASSERT_EQ(s.size(), size_t((kCtx + llm::kKvFp8Block - 1) / llm::kKvFp8Block * kHeads));
  float amax = 0;
  for (int t = 0; t < llm::kKvFp8Block; ++t)
    for (int i = 0; i < kHeadDim; ++i) amax = std::max(amax, std::fabs(r.k[size_t(t) * kKvDim + size_t(kHeadDim + i)]));
  EXPECT_EQ(s[1], amax / 448.0f);  // block 0, head 1
}

TEST(CpuKvCache, Fp8RewindsWithinTheOpenBlockOrFromABlockStartAreExact) {
  const Rows first = rows(80, 3), second = rows(80, 4);
  // Rows 0..p-1 from `first`, p.. from `second`: what a fresh prefill of that token sequence stores.
  auto mixed = [&](int p) {
    Rows m = first;
    std::copy(second.k.begin() + long(p) * kKvDim, second.k.end(), m.k.begin() + long(p) * kKvDim);
    std::copy(second.v.begin() + long(p) * kKvDim, second.v.end(), m.v.begin() + long(p) * kKvDim);
    return m;
  };
  for (int p : {70, 64, 32, 0}) {  // 70: inside the open block (64..95); 64, 32, 0: block starts
    SCOPED_TRACE(testing::Message() << "rewind to " << p);
    CpuKvCache c(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim);
    store(c, first, 0, 75, 1);
    const Rows m = mixed(p);
    store(c, m, p, 80 - p, 1);
    CpuKvCache fresh(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim);
    store(fresh, m, 0, 80, 80);
    expect_same_bytes(c, fresh);
  }
}

TEST(CpuKvCache, Fp8RewindIntoAClosedBlockStaysWithinTwiceTheBound) {
  // Written to 75 (block 2 open), then rewound to 40, inside closed block 1: rows 32..39 come back from FP8.
  const Rows first = rows(80, 5), second = rows(80, 6);
  Rows m = first;
  std::copy(second.k.begin() + 40 * kKvDim, second.k.end(), m.k.begin() + 40 * kKvDim);
  std::copy(second.v.begin() + 40 * kKvDim, second.v.end(), m.v.begin() + 40 * kKvDim);
  // Block 1's earlier rows were rounded at the scale of first's whole block 1 and are rounded again at m's: bound
  // each with the larger amax, twice over plus the second rounding of the first error.
  Rows big = m;
  for (size_t i = 0; i < big.k.size(); ++i) {
    big.k[i] = std::max(std::fabs(m.k[i]), std::fabs(first.k[i])) * (m.k[i] < 0 ? -1.0f : 1.0f);
    big.v[i] = std::max(std::fabs(m.v[i]), std::fabs(first.v[i])) * (m.v[i] < 0 ? -1.0f : 1.0f);
  }
  CpuKvCache c(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim);
  store(c, first, 0, 75, 1);
  store(c, m, 40, 40, 1);
  // The rows read back are m's values within the bound computed with the larger amax of the two histories, 2.2 times
  // it for the rows rounded twice.
  std::vector<float> scratch(kHeadDim);
  for (int pos = 0; pos < 80; ++pos)
    for (int h = 0; h < kHeads; ++h) {
      const int b0 = pos / 32 * 32, b1 = std::min(80, b0 + 32);
      double amax = 0;
      for (int t = b0; t < b1; ++t)
        for (int i = 0; i < kHeadDim; ++i)
          amax = std::max(amax, std::fabs(double(big.k[size_t(t) * kKvDim + size_t(h * kHeadDim + i)])));
      const float* got = c.key(0, pos, h, scratch.data());
      for (int i = 0; i < kHeadDim; ++i) {
        const double want = m.k[size_t(pos) * kKvDim + size_t(h * kHeadDim + i)];
        // Rows 40..63 are rounded once, at a scale that may come from a row of 32..39 read back 2^-4 high.
        const double factor = (pos >= 32 && pos < 40) ? 2.2 : (pos >= 40 && pos < 64) ? 1.1 : 1.0;
        ASSERT_LE(std::fabs(double(got[i]) - want), factor * fp8_bound(want, amax)) << "pos " << pos << " head " << h;
      }
    }
}

TEST(CpuKvCache, F32AndBf16FormsHoldTheValuesAndTheirRounding) {
  const Rows r = rows(20, 8);
  CpuKvCache f32(KvDtype::F32, kLayers, kCtx, kHeads, kHeadDim), bf16(KvDtype::BF16, kLayers, kCtx, kHeads, kHeadDim);
  CpuKvCache dflt(KvDtype::Default, kLayers, kCtx, kHeads, kHeadDim);
  EXPECT_EQ(dflt.dtype(), KvDtype::F32);  // the CPU reference's default
  store(f32, r, 0, 20, 1);
  store(bf16, r, 0, 20, 7);
  store(dflt, r, 0, 20, 20);
  std::vector<float> scratch(kHeadDim);
  for (int pos = 0; pos < 20; ++pos)
    for (int h = 0; h < kHeads; ++h) {
      const float* a = f32.key(1, pos, h, scratch.data());
      for (int i = 0; i < kHeadDim; ++i) EXPECT_EQ(a[i], r.k[size_t(pos) * kKvDim + size_t(h * kHeadDim + i)]);
      const float* b = bf16.value(1, pos, h, scratch.data());
      for (int i = 0; i < kHeadDim; ++i)
        EXPECT_EQ(b[i], llm::round_bf16(r.v[size_t(pos) * kKvDim + size_t(h * kHeadDim + i)]));
    }
  expect_same_bytes(f32, dflt);
}

TEST(CpuKvCache, Fp8HalvesBf16sBytes) {
  // SmolLM2 (30 layers, 3 KV heads of 64) and Llama 3.1 8B (32 layers, 8 KV heads of 128) at 8192 positions.
  for (auto [layers, heads, hd] : {std::tuple{30, 3, 64}, std::tuple{32, 8, 128}}) {
    const uint64_t f32 = CpuKvCache::bytes(KvDtype::F32, layers, heads * hd, heads, 8192);
    const uint64_t bf16 = CpuKvCache::bytes(KvDtype::BF16, layers, heads * hd, heads, 8192);
    const uint64_t fp8 = CpuKvCache::bytes(KvDtype::FP8, layers, heads * hd, heads, 8192);
    EXPECT_EQ(f32, 2ull * layers * 8192 * heads * hd * 4);
    EXPECT_EQ(bf16 * 2, f32);
    // Codes: one byte per element; scales: 4 bytes per KV head per 32 positions, for K and V of every layer.
    EXPECT_EQ(fp8, 2ull * layers * 8192 * heads * hd + 2ull * layers * (8192 / 32) * heads * 4);
    EXPECT_LT(double(fp8) / double(bf16), 0.502);
  }
  EXPECT_EQ(CpuKvCache::bytes(KvDtype::Default, 1, 8, 1, 10), CpuKvCache::bytes(KvDtype::F32, 1, 8, 1, 10));
}

TEST(CpuKvCache, RowsOutsideTheCacheAreAnError) {
  CpuKvCache c(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim);
  const Rows r = rows(2, 9);
  EXPECT_THROW(c.store(0, kCtx - 1, 2, r.k.data(), r.v.data()), llm::Error);
  EXPECT_THROW(c.store(kLayers, 0, 1, r.k.data(), r.v.data()), llm::Error);
  EXPECT_THROW(c.store(0, -1, 1, r.k.data(), r.v.data()), llm::Error);
  EXPECT_THROW(CpuKvCache(KvDtype::FP8, kLayers, kCtx, kHeads, kHeadDim, 0), llm::Error);
}

}  // namespace
