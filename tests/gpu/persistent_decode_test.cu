// The persistent decode path (--decode persistent, kernels/persistent/persistent_decode.h) against the graph path with the same
// GEMV mapping: teacher-forced logits within relative L2 1e-5 (2e-5 asserted: kFp32AttentionBar) at every position
// (stories260K, the synthetic shapes, awkward shapes, a context long enough for split-KV attention and its merge);
// bitwise repeatability over 20 runs of 1,000 steps; a wait that never ends becomes an error (and the engine stays
// usable); refusals by name; the profile adds up; a chat reply interrupted like Ctrl-C leaves the engine usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../cpu/default_model_util.h"
#include "../cpu/models_test_util.h"
#include "../cpu/tiny_quant_gguf_util.h"
#include "chat/session.h"
#include "chat/template.h"
#include "core/error.h"
#include "engine/cuda_backend.h"
#include "engine/decode_loop.h"
#include "engine/gemv_choice.h"  // quant_summary, gemv_refusal
#include "engine/generate.h"
#include "measure/kernel_trace.h"  // KernelTrace::built_with_cupti
#include "measure/step_profiler.h"  // install_step_profiler
#include "models/model.h"
#include "models/quantize_model.h"  // the cluster form's quantized cases
#include "tests/gpu/engine_gpu_test_util.h"
#include "tokenizer/load.h"

using namespace llm;
using llm_gpu_test::rel_l2;
using llm_gpu_test::test_tokens;

