// The CUDA engine at long context (issue 14): a prompt of N tokens prefilled (in one call, which the engine splits
// into passes of max_prefill_chunk() tokens; in two calls; in ragged passes of 129) gives the logits of the same
// tokens decoded one by one, and so does one decode step after it, at N = 1000 and 8192. synthetic:tiny-long (2
// layers, 4 heads of 64 over 2 KV heads: the tensor-core prefill path; 16384 positions). Tolerance: CudaModel's
// (tests/gpu/model_test.cu): relative L2 of the logits <= 2e-2 (prefill feeds its GEMMs BF16 activations, decode
// its GEMVs FP32 ones; both store the KV cache in BF16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "models/model.h"

using namespace llm;

namespace {

#define REQUIRE_GPU() \
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device"

constexpr double kTol = 2e-2;
constexpr int kShort = 1000, kLong = 8192;
constexpr int kCtx = 8200;  // room for kLong + 1 positions; no multiple of any tile or split

// BOS, then a fixed spread of ids over the vocabulary (as model_test.cu).
std::vector<int> test_tokens(const ModelConfig& c, int n) {
  std::vector<int> t(static_cast<size_t>(n));
  t[0] = (c.bos_id >= 0 && c.bos_id < c.vocab_size) ? c.bos_id : 0;
  for (int i = 1; i < n; ++i) t[size_t(i)] = int((int64_t(i) * 7919 + 13) % c.vocab_size);
  return t;
}

// Relative L2 of got against want; infinite for a size mismatch or a non-finite logit.
double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

BackendOptions options(const std::string& device) {
  BackendOptions o;
  o.device = device;
  o.ctx_size = kCtx;
  o.bf16_weights = device == "cpu";  // the CPU on the weights as the GPU holds them
  return o;
}

}  // namespace

TEST(CudaModelLongContext, PrefillThenDecodeMatchesDecodeSteps) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-long");
  ASSERT_GE(m.config.max_seq_len, kCtx);
  ASSERT_EQ(m.config.head_dim, 64);
  const std::vector<int> toks = test_tokens(m.config, kLong + 1);
  auto eng = make_cuda_engine(m, options("cuda"));
  ASSERT_EQ(eng->ctx_size(), kCtx);
  eng->set_use_graph(true);

  // The reference: every token decoded (graph replays), logits kept at positions N - 1 and N.
  std::map<int, std::vector<float>> by_decode;
  for (int i = 0; i <= kLong; ++i) {
    eng->decode(toks[size_t(i)], i);
    if (i == kShort - 1 || i == kShort || i == kLong - 1 || i == kLong) by_decode[i] = eng->logits();
  }

  // N tokens prefilled, compared at the last prompt token; then token N decoded on the cache prefill wrote.
  const auto prefill_then_decode = [&](const std::string& how, int n, auto&& prefill) {
    SCOPED_TRACE(how + ", N = " + std::to_string(n));
    prefill();
    EXPECT_LE(rel_l2(eng->logits(), by_decode[n - 1]), kTol) << "prefill of N tokens vs N decode steps";
    eng->decode(toks[size_t(n)], n);
    EXPECT_LE(rel_l2(eng->logits(), by_decode[n]), kTol) << "prefill of N tokens, then decode vs N + 1 decode steps";
  };
  for (int n : {kShort, kLong})
    prefill_then_decode("one prefill call", n, [&] { eng->prefill(toks.data(), n, 0); });
  prefill_then_decode("two prefill calls of 4096", kLong, [&] {
    eng->prefill(toks.data(), kLong / 2, 0);
    eng->prefill(toks.data() + kLong / 2, kLong / 2, kLong / 2);
  });
  eng->set_prefill_chunk(std::min(129, eng->max_prefill_chunk()));
  prefill_then_decode("passes of 129 tokens", kShort, [&] { eng->prefill(toks.data(), kShort, 0); });
  eng->set_prefill_chunk(eng->max_prefill_chunk());
}

// The engine's decode at 1000 tokens of context against the CPU reference (FP32 math, K and V rounded to BF16 as
// the GPU stores them): the long-context decode is right, not only consistent with the prefill.
TEST(CudaModelLongContext, DecodeAt1000MatchesCpu) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-long");
  const std::vector<int> toks = test_tokens(m.config, kShort + 1);
  BackendOptions co = options("cpu");
  co.kv_dtype = KvDtype::BF16;
  auto cpu = make_cpu_backend(m, co);
  auto eng = make_cuda_engine(m, options("cuda"));
  for (int i = 0; i <= kShort; ++i) {
    cpu->decode(toks[size_t(i)], i);
    eng->decode(toks[size_t(i)], i);
    if (i % 250 == 0 || i == kShort)
      EXPECT_LE(rel_l2(eng->logits(), cpu->logits()), kTol) << "position " << i;
  }
}
