// Device ops of kernels/ops/ops.h against plain CPU references written here (double accumulation), on random inputs.
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
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "kernels/cuda_check.h"
#include "kernels/ops/argmax_rows.h"
#include "kernels/ops/ops.h"
#include "models/config.h"
#include "models/tensor.h"
#include "device_test_util.h"  // SKIP_WITHOUT_CUDA, DeviceBuffer, random inputs, rel_l2

namespace llm {
namespace {

using namespace gpu_test;  // DeviceBuffer, sync_and_check, random_normal, random_bf16, rel_l2

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
    const std::vector<float> inv_freq = rope_inv_freq(llama3_rope_config(hd));
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

// The token the device picks for u: kept tokens laid out in INDEX order (see kernels/ops/sampling.cu); -1 when u lies
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

// A verify's rows judged on the device: each row's argmax over [0, vocab) at pitch ld (lowest index on ties), the
// non-finite rows flagged, nothing past vocab looked at, poisoned outputs all written; awkward row counts and widths.
TEST(OpsSample, ArgmaxRowsIsEachRowsArgmaxAndFlagsNonFiniteRows) {
  SKIP_WITHOUT_CUDA();
  for (const auto& [rows, vocab, ld] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {3, 1000, 1003}, {9, 49152, 49152}, {17, 128256, 128256}, {65, 32003, 32768}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " ld " + std::to_string(ld));
    std::vector<float> l = random_normal(size_t(rows) * size_t(ld), 3.0f, uint32_t(rows * 7 + vocab));
    std::vector<int> want(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      float* row = l.data() + size_t(r) * size_t(ld);
      for (int j = vocab; j < ld; ++j) row[j] = 1e30f;  // past the vocabulary: never chosen
      if (r % 4 == 1 && vocab > 2) {                     // a tie: the lower index wins
        const float top = *std::max_element(row, row + vocab) + 1.0f;
        row[vocab - 1] = top;
        row[vocab / 2] = top;
      }
      want[size_t(r)] = argmax(row, vocab);
      if (r % 5 == 3) {
        row[size_t(r) % size_t(vocab)] = std::numeric_limits<float>::quiet_NaN();
        want[size_t(r)] = kSampleNonFinite;
      }
      if (r % 7 == 5) {
        row[vocab - 1] = -std::numeric_limits<float>::infinity();
        want[size_t(r)] = kSampleNonFinite;
      }
    }
    DeviceBuffer<float> dl(l);
    DeviceBuffer<int> out(size_t(rows) + 1);
    out.poison();
    argmax_rows_device(dl.get(), rows, size_t(ld), vocab, out.get(), nullptr);
    sync_and_check();
    std::vector<int> got = out.download();
    EXPECT_EQ(got.back(), -1) << "wrote past the rows";
    got.pop_back();
    EXPECT_EQ(got, want);
  }
  DeviceBuffer<float> dl(std::vector<float>(8, 0.0f));
  DeviceBuffer<int> out(size_t(2));
  EXPECT_THROW(argmax_rows_device(dl.get(), 0, 4, 4, out.get(), nullptr), llm::Error);
  EXPECT_THROW(argmax_rows_device(dl.get(), 2, 4, 5, out.get(), nullptr), llm::Error);  // vocab past the pitch
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
  // Random logits, and flat ones (every probability in one radix bin: the kernel's per-warp sums before its shared
  // atomics carry whole warps; the kept set is then the lowest indices).
  struct Case {
    const char* name;
    std::vector<float> logits;
    std::vector<SampleCase> cases;
  };
  const Case all[] = {
      {"random", random_normal(128256, 2.0f, 13),
       {SampleCase{0.8f, 40, 0.95f}, SampleCase{1.0f, 0, 0.9f}, SampleCase{1.5f, 0, 1.0f}, SampleCase{0.6f, 1000, 0.8f}}},
      {"flat", std::vector<float>(128256, 0.25f),
       {SampleCase{1.0f, 40, 1.0f}, SampleCase{0.8f, 1000, 0.95f}, SampleCase{1.0f, 0, 1.0f}}}};
  for (const Case& cs : all) {
  SCOPED_TRACE(cs.name);
  const std::vector<float>& logits = cs.logits;
  DeviceSampler sampler(logits);
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const SampleCase& c : cs.cases) {
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
    if (std::string(cs.name) == "flat" && c.top_k > 0)  // ties kept by lowest index: exactly 0 .. top_k - 1
      EXPECT_EQ(kept.size(), size_t(c.top_k));
  }
  }
}

TEST(OpsSample, GatheredTopKDrawsWhatTheWholeVocabularyPathDraws) {
  SKIP_WITHOUT_CUDA();
  // top-k <= 1024 runs top-p and the draw over the gathered top-k set; top-k 0 or above 1024 over the vocabulary.
  // Where every value outside the top 40 has no mass (e = exp(-40 - ...) < 2^-39, the kernel's fixed-point unit),
  // top-k 40, top-k 0 and top-k 2000 keep the same mass and must draw the same token for every u; the low values are
  // distinct (no ties at the 40th), the high ones hold duplicates (ties inside the set, broken by index).
  for (int vocab : {128256, 1000, 77}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
    for (int i = 0; i < vocab; ++i) logits[size_t(i)] = -40.0f - 0.001f * float(i % 997);
    const std::vector<float> high = random_normal(40, 1.5f, 21);
    std::mt19937 pick(22);
    for (int j = 0; j < 40 && j < vocab; ++j) {
      const int at = int(pick() % uint32_t(vocab));
      logits[size_t(at)] = j % 7 == 3 ? 1.0f : high[size_t(j)];  // some exact ties at 1.0
    }
    DeviceSampler sampler(logits);
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    for (float top_p : {1.0f, 0.9f, 0.5f, 0.0f}) {
      for (int j = 0; j < 60; ++j) {
        const float u = j == 0 ? 0.0f : j == 1 ? std::nextafter(1.0f, 0.0f) : uni(rng);
        const int whole = sampler(1.0f, 0, top_p, u);
        ASSERT_GE(whole, 0);
        EXPECT_EQ(sampler(1.0f, 40, top_p, u), whole) << "top_p " << top_p << " u " << u;
        if (vocab > 2000) EXPECT_EQ(sampler(1.0f, 2000, top_p, u), whole) << "top_p " << top_p << " u " << u;
      }
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