namespace {

Model stories260k() { return load_model(std::string(LLM_TEST_MODELS) + "/stories260K/stories260K.bin"); }

BackendOptions cuda_options(const std::string& gemv, int ctx, bool persistent, const EngineTuning& tuning = {}) {
  BackendOptions bo;
  bo.device = "cuda";
  bo.ctx_size = ctx;
  bo.gemv = gemv;
  bo.persistent = persistent;
  bo.tuning = tuning;
  return bo;
}

// The graph path runs head_dim 64 and 128 on the tensor-core attention (Q and P as two BF16 terms each: ~5e-6 from
// exact per call), the persistent path on FP32 CUDA cores, like every other head size on both paths. Where both use
// FP32 attention the logits must agree to kFp32AttentionBar; with the tensor-core kernel on the graph side the two
// differ by what that kernel's error grows to over the layers (3e-4 on a random 30-layer model, 1.5e-3 on the real
// SmolLM2), so there the bar is that the persistent path is no farther than the graph path from the CPU reference
// (the exact one) where that runs (and within 1e-2 of the graph path), else within 1e-3 of the graph path.
// A small quantized model: head_dim 32 (both paths run FP32 attention), a GQA group of 4, K = 256 and 768 (the
// K-quants' 256 per block), an odd vocabulary; every matrix in type t.
llm_test::TinyQuantSpec small_quant_spec(uint32_t t, uint32_t seed, int ctx) {
  llm_test::TinyQuantSpec s = llm_test::TinyQuantSpec::all(t);
  s.dim = 256;
  s.hidden = 768;
  s.heads = 8;
  s.kv_heads = 2;
  s.vocab = 301;
  s.ctx = ctx;
  s.seed = seed;
  return s;
}

bool graph_tensor_core_attention(const ModelConfig& c) { return c.head_dim == 64 || c.head_dim == 128; }
// Where both paths run FP32 attention: the issue's bar is 1e-5, and the runs stay within it except where a K split
// moves a value across a BF16 rounding boundary of the KV cache (tiny-odd warp-r2, whose down rows of 38 chunks the
// persistent ring splits in two: 1.02e-5 at one position, 2026-12-02). The bar is 2e-5, and where the CPU reference
// runs, the persistent path must also be no farther from it than the graph path.
constexpr double kFp32AttentionBar = 2e-5;

// Worst relative L2 distances over the positions of one teacher-forced run: persistent vs graph (same mapping), and
// each of them vs the CPU reference on the same BF16 weights and BF16 KV cache (when it ran).
struct Distances {
  double pers_graph = 0.0, graph_cpu = 0.0, pers_cpu = 0.0;
  double graph_cpu_mean = 0.0, pers_cpu_mean = 0.0;  // the same two over every compared position, averaged
  int apart = 0;  // positions where persistent vs graph exceeds 1e-4
};

// Prefills n_prefill tokens on both paths, then decodes n_steps teacher-forced tokens, comparing the logits after
// prefill and at every decode position.
// bar > 0 replaces the per-position bound on persistent vs graph. one_step: before each decode step both paths (and
// the CPU reference) prefill the tokens before it again (the same prefill kernels on both GPU paths: the same KV cache),
// so each comparison is one decode step from the same state.
// tuning: the persistent engine's knobs (EngineTuning).
Distances distances(const Model& m, const std::string& gemv, int ctx, int n_prefill, int n_steps, bool with_cpu,
                    bool dequantize = false, double bar = 0.0, bool one_step = false,
                    const EngineTuning& tuning = {}) {
  // The graph side without the RMSNorm fold: the persistent kernel runs the norms as the unfused graph does, so the
  // two paths do the same arithmetic (the fold's own error: CudaModel.RmsNormFoldMatchesTheNormKernels). Both sides
  // take the rest of `tuning` (its prefill knobs: both prefill through the same kernels).
  EngineTuning unfused = tuning;
  unfused.fuse_norm = false;
  BackendOptions go = cuda_options(gemv, ctx, false, unfused), po = cuda_options(gemv, ctx, true, tuning);
  go.dequantize = po.dequantize = dequantize;
  auto graph = make_cuda_engine(m, go);
  auto pers = make_cuda_engine(m, po);
  EXPECT_TRUE(pers->persistent());
  EXPECT_FALSE(graph->persistent());
  std::unique_ptr<Backend> cpu;
  if (with_cpu) {
    BackendOptions bo;
    bo.ctx_size = ctx;
    bo.bf16_weights = dequantize || quant_summary(m).empty();  // weights kept quantized: their exact values
    bo.kv_dtype = KvDtype::BF16;
    cpu = make_cpu_backend(m, bo);
  }
  const std::vector<int> t = test_tokens(m.config, n_prefill + n_steps);
  Distances w;
  int compared = 0;
  auto compare = [&](int pos) {
    const std::vector<float> g = graph->logits(), p = pers->logits();
    const double d = rel_l2(p, g);
    EXPECT_LE(d, bar > 0 ? bar : !graph_tensor_core_attention(m.config) ? kFp32AttentionBar : cpu ? 1e-2 : 1e-3)
        << "position " << pos;
    w.pers_graph = std::max(w.pers_graph, d);
    w.apart += d > 1e-4;
    if (cpu) {
      const std::vector<float> c = cpu->logits();
      const double gc = rel_l2(g, c), pc = rel_l2(p, c);
      w.graph_cpu = std::max(w.graph_cpu, gc);
      w.pers_cpu = std::max(w.pers_cpu, pc);
      w.graph_cpu_mean += gc;
      w.pers_cpu_mean += pc;
      ++compared;
    }
  };
  if (n_prefill > 0) {
    graph->prefill(t.data(), n_prefill, 0);
    pers->prefill(t.data(), n_prefill, 0);
    if (cpu) cpu->prefill(t.data(), n_prefill, 0);
    compare(n_prefill - 1);
  }
  for (int i = 0; i < n_steps; ++i) {
    const int pos = n_prefill + i;
    if (one_step && i > 0) {
      graph->prefill(t.data(), pos, 0);
      pers->prefill(t.data(), pos, 0);
      if (cpu) cpu->prefill(t.data(), pos, 0);
    }
    graph->decode(t[size_t(pos)], pos);
    pers->decode(t[size_t(pos)], pos);
    if (cpu) cpu->decode(t[size_t(pos)], pos);
    compare(pos);
  }
  if (compared > 0) {
    w.graph_cpu_mean /= compared;
    w.pers_cpu_mean /= compared;
  }
  std::printf("  %s: persistent vs graph %.3g; vs the CPU reference (worst / mean): graph %.3g / %.3g, persistent "
              "%.3g / %.3g\n",
              gemv.c_str(), w.pers_graph, w.graph_cpu, w.graph_cpu_mean, w.pers_cpu, w.pers_cpu_mean);
  // The persistent path must be no less accurate than the graph path. Judged on the mean over positions within 5%,
  // and on the worst position within 10%: on the real SmolLM2 kept at Q4_1 (H200, 2026-12-02) the two GPU paths sit
  // 0.0019 apart at worst and both ~0.015 from the CPU reference (an error they mostly share), so the worst position
  // alone moves by more than 5% between them (graph 0.0153, persistent 0.0161: the first run there, which failed).
  if (cpu) {
    EXPECT_LE(w.pers_cpu_mean, 1.05 * w.graph_cpu_mean + 1e-6) << "persistent farther from the CPU reference";
    EXPECT_LE(w.pers_cpu, 1.10 * w.graph_cpu + 1e-6) << "persistent farther from the CPU reference (worst position)";
  }
  return w;
}
double worst_distance(const Model& m, const std::string& gemv, int ctx, int n_prefill, int n_steps) {
  return distances(m, gemv, ctx, n_prefill, n_steps, m.config.dim <= 1024).pers_graph;
}

// EngineTuning::persistent_all_forms runs the quantized kernel with code for every form instead of the one for the
// model's forms (the one picked by default).
EngineTuning all_forms() {
  EngineTuning t;
  t.persistent_all_forms = true;
  return t;
}

// The kernel for the model's quantized forms and the one with every form: the same tasks in the same order, compiled
// apart (the compiler may fuse a multiply and an add differently in each, so not always the same bits: 2026-12-02 on
// the H200, Q4_K, Q8_0 and Q5_0 differed), at every decode step within the 1e-5 bar of FP32 attention.
void expect_forms_kernels_agree(const Model& m, const std::string& gemv, int ctx, int n_prefill, int n_steps) {
  auto picked = make_cuda_engine(m, cuda_options(gemv, ctx, true));
  std::unique_ptr<Backend> all = make_cuda_engine(m, cuda_options(gemv, ctx, true, all_forms()));
  const std::vector<int> t = test_tokens(m.config, n_prefill + n_steps);
  double worst = 0.0;
  picked->prefill(t.data(), n_prefill, 0);
  all->prefill(t.data(), n_prefill, 0);
  for (int i = 0; i < n_steps; ++i) {
    const int pos = n_prefill + i;
    picked->decode(t[size_t(pos)], pos);
    all->decode(t[size_t(pos)], pos);
    const std::vector<float> a = picked->logits(), b = all->logits();
    ASSERT_EQ(a.size(), b.size());
    const double d = rel_l2(a, b);
    worst = std::max(worst, d);
    ASSERT_LE(d, 1e-5) << "position " << pos;
  }
  std::printf("  %s: the picked forms' kernel vs the all-forms kernel: worst rel L2 %.3g\n", gemv.c_str(), worst);
}

TEST(PersistentDecode, MatchesGraphPathOnStories260K) {
  REQUIRE_GPU();
  const Model m = stories260k();
  for (const char* gemv : {"warp-r2", "warp", "warp-few"}) {
    SCOPED_TRACE(gemv);
    const double d = worst_distance(m, gemv, 256, 0, 100);
    std::printf("stories260K %s: worst rel L2 %.3g over 200 positions\n", gemv, d);
  }
}

// Greedy sampling runs inside the persistent step (its last block emits the argmax): at every teacher-forced position
// the id is the host's argmax of the same logits (lowest index on ties), a sampled temperature still runs the sample
// kernel on them, and a greedy decode loop gives the graph path's tokens. stories260K (vocab 512), tiny-odd (1,001:
// a head unit with one row), smollm2-135m (49,152).
TEST(PersistentDecode, GreedySampleInTheKernelIsTheArgmaxOfItsLogits) {
  REQUIRE_GPU();
  std::vector<Model> models;
  models.push_back(stories260k());
  models.push_back(load_synthetic("tiny-odd", 9));
  models.push_back(load_synthetic("smollm2-135m", 9));
  for (const Model& m : models) {
    SCOPED_TRACE(m.source);
    auto pers = make_cuda_engine(m, cuda_options("warp-r2", 128, true));
    auto graph = make_cuda_engine(m, cuda_options("warp-r2", 128, false));
    ASSERT_TRUE(pers->persistent());
    const std::vector<int> t = test_tokens(m.config, 40);
    const SamplerParams greedy{0.0f, 0, 1.0f, 1}, warm{1.5f, 0, 1.0f, 3};  // temperature, top_k, top_p, seed
    int differ = 0;
    for (int pos = 0; pos < 40; ++pos) {
      pers->decode(t[size_t(pos)], pos);
      const std::vector<float> l = pers->logits();
      const int want = int(std::max_element(l.begin(), l.end()) - l.begin());  // the first maximum
      ASSERT_EQ(pers->sample(greedy, uint64_t(pos)), want) << "position " << pos;
      const int drawn = pers->sample(warm, uint64_t(pos));  // the sample kernel on the same logits
      ASSERT_GE(drawn, 0);
      ASSERT_LT(drawn, m.config.vocab_size);
      differ += drawn != want;
    }
    EXPECT_GT(differ, 0) << "temperature 1.5 drew the argmax at all 40 positions";
    DecodeLoopOptions o;
    o.sampler = greedy;
    o.max_new = 50;
    const std::vector<int> prompt(t.begin(), t.begin() + 3);
    const DecodeLoopResult rp = decode_loop(*pers, prompt, o, [](int) { return true; });
    const DecodeLoopResult rg = decode_loop(*graph, prompt, o, [](int) { return true; });
    EXPECT_EQ(rp.tokens, rg.tokens);
    EXPECT_EQ(rp.tokens.size(), 50u);
  }
}

TEST(PersistentDecode, MatchesGraphPathOnSyntheticAndAwkwardShapes) {
  REQUIRE_GPU();
  // tiny-odd: vocabulary 1001, hidden 300 (no multiple of 8), a GQA group of 5, q_dim 160 != dim 200.
  for (const char* name : {"tiny-gqa", "tiny-odd", "smollm2-135m"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 5);
    for (const char* gemv : {"warp-r2", "warp"}) {
      SCOPED_TRACE(gemv);
      const double d = worst_distance(m, gemv, 256, 17, 60);
      std::printf("%s %s: worst rel L2 %.3g\n", name, gemv, d);
    }
  }
}

TEST(PersistentDecode, MatchesGraphPathOnTheLargerShapes) {
  REQUIRE_GPU();
  for (const char* name : {"tinyllama-1.1b", "llama3.1-8b"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 7);
    const double d = worst_distance(m, "warp-r2", 1024, 40, 8);
    std::printf("%s warp-r2: worst rel L2 %.3g\n", name, d);
  }
}

// Weights kept quantized: the persistent kernel runs the quantized "warp" mapping's planes with its lane code, one
// form per matrix. Every type alone, types mixed across matrices (BF16 among them), a tied quantized head, against
// the graph path's quantized "warp" kernels and the CPU reference on the exact weights. head_dim 32 (both paths run
// FP32 attention), a GQA group of 4, K = 256 and 768 (the K-quants' 256 per block), an odd vocabulary (a head unit
// with one row). The bar is 1e-4, not 1e-5: the two paths split K differently, and with a per-group min (Q4_1, Q5_1)
// each dot is a difference of large terms, so summation order alone moves these random models' logits by up to
// ~6e-5 (Q4_0 and Q8_0: 3e-7); the persistent path must also be no farther than the graph path from the reference.
// "warp-dp4a" (x quantized to int8 per 32 by each stage, as the graph path's kernels do): both paths round the same
// x to int8, but their norms sum the squares in different orders, so now and then a value lands on the other side of
// a rounding boundary and moves by a step of its block (1/127 of the block's largest). Carried on through the KV cache,
// one such step moved these random models' later logits by up to 1.4e-2 (2026-12-02, teacher-forced over 40 steps:
// as far apart as each path is from the CPU reference). So dp4a is compared one decode step from the same state
// (distances' one_step): at most 3 of the 25 positions may be more than 1e-4 apart (measured: one, Q8_0 position 44,
// 1.1e-2; every other position of every case within 1.3e-6), none more than 5e-2 (the int8 rounding's own size), and
// the persistent path must be no farther from the CPU reference (which sees x unrounded) than the graph path.
TEST(PersistentDecode, MatchesGraphPathOnQuantizedWeights) {
  REQUIRE_GPU();
  using llm_test::TinyQuantSpec;
  auto spec = [](uint32_t t, uint32_t seed) { return small_quant_spec(t, seed, 512); };
  struct Case {
    std::string name;
    TinyQuantSpec s;
  };
  std::vector<Case> cases;
  const std::pair<const char*, uint32_t> types[] = {
      {"Q4_0", llm_test::kTqQ4_0}, {"Q4_1", llm_test::kTqQ4_1}, {"Q4_K", llm_test::kTqQ4_K}, {"Q8_0", llm_test::kTqQ8_0},
      {"Q5_0", llm_test::kTqQ5_0}, {"Q5_1", llm_test::kTqQ5_1}, {"Q6_K", llm_test::kTqQ6_K},
      {"Q5_K", llm_test::kTqQ5_K}};
  for (size_t i = 0; i < std::size(types); ++i) cases.push_back({std::string("all ") + types[i].first,
                                                                  spec(types[i].second, uint32_t(20 + i))});
  {
    TinyQuantSpec s = spec(llm_test::kTqQ4_1, 31);  // one type per fused group, a different one per matrix
    s.wo = llm_test::kTqQ5_0;
    s.gate = s.up = llm_test::kTqQ4_K;
    s.down = llm_test::kTqQ6_K;
    s.head = llm_test::kTqQ8_0;
    cases.push_back({"q|k|v Q4_1, o Q5_0, gate|up Q4_K, down Q6_K, head Q8_0", s});
  }
  {
    TinyQuantSpec s = spec(llm_test::kTqQ5_1, 32);  // BF16 matrices beside quantized ones
    s.wo = llm_test::kTqF32;
    s.gate = s.up = llm_test::kTqQ4_0;
    s.down = llm_test::kTqF16;
    s.head = llm_test::kTqF32;
    cases.push_back({"q|k|v Q5_1, o F32, gate|up Q4_0, down F16, head F32", s});
  }
  {
    TinyQuantSpec s = spec(llm_test::kTqQ4_K, 34);  // Q4_K_M's layers: q|k|v in two types, three parts
    s.wv = s.down = s.head = llm_test::kTqQ6_K;
    cases.push_back({"Q4_K_M: q|k Q4_K, v Q6_K, gate|up Q4_K, down Q6_K, head Q6_K", s});
  }
  {
    TinyQuantSpec s = spec(llm_test::kTqQ4_K, 36);  // a 70B's Q4_K_M layers: v in Q5_K (the all-forms kernel)
    s.wv = llm_test::kTqQ5_K;
    s.down = s.head = llm_test::kTqQ6_K;
    cases.push_back({"70B Q4_K_M: q|k Q4_K, v Q5_K, gate|up Q4_K, down Q6_K, head Q6_K", s});
  }
  {
    TinyQuantSpec s = spec(llm_test::kTqQ8_0, 35);  // q|k|v in three parts, one of them BF16
    s.wk = llm_test::kTqQ4_0;
    s.wv = llm_test::kTqF16;
    cases.push_back({"q Q8_0, k Q4_0, v F16", s});
  }
  {
    TinyQuantSpec s = spec(llm_test::kTqQ4_0, 33);  // the head is the Q8_0 embedding
    s.tied = true;
    s.embd = llm_test::kTqQ8_0;
    cases.push_back({"tied Q8_0 embedding, Q4_0 layers", s});
  }
  llm_test::TempDir tmp;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    llm_test::write_file(tmp.path() / "q.gguf", llm_test::tiny_quant_gguf(c.s).quant.build());
    const Model m = load_model(tmp.str("q.gguf"));
    ASSERT_EQ(m.config.head_dim, 32);
    double warp_cpu = 0.0;  // "warp"'s persistent distance from the CPU reference
    for (const char* gemv : {"warp", "warp-dp4a"}) {
      SCOPED_TRACE(gemv);
      const bool dp4a = std::string(gemv) == "warp-dp4a";
      // warp-dp4a has no form for the BF16 matrices here
      if (dp4a && !gemv_refusal(gemv_plan(gemv), m, false).empty()) continue;
      // Prefill dequantizes (batch rows 0): a short prefill on the batch-k GEMV rounds its activations to int8 as
      // warp-dp4a does, which would put that rounding into "warp"'s KV cache too (its worst distance from the CPU
      // rose to 1.5x dp4a's: this test failed on the H100, 2026-12-05) and hide what is asserted below.
      EngineTuning exact_prefill;
      exact_prefill.quant_batch_rows = 0;
      const Distances d =
          distances(m, gemv, 512, 40, dp4a ? 24 : 40, true, false, dp4a ? 5e-2 : 1e-4, dp4a, exact_prefill);
      if (dp4a) EXPECT_LE(d.apart, 3);
      std::printf("%s: persistent vs graph (quantized %s) worst rel L2 %.3g; vs the CPU reference (exact weights): "
                  "graph %.3g, persistent %.3g\n",
                  c.name.c_str(), gemv, d.pers_graph, d.graph_cpu, d.pers_cpu);
      // The int8 x really ran: "warp-dp4a" is farther from the unrounded reference than "warp" (2.8-4.1x, 2026-12-02).
      if (dp4a) EXPECT_GT(d.pers_cpu, 2 * warp_cpu);
      warp_cpu = d.pers_cpu;
      expect_forms_kernels_agree(m, gemv, 512, 20, 20);
    }
  }
  // gate and up in two types are refused by name (a gate|up unit pairs row i of each).
  TinyQuantSpec mixed = spec(llm_test::kTqQ8_0, 36);
  mixed.up = llm_test::kTqQ4_0;
  llm_test::write_file(tmp.path() / "mixed.gguf", llm_test::tiny_quant_gguf(mixed).quant.build());
  std::string what;
  try {
    make_cuda_engine(load_model(tmp.str("mixed.gguf")), cuda_options("warp", 64, true));
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("gate and up in one weight type"), std::string::npos) << what;
}

