// Whole-model GPU tests: the CUDA engine (every GEMV mapping, graph and eager) against the CPU reference on identical
// BF16 weights, teacher-forced; prefill against decode; sampling, profiling and the memory check.
// Tolerance: relative L2 of the logits <= 2e-2. The CPU keeps FP32 activations and an FP32 KV cache; the GPU stores
// the KV cache in BF16 and feeds the prefill GEMMs BF16 activations, so logits agree to about 3 significant bits of
// BF16 rounding accumulated over the layers, not bit for bit. Greedy argmax must agree wherever the CPU's top-2
// margin exceeds 0.05 * |max| (a margin BF16 noise cannot bridge).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/gemv_choice.h"  // gemv_plan: the default's BF16 form
#include "measure/kernel_trace.h"  // KernelTrace::built_with_cupti
#include "measure/step_profiler.h"  // install_step_profiler
#include "engine_gpu_test_util.h"  // REQUIRE_GPU, test_tokens, rel_l2
#include "engine/sampler.h"
#include "kernels/gemv/gemv.h"
#include "models/model.h"
#include "models/quantize_model.h"  // the quantized models of the staged-x test

namespace fs = std::filesystem;
using namespace llm;

namespace {

using llm_gpu_test::rel_l2;
using llm_gpu_test::test_tokens;

constexpr double kTol = 2e-2;
constexpr int kTokens = 40;
constexpr int kCtx = 64;

const std::string kStoriesBin = std::string(LLM_TEST_MODELS) + "/stories260K/stories260K.bin";

std::vector<std::string> model_sources() {
  std::vector<std::string> v{"synthetic:tiny-gqa", "synthetic:tiny-hd"};
  v.push_back(kStoriesBin);  // committed under tests/data/models; a missing file fails the load
  return v;
}


BackendOptions cuda_options(const std::string& gemv = "") {
  BackendOptions o;
  o.device = "cuda";
  o.ctx_size = kCtx;
  o.gemv = gemv;
  return o;
}

// CPU logits after each teacher-forced token, on weights rounded to BF16 as the GPU holds them.
std::vector<std::vector<float>> cpu_logits(const Model& m, const std::vector<int>& toks) {
  BackendOptions o;
  o.device = "cpu";
  o.ctx_size = kCtx;
  o.bf16_weights = true;
  auto b = make_cpu_backend(m, o);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < toks.size(); ++i) {
    b->decode(toks[i], int(i));
    out.push_back(b->logits());
  }
  return out;
}

// Compares one position; returns whether the argmax was checked (the CPU's margin was clear).
bool expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return false;
  for (float v : got)
    if (!std::isfinite(v)) {
      ADD_FAILURE() << what << ": non-finite logit";
      return false;
    }
  EXPECT_LE(rel_l2(got, want), kTol) << what;
  const int n = int(want.size());
  const int top1 = argmax(want.data(), n);
  float second = -INFINITY;
  for (int i = 0; i < n; ++i)
    if (i != top1) second = std::max(second, want[size_t(i)]);
  if (want[size_t(top1)] - second <= 0.05f * std::fabs(want[size_t(top1)])) return false;
  EXPECT_EQ(argmax(got.data(), n), top1) << what;
  return true;
}

std::vector<float> decode_all_last(Backend& b, const std::vector<int>& toks) {
  for (size_t i = 0; i < toks.size(); ++i) b.decode(toks[i], int(i));
  return b.logits();
}

}  // namespace

// Every mapping on the graph path against the CPU reference: the first step with a mapping runs eagerly and
// captures, the rest replay the graph, so both the eager warm-up and the replays are compared; a second pass of the
// same positions replays the graph captured by the first.
TEST(CudaModel, TeacherForcedMatchesCpuForEveryMapping) {
  REQUIRE_GPU();
  ASSERT_FALSE(gemv_mappings().empty());
  for (const std::string& src : model_sources()) {
    SCOPED_TRACE(src);
    const Model m = load_model(src);
    const auto toks = test_tokens(m.config, kTokens);
    const auto ref = cpu_logits(m, toks);
    auto eng = make_cuda_engine(m, cuda_options(""));
    EXPECT_EQ(eng->gemv(), std::string(gemv_mapping(gemv_plan("").bf16).name));
    int argmax_checked = 0;
    for (const GemvMapping* map : gemv_mappings()) {
      eng->set_gemv(map->name);
      ASSERT_EQ(eng->gemv(), std::string(map->name));
      for (int pass = 0; pass < 2; ++pass)
        for (int i = 0; i < kTokens; ++i) {
          eng->decode(toks[size_t(i)], i);
          const std::string what = src + " gemv=" + map->name + (pass == 0 && i == 0 ? " eager" : " replay") +
                                   " pos " + std::to_string(i);
          argmax_checked += expect_close(eng->logits(), ref[size_t(i)], what);
        }
    }
    std::printf("%s: argmax compared at %d of %d positions\n", src.c_str(), argmax_checked,
                int(2 * kTokens * gemv_mappings().size()));
    // Dropping the other mappings' copies leaves the current one working.
    eng->release_other_gemvs();
    expect_close(decode_all_last(*eng, toks), ref.back(), src + " after release_other_gemvs");
  }
}

