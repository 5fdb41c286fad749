// The CUDA engine with --kv-dtype fp8 against the CPU reference with the same FP8 cache form (engine/kv_cache.h;
// the GPU stores the same bytes, kernels/attention/kv_fp8.h), teacher-forced at every position across several FP8 blocks;
// prefill (one call, chunked, two calls) against decode; and the refusal of a head_dim the FP8 attention lacks.
// synthetic:tiny-long: 4 heads of 64 over 2 KV heads (the tensor-core path). Tolerance: CudaModel's 2e-2 relative L2
// of the logits (the GPU's BF16 weights and activations against the CPU's FP32 math on the same BF16 weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine_gpu_test_util.h"  // REQUIRE_GPU, test_tokens, rel_l2
#include "models/model.h"

using namespace llm;

namespace {

using llm_gpu_test::rel_l2;
using llm_gpu_test::test_tokens;

constexpr double kTol = 2e-2;
constexpr int kTokens = 100;  // three full FP8 blocks of 32 and a part
constexpr int kCtx = 160;

BackendOptions options(const std::string& device, KvDtype kv) {
  BackendOptions o;
  o.device = device;
  o.ctx_size = kCtx;
  o.kv_dtype = kv;
  o.bf16_weights = device == "cpu";
  return o;
}

std::vector<std::vector<float>> decode_all(Backend& b, const std::vector<int>& toks) {
  std::vector<std::vector<float>> out;
  for (int i = 0; i < int(toks.size()); ++i) {
    b.decode(toks[size_t(i)], i);
    out.push_back(b.logits());
  }
  return out;
}

}  // namespace

TEST(CudaKvFp8, TeacherForcedMatchesTheCpuFp8CacheAtEveryPosition) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-long");
  ASSERT_EQ(m.config.head_dim, 64);
  const std::vector<int> toks = test_tokens(m.config, kTokens);
  auto cpu = make_backend(m, options("cpu", KvDtype::FP8));
  const auto ref = decode_all(*cpu, toks);
  auto gpu_bf16 = make_cuda_engine(m, options("cuda", KvDtype::BF16));
  const auto bf16 = decode_all(*gpu_bf16, toks);
  // The graph path: the first step runs eagerly (the warm-up) and captures, the rest replay the graph.
  auto eng = make_cuda_engine(m, options("cuda", KvDtype::FP8));
  const auto got = decode_all(*eng, toks);
  double worst = 0.0, moved = 0.0;
  for (int i = 0; i < kTokens; ++i) {
    const double e = rel_l2(got[size_t(i)], ref[size_t(i)]);
    worst = std::max(worst, e);
    EXPECT_LE(e, kTol) << "position " << i;
    moved = std::max(moved, rel_l2(got[size_t(i)], bf16[size_t(i)]));
  }
  std::printf("fp8 KV: worst relative L2 against the CPU's FP8 cache %.2e; largest move from BF16 KV %.2e\n", worst,
              moved);
  EXPECT_GT(moved, 0.0) << "FP8 KV gave BF16 KV's logits exactly: is the FP8 cache in use?";
}

TEST(CudaKvFp8, PrefillMatchesDecode) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-long");
  const std::vector<int> toks = test_tokens(m.config, kTokens);
  auto eng = make_cuda_engine(m, options("cuda", KvDtype::FP8));
  const auto by_decode = decode_all(*eng, toks);

  eng->prefill(toks.data(), kTokens, 0);
  EXPECT_LE(rel_l2(eng->logits(), by_decode.back()), kTol) << "one call";

  eng->set_prefill_chunk(16);  // passes that start and end inside FP8 blocks
  eng->prefill(toks.data(), kTokens, 0);
  EXPECT_LE(rel_l2(eng->logits(), by_decode.back()), kTol) << "passes of 16";
  eng->set_prefill_chunk(eng->max_prefill_chunk());

  eng->prefill(toks.data(), 45, 0);  // the second call starts mid-block, on the open block's kept rows
  eng->prefill(toks.data() + 45, kTokens - 45, 45);
  EXPECT_LE(rel_l2(eng->logits(), by_decode.back()), kTol) << "two calls";

  eng->prefill(toks.data(), kTokens - 1, 0);  // decode continues from the cache prefill wrote
  eng->decode(toks.back(), kTokens - 1);
  EXPECT_LE(rel_l2(eng->logits(), by_decode.back()), kTol) << "prefill then decode";
}

TEST(CudaKvFp8, OtherHeadDimsAreRefusedByName) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-gqa");  // head_dim 16
  try {
    make_cuda_engine(m, options("cuda", KvDtype::FP8));
    FAIL() << "head_dim 16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-dtype fp8: the CUDA engine's FP8 attention needs head_dim 64 or 128"),
              std::string::npos)
        << e.what();
  }
}