// The real default model (trained weights, dequantized to BF16 on both paths and on the CPU reference): a 32-token
// prompt and 64 teacher-forced steps, against the graph path and against the CPU reference.
TEST(PersistentDecode, MatchesGraphPathOnSmolLM2) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const Model m = load_model(llm_test::smollm2_path());
  const Distances d = distances(m, "warp-r2", 512, 32, 64, true, true);
  std::printf("SmolLM2-135M-Instruct (dequantized): persistent vs graph %.3g; vs the CPU reference: graph %.3g, "
              "persistent %.3g\n",
              d.pers_graph, d.graph_cpu, d.pers_cpu);
}

// The real default model in its native Q4_1, kept quantized: the persistent path against the graph path's quantized
// "warp" kernels and against the CPU reference (the blocks dequantized exactly).
TEST(PersistentDecode, MatchesGraphPathOnSmolLM2KeptQuantized) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const Model m = load_model(llm_test::smollm2_path());
  ASSERT_FALSE(quant_summary(m).empty());
  const Distances d = distances(m, "warp", 512, 32, 64, true, false);
  std::printf("SmolLM2-135M-Instruct (Q4_1 kept): persistent vs graph %.3g; vs the CPU reference: graph %.3g, "
              "persistent %.3g\n",
              d.pers_graph, d.graph_cpu, d.pers_cpu);
}