// The RMSNorm fold (EngineTuning::fuse_norm, kernels/gemv/gemv_epilogue.h) against the norm kernels it replaces, every
// mapping, teacher-forced: the same arithmetic in another order, so the logits agree to FP32 rounding, far tighter
// than the CPU comparison above. Measured on the H200 (2026-12-05): <= 2.2e-7 for the lanes-along-K and split-K
// mappings on stories260K, 1.3e-6 on tiny-gqa, up to 3.6e-5 for "thread" (one FP32 running sum per row over K); the
// bound is 1e-4. cuBLAS cannot fold (no epilogue) and runs the norm kernels
// either way. Switching the knob re-captures the graphs.
TEST(CudaModel, RmsNormFoldMatchesTheNormKernels) {
  REQUIRE_GPU();
  for (const std::string& src : model_sources()) {
    SCOPED_TRACE(src);
    const Model m = load_model(src);
    const auto toks = test_tokens(m.config, kTokens);
    auto eng = make_cuda_engine(m, cuda_options(""));
    for (const GemvMapping* map : gemv_mappings()) {
      eng->set_gemv(map->name);
      std::vector<std::vector<float>> by_knob[2];
      int kernels[2] = {0, 0};
      for (bool fold : {false, true}) {
        EngineTuning t;
        t.fuse_norm = fold;
        eng->set_tuning(t);
        for (int i = 0; i < kTokens; ++i) {
          eng->decode(toks[size_t(i)], i);
          by_knob[fold].push_back(eng->logits());
        }
        kernels[fold] = eng->kernels_per_step();
      }
      // The fold removes every norm kernel (two per layer and the final one), where the mapping runs it.
      const int removed = gemv_row(map->form)->bf16_fuses_norm ? 2 * m.config.n_layers + 1 : 0;
      EXPECT_GT(kernels[1], 0);
      EXPECT_EQ(kernels[0] - kernels[1], removed) << map->name << ": " << kernels[0] << " -> " << kernels[1];
      double worst = 0.0;
      for (int i = 0; i < kTokens; ++i) {
        const double e = rel_l2(by_knob[1][size_t(i)], by_knob[0][size_t(i)]);
        worst = std::max(worst, e);
        EXPECT_LE(e, 1e-4) << map->name << " pos " << i;
      }
      std::printf("%s gemv=%s: fold vs norm kernels, worst rel L2 %.2e; kernels per token %d -> %d\n", src.c_str(),
                  map->name, worst, kernels[0], kernels[1]);
    }
  }
}

// RoPE and the KV store folded into the decode attention's launch (EngineTuning::fuse_rope, attention_decode_rope)
// against the RoPE + store kernel before the attention: the same arithmetic, so the logits are bit for bit the same at
// every position (140 positions: the step's row in the first, second and third 64-row split), and the fold removes one
// kernel per layer where the tensor-core decode kernel runs (head_dim 64: tiny-long, SmolLM2's shape with groups of 3)
// and none where it does not (tiny-gqa's head_dim 16 keeps the two launches).
TEST(CudaModel, RopeFoldedIntoAttentionIsBitForBitTheStoreKernel) {
  REQUIRE_GPU();
  constexpr int kSteps = 140;
  for (const std::string src : {"synthetic:tiny-long", "synthetic:smollm2-135m", "synthetic:tiny-gqa"}) {
    SCOPED_TRACE(src);
    const Model m = load_model(src);
    const auto toks = test_tokens(m.config, kSteps);
    BackendOptions o = cuda_options("");
    o.ctx_size = 256;
    auto eng = make_cuda_engine(m, o);
    const bool folds = m.config.head_dim == 64 || m.config.head_dim == 128;
    for (const char* gemv : {"warp", "warp-r2"}) {
      eng->set_gemv(gemv);
      std::vector<std::vector<float>> by_knob[2];
      int kernels[2] = {0, 0};
      for (bool fold : {false, true}) {
        EngineTuning t;
        t.fuse_rope = fold;
        eng->set_tuning(t);
        for (int i = 0; i < kSteps; ++i) {
          eng->decode(toks[size_t(i)], i);
          by_knob[fold].push_back(eng->logits());
        }
        kernels[fold] = eng->kernels_per_step();
      }
      EXPECT_EQ(kernels[0] - kernels[1], folds ? m.config.n_layers : 0) << gemv;
      int differing = 0;
      for (int i = 0; i < kSteps; ++i) {
        const std::vector<float>& a = by_knob[0][size_t(i)];
        const std::vector<float>& b = by_knob[1][size_t(i)];
        ASSERT_EQ(a.size(), b.size());
        for (float v : b) ASSERT_TRUE(std::isfinite(v)) << gemv << " pos " << i;
        differing += std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
      }
      EXPECT_EQ(differing, 0) << gemv << ": positions whose logits differ from the unfolded step";
      std::printf("%s gemv=%s: rope folded into attention, %d of %d positions bit for bit; kernels %d -> %d\n",
                  src.c_str(), gemv, kSteps - differing, kSteps, kernels[0], kernels[1]);
    }
  }
}

