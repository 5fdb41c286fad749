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
#include "engine_gpu_test_util.h"  // REQUIRE_GPU, test_tokens, rel_l2
#include "models/model.h"

using namespace llm;

namespace {

using llm_gpu_test::rel_l2;
using llm_gpu_test::test_tokens;

constexpr double kTol = 2e-2;
constexpr int kShort = 1000, kLong = 8192;
constexpr int kCtx = 8200;  // room for kLong + 1 positions; no multiple of any tile or split

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