// Past a few hundred positions attention splits each kv head's keys over several blocks and the last one merges them.
TEST(PersistentDecode, MatchesGraphPathWithSplitKeysAndMerge) {
  REQUIRE_GPU();
  for (const char* name : {"tiny-long", "tiny-odd"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 11);
    const double d = worst_distance(m, "warp-r2", 4096, 3000, 24);
    std::printf("%s after 3000 prefilled: worst rel L2 %.3g\n", name, d);
  }
}

// Each block keeps the rows of x it owns in shared memory for the residual epilogues, up to 512 rows; a block owning
// more (few blocks, a wide dim) reads them from L2 instead. EngineTuning::persistent_max_blocks caps the grid: on one
// block the SmolLM2 shape's 576 rows take the L2 path, on two blocks (288 rows each) the shared-memory one with a
// second block starting at row 288. Both must match the graph path.
TEST(PersistentDecode, MatchesGraphPathOnFewBlocks) {
  REQUIRE_GPU();
  const Model m = load_synthetic("smollm2-135m", 13);
  for (int blocks : {1, 2}) {
    SCOPED_TRACE(blocks);
    EngineTuning few;
    few.persistent_max_blocks = blocks;  // read when the engine first switches to the persistent path
    const double d = distances(m, "warp-r2", 256, 5, 4, false, false, 0.0, false, few).pers_graph;
    std::printf("smollm2-135m on %d block(s): worst rel L2 %.3g\n", blocks, d);
  }
}