// SwiGLU and decode attention's split merge made as the next GEMV stages x (EngineTuning::stage_glu, stage_merge:
// GemvEpilogue::glu, ::merge) against the SwiGLU and merge kernels: the same arithmetic, so the logits are bit for bit
// the same at every position (140 positions: 1 to 3 key splits), each fold alone and both; each removes one kernel per
// layer on the quantized "warp" form and none on "warp-dp4a" (which keeps its own SwiGLU form). Quantized models:
// SmolLM2's shape (head_dim 64, groups of 3: the tensor-core decode attention with RoPE folded in), tiny-gqa (head_dim
// 16: the CUDA-core split kernel, RoPE and the store a launch of their own) and tiny-long.
TEST(CudaModel, SwigluAndSplitMergeStagedAsXAreBitForBitTheirKernels) {
  REQUIRE_GPU();
  constexpr int kSteps = 140;
  for (const std::string src : {"synthetic:smollm2-135m", "synthetic:tiny-gqa", "synthetic:tiny-long"}) {
    for (const char* type : {"q4_1", "q8_0"}) {
      SCOPED_TRACE(src + " " + type);
      Model m = load_model(src);
      quantize_model(m, parse_quantize_type(type));
      const auto toks = test_tokens(m.config, kSteps);
      BackendOptions o = cuda_options("");
      o.ctx_size = 256;
      auto eng = make_cuda_engine(m, o);
      for (const char* gemv : {"warp", "warp-dp4a"}) {
        eng->set_gemv(gemv);
        const bool folds = std::string(gemv) == "warp";
        std::vector<std::vector<float>> logits[4];
        int kernels[4] = {0, 0, 0, 0};
        for (int knobs = 0; knobs < 4; ++knobs) {  // bit 0: stage_glu, bit 1: stage_merge
          EngineTuning t;
          t.stage_glu = (knobs & 1) != 0;
          t.stage_merge = (knobs & 2) != 0;
          eng->set_tuning(t);
          for (int i = 0; i < kSteps; ++i) {
            eng->decode(toks[size_t(i)], i);
            logits[knobs].push_back(eng->logits());
          }
          kernels[knobs] = eng->kernels_per_step();
        }
        const int layers = m.config.n_layers;
        EXPECT_EQ(kernels[0] - kernels[1], folds ? layers : 0) << gemv << ": SwiGLU staged";
        EXPECT_EQ(kernels[0] - kernels[2], folds ? layers : 0) << gemv << ": merge staged";
        EXPECT_EQ(kernels[0] - kernels[3], folds ? 2 * layers : 0) << gemv << ": both";
        for (int knobs = 1; knobs < 4; ++knobs) {
          int differing = 0;
          for (int i = 0; i < kSteps; ++i) {
            const std::vector<float>& a = logits[0][size_t(i)];
            const std::vector<float>& b = logits[knobs][size_t(i)];
            ASSERT_EQ(a.size(), b.size());
            for (float v : b) ASSERT_TRUE(std::isfinite(v)) << gemv << " pos " << i;
            differing += std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
          }
          EXPECT_EQ(differing, 0) << gemv << " knobs " << knobs << ": positions whose logits differ from the kernels'";
        }
        std::printf("%s %s gemv=%s: SwiGLU / merge staged as x, bit for bit over %d positions; kernels %d -> %d / %d "
                    "/ %d\n", src.c_str(), type, gemv, kSteps, kernels[0], kernels[1], kernels[2], kernels[3]);
      }
    }
  }
}