// One greedy run on the persistent path: after prefilling `prompt`, `steps` decode steps; per step the token and an
// FNV-1a hash of the logits' bytes (every bit counts).
std::vector<std::pair<int, uint64_t>> greedy_run(CudaBackend& b, const std::vector<int>& prompt, int steps, int ctx) {
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  std::vector<std::pair<int, uint64_t>> out;
  int pos = 0;
  if (!prompt.empty()) {
    b.prefill(prompt.data(), int(prompt.size()), 0);
    pos = int(prompt.size());
  }
  int tok = b.sample(greedy, 0);
  for (int i = 0; i < steps; ++i, ++pos) {
    b.decode(tok, pos % ctx);  // past the context: round to its start (the same sequence every run)
    const std::vector<float> l = b.logits();
    uint64_t h = 1469598103934665603ull;
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(l.data());
    for (size_t j = 0; j < l.size() * sizeof(float); ++j) h = (h ^ bytes[j]) * 1099511628211ull;
    tok = b.sample(greedy, uint64_t(i + 1));
    out.emplace_back(tok, h);
  }
  return out;
}

// 20 runs of 1,000 greedy steps: the same tokens and bit-identical logits every time (the counters and the split
// merge must not make the result depend on which block arrives first). stories260K from BOS; tiny-long after a
// 3,000-token prompt, where every step splits the keys and merges.
TEST(PersistentDecode, ThousandStepsTwentyTimesAreBitwiseIdentical) {
  REQUIRE_GPU();
  struct Case {
    Model m;
    int prompt, ctx;
  };
  std::vector<Case> cases;
  cases.push_back({stories260k(), 0, 512});
  cases.push_back({load_synthetic("tiny-long", 4), 3000, 4096});
  for (Case& c : cases) {
    SCOPED_TRACE(c.m.source);
    auto b = make_cuda_engine(c.m, cuda_options("warp-r2", c.ctx, true));
    std::vector<int> prompt = test_tokens(c.m.config, std::max(c.prompt, 1));
    if (c.prompt == 0) prompt.resize(1);  // BOS alone
    const auto ref = greedy_run(*b, prompt, 1000, c.ctx);
    for (int run = 1; run < 20; ++run) ASSERT_EQ(greedy_run(*b, prompt, 1000, c.ctx), ref) << "run " << run;
  }
}

// The cluster form (EngineTuning::persistent_cluster): the same kernel on a grid of one cluster, its stages meeting at
// the cluster barrier instead of counters in global memory. The partition of the work depends on the grid alone, so it
// is the counter form capped at as many blocks (EngineTuning::persistent_max_blocks) bit for bit: every logit at every
// teacher-forced step and every greedy id sampled in the kernel, with the L2 prefetch on or off (a hint: no value
// changes). A failure here is a wait the barrier does not order (a stage reading what another block has not written).
void expect_cluster_is_the_counter_form(const Model& m, const std::string& gemv, int ctx, int n_prefill, int n_steps,
                                        int cluster, int prefetch) {
  SCOPED_TRACE(gemv + " cluster " + std::to_string(cluster) + " prefetch " + std::to_string(prefetch));
  EngineTuning counters, clustered;
  counters.persistent_max_blocks = cluster;
  clustered.persistent_cluster = cluster;
  clustered.persistent_prefetch = prefetch;
  clustered.cluster_split_head = false;  // the cluster's blocks run the head as the counter form does
  auto a = make_cuda_engine(m, cuda_options(gemv, ctx, true, counters));
  auto b = make_cuda_engine(m, cuda_options(gemv, ctx, true, clustered));
  const std::vector<int> t = test_tokens(m.config, n_prefill + n_steps);
  a->prefill(t.data(), n_prefill, 0);
  b->prefill(t.data(), n_prefill, 0);
  SamplerParams greedy;
  greedy.temperature = 0.0f;
  for (int i = 0; i < n_steps; ++i) {
    const int pos = n_prefill + i;
    a->decode(t[size_t(pos)], pos);
    b->decode(t[size_t(pos)], pos);
    const std::vector<float> la = a->logits(), lb = b->logits();
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
        << "position " << pos << ": rel L2 " << rel_l2(lb, la);
    ASSERT_EQ(a->sample(greedy, uint64_t(i)), b->sample(greedy, uint64_t(i))) << "position " << pos;
  }
}

TEST(PersistentDecode, ClusterFormIsTheCounterFormOnItsGridBitForBit) {
  REQUIRE_GPU();
  const Model smol = load_synthetic("smollm2-135m", 17);
  for (int cluster : {8, 16})
    for (int prefetch : {0, 2}) expect_cluster_is_the_counter_form(smol, "warp-r2", 256, 5, 6, cluster, prefetch);
  expect_cluster_is_the_counter_form(stories260k(), "warp-r2", 512, 3, 20, 16, 1);
  // Past a few hundred positions the keys split over the blocks and the last block out merges them.
  expect_cluster_is_the_counter_form(load_synthetic("tiny-long", 4), "warp-r2", 4096, 3000, 6, 16, 2);
  expect_cluster_is_the_counter_form(load_synthetic("tiny-odd", 4), "warp", 1024, 600, 6, 8, 1);
  // Quantized: SmolLM2's shape in Q4_1 (the default file's type) and Q4_0 on both lane codes; Q4_K_M's layers (q|k|v
  // in three parts of two types: the wait before the first part only).
  for (const char* type : {"q4_1", "q4_0"}) {
    SCOPED_TRACE(type);
    Model q = load_synthetic("smollm2-135m", 19);
    quantize_model(q, parse_quantize_type(type));
    for (const char* gemv : {"warp", "warp-dp4a"}) expect_cluster_is_the_counter_form(q, gemv, 512, 40, 6, 16, 2);
  }
  llm_test::TinyQuantSpec s = small_quant_spec(llm_test::kTqQ4_K, 44, 512);
  s.wv = s.down = s.head = llm_test::kTqQ6_K;
  llm_test::TempDir tmp;
  llm_test::write_file(tmp.path() / "q.gguf", llm_test::tiny_quant_gguf(s).quant.build());
  const Model km = load_model(tmp.str("q.gguf"));
  for (const char* gemv : {"warp", "warp-dp4a"}) expect_cluster_is_the_counter_form(km, gemv, 512, 20, 6, 8, 1);
}

// The cluster form's default, the head split off (EngineTuning::cluster_split_head): the kernel ends at the final
// norm and the mapping's head GEMV runs over every SM. Other summation orders than the counter form's head, so within
// relative L2 1e-5 at every teacher-forced step with the FP32 lanes (the int8 x of warp-dp4a rounds the norm's last-bit
// differences: 5e-2, as the dp4a cases above), and the ring's greedy sample after it is the argmax of its logits.
TEST(PersistentDecode, ClusterFormWithTheHeadSplitOffMatchesTheCounterForm) {
  REQUIRE_GPU();
  struct Case {
    Model m;
    const char* gemv;
    double bar;
  };
  std::vector<Case> cases;
  cases.push_back({load_synthetic("smollm2-135m", 23), "warp-r2", 1e-5});
  for (const char* gemv : {"warp", "warp-dp4a"}) {
    Model q = load_synthetic("smollm2-135m", 29);
    quantize_model(q, parse_quantize_type("q4_0"));
    cases.push_back({std::move(q), gemv, std::string(gemv) == "warp" ? 1e-5 : 5e-2});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.gemv);
    EngineTuning counters, clustered;
    counters.persistent_max_blocks = 16;
    clustered.persistent_cluster = 16;
    clustered.persistent_prefetch = 2;
    auto a = make_cuda_engine(c.m, cuda_options(c.gemv, 512, true, counters));
    auto b = make_cuda_engine(c.m, cuda_options(c.gemv, 512, true, clustered));
    const std::vector<int> t = test_tokens(c.m.config, 30);
    a->prefill(t.data(), 10, 0);
    b->prefill(t.data(), 10, 0);
    SamplerParams greedy;
    greedy.temperature = 0.0f;
    double worst = 0.0;
    for (int pos = 10; pos < 30; ++pos) {
      a->decode(t[size_t(pos)], pos);
      b->decode(t[size_t(pos)], pos);
      const std::vector<float> la = a->logits(), lb = b->logits();
      ASSERT_EQ(la.size(), lb.size());
      const double d = rel_l2(lb, la);
      worst = std::max(worst, d);
      EXPECT_LE(d, c.bar) << "position " << pos;
      const int id = b->sample(greedy, uint64_t(pos));
      EXPECT_EQ(id, int(std::max_element(lb.begin(), lb.end()) - lb.begin())) << "position " << pos;
      a->sample(greedy, uint64_t(pos));
    }
    std::printf("cluster form, head split off, %s: worst rel L2 from the counter form %.3g\n", c.gemv, worst);
  }
}

// A cluster size the form does not take is refused by name, before any step.
TEST(PersistentDecode, ClusterOfAnotherSizeIsRefusedByName) {
  REQUIRE_GPU();
  EngineTuning t;
  t.persistent_cluster = 4;
  std::string what;
  try {
    auto b = make_cuda_engine(load_synthetic("tiny-gqa", 3), cuda_options("warp-r2", 64, true, t));
    b->decode(1, 0);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("--cluster 4: the persistent kernel's cluster form takes 8 or 16 blocks"), std::string::npos)
      << what;
}