TEST(CudaModel, PrefillMatchesDecode) {
  REQUIRE_GPU();
  for (const std::string& src : model_sources()) {
    SCOPED_TRACE(src);
    const Model m = load_model(src);
    const auto toks = test_tokens(m.config, kTokens);
    const auto ref = cpu_logits(m, toks);
    auto eng = make_cuda_engine(m, cuda_options(""));
    const std::vector<float> by_decode = decode_all_last(*eng, toks);
    expect_close(by_decode, ref.back(), src + " decode");

    eng->prefill(toks.data(), kTokens, 0);
    const std::vector<float> one_pass = eng->logits();
    EXPECT_LE(rel_l2(one_pass, by_decode), kTol) << "prefill in one pass vs decode";
    expect_close(one_pass, ref.back(), src + " prefill vs cpu");

    // Two calls, the second at pos0 > 0 (attends to the cache written by the first).
    eng->prefill(toks.data(), 25, 0);
    eng->prefill(toks.data() + 25, kTokens - 25, 25);
    EXPECT_LE(rel_l2(eng->logits(), by_decode), kTol) << "prefill in two calls";

    // Internal chunking: 40 tokens in passes of 16 (3 chunks, the last partial).
    eng->set_prefill_chunk(16);
    eng->prefill(toks.data(), kTokens, 0);
    EXPECT_LE(rel_l2(eng->logits(), by_decode), kTol) << "prefill in chunks of 16";
    eng->set_prefill_chunk(eng->max_prefill_chunk());

    // Decode continues from a cache written by prefill.
    eng->prefill(toks.data(), kTokens - 1, 0);
    eng->decode(toks.back(), kTokens - 1);
    expect_close(eng->logits(), ref.back(), src + " prefill then decode");
    EXPECT_THROW(eng->set_prefill_chunk(0), Error);
    EXPECT_THROW(eng->prefill(toks.data(), kTokens, kCtx - 10), Error);
  }
}

TEST(CudaModel, SampleOnDevice) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-gqa");
  const auto toks = test_tokens(m.config, 12);
  auto eng = make_cuda_engine(m, cuda_options());
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  SamplerParams topk;
  topk.temperature = 1.0f;
  topk.top_k = 5;
  topk.top_p = 1.0f;
  for (int i = 0; i < int(toks.size()); ++i) {
    eng->decode(toks[size_t(i)], i);
    const std::vector<float> lg = eng->logits();
    EXPECT_EQ(eng->sample(greedy, uint64_t(i)), argmax(lg.data(), int(lg.size()))) << "pos " << i;
    // Top-5 sampling must return one of the 5 largest logits.
    std::vector<int> idx(lg.size());
    for (size_t j = 0; j < idx.size(); ++j) idx[j] = int(j);
    std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                      [&](int a, int b) { return lg[size_t(a)] > lg[size_t(b)]; });
    const int s = eng->sample(topk, uint64_t(i));
    EXPECT_TRUE(std::find(idx.begin(), idx.begin() + 5, s) != idx.begin() + 5) << "pos " << i << " sampled " << s;
  }
}