// A block that never arrives (EngineTuning::persistent_fault, set by set_tuning): the others time out, the step fails
// with an error naming the wait, and the next step (fault gone) runs and matches the graph path.
TEST(PersistentDecode, AWaitThatNeverEndsIsAnErrorNotAHang) {
  REQUIRE_GPU();
  const Model m = load_synthetic("tiny-gqa", 3);
  auto graph = make_cuda_engine(m, cuda_options("warp-r2", 64, false));
  auto pers = make_cuda_engine(m, cuda_options("warp-r2", 64, true));
  ASSERT_GT(pers->persistent_grid(), 1) << "the fault needs a second block";
  EngineTuning faulty;
  faulty.persistent_fault = 1;
  faulty.persistent_timeout_ms = 200;
  pers->set_tuning(faulty);
  std::string what;
  try {
    pers->decode(5, 0);
    pers->logits();
  } catch (const Error& e) {
    what = e.what();
  }
  pers->set_tuning(EngineTuning{});
  EXPECT_NE(what.find("timed out"), std::string::npos) << what;
  EXPECT_NE(what.find("persistent decode"), std::string::npos) << what;
  for (int pos = 0; pos < 5; ++pos) {
    graph->decode(5 + pos, pos);
    pers->decode(5 + pos, pos);
    EXPECT_LE(rel_l2(pers->logits(), graph->logits()), 1e-5) << "position " << pos;
  }
}

TEST(PersistentDecode, RefusesWhatItCannotRunByName) {
  REQUIRE_GPU();
  const Model m = stories260k();
  auto expect_refusal = [&](const BackendOptions& bo, const std::string& needle) {
    std::string what;
    try {
      make_cuda_engine(m, bo);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << what;
  };
  for (const char* gemv : {"cublas", "thread", "colmajor", "thread-splitk"})
    expect_refusal(cuda_options(gemv, 64, true), std::string("'") + gemv + "' cannot run inside it");
  BackendOptions fp8 = cuda_options("warp-r2", 64, true);
  fp8.kv_dtype = KvDtype::FP8;
  const Model hd64 = load_synthetic("tiny-long", 1);
  {
    std::string what;
    try {
      make_cuda_engine(hd64, fp8);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("--kv-dtype fp8"), std::string::npos) << what;
  }
  {
    std::string what;
    try {
      make_cuda_engine(load_synthetic("tiny-hd", 1), cuda_options("warp-r2", 64, true));
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("head_dim 24"), std::string::npos) << what;
  }
  // Switching to a mapping it cannot run, while persistent, is refused and keeps the current one.
  auto b = make_cuda_engine(m, cuda_options("warp-r2", 64, true));
  EXPECT_THROW(b->set_gemv("cublas"), Error);
  EXPECT_EQ(b->gemv(), "warp-r2");
  b->set_gemv("warp");
  EXPECT_EQ(b->gemv(), "warp");
  b->decode(1, 0);
  EXPECT_EQ(b->logits().size(), size_t(m.config.vocab_size));
}

DecodeProfile profile_steps(CudaBackend& b, int first, int n) {
  for (int pos = 0; pos < first; ++pos) b.decode(pos + 1, pos);
  install_step_profiler(b);
  b.reset_profile();
  b.set_profiling(true);
  for (int pos = first; pos < first + n; ++pos) b.decode(pos + 1, pos);
  b.set_profiling(false);
  return b.profile();
}

void print_profile(const char* what, const DecodeProfile& p) {
  std::printf("%-34s per token: total %.4f ms", what, p.total_ms / double(p.steps));
  for (int part = 0; part < DecodeProfile::kParts; ++part)
    if (p.ms[part] > 0) std::printf(", %s %.4f", DecodeProfile::part_name(part), p.ms[part] / double(p.steps));
  std::printf("\n");
}

// Profiled persistent steps: the parts (waits included) add up to the kernel's measured time, every stage is seen.
TEST(PersistentDecode, ProfileAddsUpAndSeesEveryStage) {
  REQUIRE_GPU();
  for (const char* name : {"smollm2-135m", "tinyllama-1.1b", "llama3.1-8b"}) {
    const Model m = load_synthetic(name, 2);
    auto b = make_cuda_engine(m, cuda_options("warp-r2", 256, true));
    const DecodeProfile p = profile_steps(*b, 3, 10);
    EXPECT_EQ(p.steps, 10);
    double sum = 0.0;
    for (int part = 0; part < DecodeProfile::kParts; ++part) sum += p.ms[part];
    EXPECT_NEAR(sum, p.total_ms, 1e-6 * p.total_ms);
    for (int part : {DecodeProfile::kQKV, DecodeProfile::kO, DecodeProfile::kGateUp, DecodeProfile::kDown,
                     DecodeProfile::kHead, DecodeProfile::kAttention, DecodeProfile::kWait, DecodeProfile::kNorm})
      EXPECT_GT(p.ms[part], 0.0) << DecodeProfile::part_name(part);
    print_profile((std::string(name) + " persistent").c_str(), p);
    b.reset();
    if (!KernelTrace::built_with_cupti()) continue;  // the graph path is profiled by the kernel timeline only
    auto g = make_cuda_engine(m, cuda_options("warp-r2", 256, false));
    print_profile((std::string(name) + " graph (kernel timeline)").c_str(), profile_steps(*g, 3, 10));
  }
}

// The graph path's profile: replays of the step's CUDA graph under CUPTI's kernel timeline. Its parts (the holes
// between kernels in 'wait') sum to the replays' span, every stage is seen, and the span sits inside the measured
// graphed time per token (which adds the host's share).
TEST(PersistentDecode, GraphProfileIsTheKernelTimelineOfReplays) {
  REQUIRE_GPU();
  if (!KernelTrace::built_with_cupti()) GTEST_SKIP() << "this build has no CUPTI: the graph path cannot be profiled";
  for (const char* name : {"smollm2-135m", "llama3.1-8b"}) {
    SCOPED_TRACE(name);
    const Model m = load_synthetic(name, 2);
    auto g = make_cuda_engine(m, cuda_options("warp-r2", 256, false));
    for (int pos = 0; pos < 3; ++pos) g->decode(pos + 1, pos);  // the graph captured
    (void)g->logits();
    constexpr int kSteps = 40;
    const auto t0 = std::chrono::steady_clock::now();
    for (int pos = 3; pos < 3 + kSteps; ++pos) g->decode(pos + 1, pos);
    (void)g->logits();
    const double measured =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kSteps;
    const DecodeProfile p = profile_steps(*g, 0, kSteps);
    ASSERT_EQ(p.steps, kSteps);
    EXPECT_TRUE(p.graph_timeline);
    double sum = 0.0;
    for (int part = 0; part < DecodeProfile::kParts; ++part) sum += p.ms[part];
    EXPECT_NEAR(sum, p.total_ms, 1e-6 * p.total_ms);
    for (int part : {DecodeProfile::kQKV, DecodeProfile::kO, DecodeProfile::kGateUp, DecodeProfile::kDown,
                     DecodeProfile::kHead, DecodeProfile::kAttention, DecodeProfile::kOther})
      EXPECT_GT(p.ms[part], 0.0) << DecodeProfile::part_name(part);
    EXPECT_EQ(p.ms[DecodeProfile::kNorm], 0.0) << "the RMSNorm fold (default on warp-r2) runs no norm kernel";
    const double span = p.total_ms / double(p.steps);
    std::printf("%s graph: measured %.4f ms/token, replay span %.4f ms (%.1f%%)\n", name, measured, span,
                100.0 * span / measured);
    print_profile((std::string(name) + " graph (kernel timeline)").c_str(), p);
    EXPECT_LE(span, 1.10 * measured);
    EXPECT_GE(span, 0.5 * measured);
  }
}

// A chat reply interrupted as Ctrl-C does (the flag raised while tokens stream) on the persistent path: the next turn
// runs and continues exactly as a fresh graph-path run over the same ids.
TEST(PersistentDecode, InterruptedChatReplyLeavesTheEngineUsable) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const Model m = load_model(llm_test::smollm2_path());
  const auto tok = load_tokenizer(m, "");
  BackendOptions o = cuda_options("warp-r2", 512, true);
  o.dequantize = true;
  auto b = make_cuda_backend(m, o);
  ChatSessionOptions so;
  so.sampler.temperature = 0.0f;
  ChatSession s(*b, *tok, m.config, ChatTemplate(ChatFormat::kChatML), so);
  volatile std::sig_atomic_t interrupt = 0;
  int pieces = 0;
  const ChatReply r1 = s.send("Tell me a long story about a dragon.", 64,
                              [&](const std::string&) {
                                if (++pieces == 4) interrupt = 1;
                              },
                              &interrupt);
  EXPECT_EQ(r1.stop_reason, "interrupted");
  interrupt = 0;
  const size_t before = s.ids().size();
  const ChatReply r2 = s.send("What is the capital of France?", 16, nullptr, &interrupt);
  ASSERT_GT(r2.tokens.size(), 0u);
  EXPECT_GT(s.ids().size(), before);
  const std::vector<int> prompt(s.ids().begin(), s.ids().end() - long(r2.tokens.size()));
  o.persistent = false;
  auto fresh = make_cuda_backend(m, o);
  GenerateOptions go;
  go.n_predict = int(r2.tokens.size());
  go.sampler.temperature = 0.0f;
  std::vector<int> again;
  generate(*fresh, m.config, prompt, go, [&](int id) { again.push_back(id); });
  EXPECT_EQ(again, r2.tokens) << tok->decode(again) << " vs " << r2.text;
}

}  // namespace