// The graph path's profile is the kernel timeline of graph replays (CUPTI), whose holes between kernels are 'wait':
// q, k, v, gate, up (the unfused parts) carry no time, qkv, gate_up and norms do, and the parts tile the replay's
// span. Without CUPTI a profiled graph step fails with one line naming it (the graph path has no event fallback), and
// without a profiler hook installed, turning profiling on fails.
TEST(CudaModel, ProfileSplitsTheStep) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-gqa");
  const auto toks = test_tokens(m.config, kTokens);
  const auto ref = cpu_logits(m, toks);
  EXPECT_STREQ(DecodeProfile::part_name(DecodeProfile::kQKV), "qkv");
  EXPECT_STREQ(DecodeProfile::part_name(DecodeProfile::kGateUp), "gate_up");
  auto eng = make_cuda_engine(m, cuda_options(""));
  EXPECT_THROW(eng->set_profiling(true), Error) << "no profiler hook installed";
  install_step_profiler(*eng);
  eng->set_profiling(true);
  if (!KernelTrace::built_with_cupti()) {
    std::string what;
    try {
      eng->decode(toks[0], 0);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("CUPTI"), std::string::npos) << what;
    return;
  }
  for (int i = 0; i < kTokens; ++i) {
    eng->decode(toks[size_t(i)], i);
    expect_close(eng->logits(), ref[size_t(i)], "profiled pos " + std::to_string(i));
  }
  const DecodeProfile p = eng->profile();
  EXPECT_EQ(p.steps, kTokens);
  EXPECT_TRUE(p.graph_timeline);
  double sum = 0.0;
  for (int part = 0; part < DecodeProfile::kParts; ++part) {
    const bool per_matrix = part == DecodeProfile::kQ || part == DecodeProfile::kK || part == DecodeProfile::kV ||
                            part == DecodeProfile::kGate || part == DecodeProfile::kUp;
    // With the RMSNorm fold (the default) no norm kernel runs: its part stays 0.
    if (per_matrix || part == DecodeProfile::kNorm)
      EXPECT_EQ(p.ms[part], 0.0) << DecodeProfile::part_name(part);
    else if (part != DecodeProfile::kWait)  // a timeline's holes may be none
      EXPECT_GT(p.ms[part], 0.0) << DecodeProfile::part_name(part);
    sum += p.ms[part];
  }
  // The regions tile the step: their sum is the total (the replay's span).
  EXPECT_NEAR(sum, p.total_ms, 1e-6 * p.total_ms);
  EXPECT_NEAR(p.gemv_ms() + p.ms[DecodeProfile::kOther] + p.ms[DecodeProfile::kAttention] +
                  p.ms[DecodeProfile::kNorm] + p.ms[DecodeProfile::kWait],
              sum, 1e-9);
  eng->reset_profile();
  EXPECT_EQ(eng->profile().steps, 0);
  eng->set_profiling(false);
}

TEST(CudaModel, GemvBytesPerToken) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-hd");
  const ModelConfig& c = m.config;
  auto eng = make_cuda_engine(m, cuda_options());
  // Per layer: wq [q_dim, dim], wk, wv [kv_dim, dim], wo [dim, q_dim], gate, up [hidden, dim], down [dim, hidden];
  // plus the head [vocab, dim]; BF16 = 2 bytes.
  const size_t per_layer = size_t(2 * c.q_dim() * c.dim + 2 * c.kv_dim() * c.dim + 3 * c.hidden_dim * c.dim);
  EXPECT_EQ(eng->gemv_bytes_per_token(), 2 * (size_t(c.n_layers) * per_layer + size_t(c.vocab_size) * c.dim));
  EXPECT_EQ(eng->gemv_bytes_per_token(), size_t(2) * (2 * (2 * 96 * 48 + 2 * 24 * 48 + 3 * 100 * 48) + 300 * 48));
  EXPECT_GT(eng->device_bytes(), eng->gemv_bytes_per_token());
}

TEST(CudaModel, MemoryCheckFailsBeforeAllocating) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:llama3.1-8b");  // shapes and fills only: no weights generated
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  BackendOptions o = cuda_options();
  o.ctx_size = 100000000;
  try {
    make_cuda_engine(m, o);
    ADD_FAILURE() << "a 100M-position KV cache for an 8B model did not fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("GiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  }
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_LT(double(free0) - double(free1), double(64 << 20)) << "memory held after a failed construction";
}

TEST(CudaModel, OptionErrors) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-gqa");
  EXPECT_THROW(make_cuda_engine(m, cuda_options("no-such-mapping")), Error);
  BackendOptions big = cuda_options();
  big.ctx_size = m.config.max_seq_len + 1;
  EXPECT_THROW(make_cuda_engine(m, big), Error);
  auto b = make_backend(m, cuda_options());
  CudaBackend& cb = as_cuda_backend(*b);
  EXPECT_THROW(cb.set_gemv("no-such-mapping"), Error);
  EXPECT_THROW(b->decode(m.config.vocab_size, 0), Error);
  EXPECT_THROW(b->decode(0, kCtx), Error);
  BackendOptions cpu;
  cpu.device = "cpu";
  cpu.ctx_size = kCtx;
  auto c = make_cpu_backend(m, cpu);
  EXPECT_THROW(as_cuda_backend(*c), Error);
}

TEST(CudaModel, DefaultContextIsTheModelMaximum) {
  REQUIRE_GPU();
  const Model m = load_model("synthetic:tiny-gqa");
  BackendOptions o = cuda_options();
  o.ctx_size = 0;
  auto eng = make_cuda_engine(m, o);
  EXPECT_EQ(eng->ctx_size(), m.config.max_seq_len);
  EXPECT_EQ(eng->max_prefill_chunk(), std::min(2048, m.config.max_seq_len));
}