namespace {

// Small enough for compute-sanitizer (memcheck, racecheck, synccheck): tiny-odd after a 600-token prompt, so
// attention splits the keys and the last block merges, and the GQA group of 5 takes three passes.
TEST(PersistentDecodeSanitizerSmall, StepsWithSplitKeysAndMerge) {
  REQUIRE_GPU();
  const Model m = load_synthetic("tiny-odd", 9);
  EXPECT_LE(worst_distance(m, "warp-r2", 1024, 600, 4), 1e-5);
  EXPECT_LE(worst_distance(m, "warp", 1024, 5, 3), 1e-5);
}

// Quantized weights on both lane codes, small: q|k|v Q4_0, o Q8_0, gate|up Q4_K, down Q6_K, head Q4_1 (the all-forms
// kernel), a few steps each.
TEST(PersistentDecodeSanitizerSmall, QuantizedWarpAndDp4a) {
  REQUIRE_GPU();
  llm_test::TinyQuantSpec s = small_quant_spec(llm_test::kTqQ4_0, 41, 128);
  s.wo = llm_test::kTqQ8_0;
  s.gate = s.up = llm_test::kTqQ4_K;
  s.down = llm_test::kTqQ6_K;
  s.head = llm_test::kTqQ4_1;
  llm_test::TempDir tmp;
  llm_test::write_file(tmp.path() / "q.gguf", llm_test::tiny_quant_gguf(s).quant.build());
  const Model m = load_model(tmp.str("q.gguf"));
  distances(m, "warp", 128, 3, 2, false, false, 1e-4);
  distances(m, "warp-dp4a", 128, 3, 2, false, false, 5e-2, true);
}

// The cluster form, small: tiny-odd with split keys (a 600-token prompt) on a cluster of 8 with the L2 prefetch.
TEST(PersistentDecodeSanitizerSmall, ClusterForm) {
  REQUIRE_GPU();
  expect_cluster_is_the_counter_form(load_synthetic("tiny-odd", 9), "warp-r2", 1024, 600, 3, 8, 1);
}

}  // namespace
