// engine/gemv_choice.h on tiny GGUF models written here (tests/cpu/tiny_quant_gguf_util.h): which GEMV name runs which
// weight type (defaults, refusals naming mapping/type/tensor, the name resolution, the quantized-type summary), and
// that the CPU reference on quantized weights computes exactly what it computes on the dequantized FP32 values
// written as F32 (reads dequantize exactly), with a negative control (one perturbed block scale changes the logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gemv_table.h"
#include "engine/backend.h"
#include "engine/gemv_choice.h"
#include "engine/generate.h"
#include "models/model.h"
#include "models/quant.h"  // is_ggml_quant_type
#include "models_test_util.h"
#include "tiny_quant_gguf_util.h"

namespace {

using llm_test::TempDir;
using llm_test::TinyQuantSpec;

llm::Model load(const TempDir& tmp, const llm_test::GgufWriter& w, const std::string& name) {
  llm_test::write_file(tmp.path() / name, w.build());
  return llm::load_model(tmp.str(name));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const char* const kQuantForms[] = {"warp", "thread", "as-stored", "warp-dp4a"};
const char* const kBf16Only[] = {"warp-r2", "cublas", "colmajor", "thread-splitk", "warp-few"};

TEST(GemvPlan, NameListsAreWhatTheseTestsAssume) {
  EXPECT_EQ(llm::gemv_mapping_list(/*quant=*/true), "warp,thread,as-stored,warp-dp4a");
  for (const char* n : kQuantForms) EXPECT_TRUE(llm::gemv_row(n)->has_quant()) << n;
  EXPECT_STREQ(llm::kGemvDefaultMapping, "warp-r2");
  EXPECT_STREQ(llm::kQuantGemvDefault, "warp");
  for (const char* n : kBf16Only) EXPECT_TRUE(llm::gemv_mapping_known(n)) << n;
}

// Every quantized form runs every type the loader takes (a type added to models/quant.h and not here was refused on
// the GPU by name: Q5_K was, until this test).
TEST(GemvPlan, EveryQuantizedFormRunsEveryGgmlQuantType) {
  for (uint32_t t = 0; t < 32; ++t) {
    EXPECT_EQ(llm::is_ggml_quant_type(t), ((llm::kGgmlQuantTypesAll >> t) & 1u) != 0) << "type id " << t;
    if (!llm::is_ggml_quant_type(t)) continue;
    for (const char* n : kQuantForms) EXPECT_TRUE(llm::gemv_row(n)->runs_quant_type(t)) << n << ", type id " << t;
  }
}

// Every name resolves to its plan's forms; "" takes each kind's default; unknown names fail with the one message.
TEST(GemvPlan, ResolveEveryName) {
  const llm::GemvPlan def = llm::gemv_plan("");
  EXPECT_EQ(def.bf16, llm::GemvBf16Form::WarpR2);
  EXPECT_STREQ(llm::gemv_form_name(def.bf16), "warp-r2");
  EXPECT_TRUE(def.has_quant);
  EXPECT_STREQ(llm::quant_gemv_kind_name(def.quant), "warp");
  for (const char* n : {"warp", "thread"}) {  // both forms
    const llm::GemvPlan p = llm::gemv_plan(n);
    EXPECT_EQ(p.name, n);
    ASSERT_NE(p.bf16, llm::GemvBf16Form::None) << n;
    EXPECT_STREQ(llm::gemv_form_name(p.bf16), n);
    EXPECT_TRUE(p.has_quant) << n;
    EXPECT_STREQ(llm::quant_gemv_kind_name(p.quant), n);
  }
  for (const char* n : {"as-stored", "warp-dp4a"}) {  // quantized only
    const llm::GemvPlan p = llm::gemv_plan(n);
    EXPECT_EQ(p.bf16, llm::GemvBf16Form::None) << n;
    EXPECT_TRUE(p.has_quant) << n;
    EXPECT_STREQ(llm::quant_gemv_kind_name(p.quant), n);
  }
  for (const char* n : kBf16Only) {  // BF16 only
    const llm::GemvPlan p = llm::gemv_plan(n);
    ASSERT_NE(p.bf16, llm::GemvBf16Form::None) << n;
    EXPECT_STREQ(llm::gemv_form_name(p.bf16), n);
    EXPECT_FALSE(p.has_quant) << n;
  }
  for (const char* bad : {"warp_r2", "WARP", "dp4a", "as_stored", "warp-dp4a ", "bogus"}) {
    EXPECT_THROW(llm::gemv_plan(bad), llm::Error) << bad;
    try {
      llm::gemv_plan(bad);
    } catch (const llm::Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "unknown GEMV mapping '" + std::string(bad) + "' (known: " + llm::gemv_mapping_names() + ")");
      EXPECT_TRUE(contains(e.what(), "warp-dp4a")) << "lists the quantized forms too: " << e.what();
      EXPECT_TRUE(contains(e.what(), "cublas")) << e.what();
    }
  }
}

TEST(GemvPlan, DefaultNameFollowsTheWeights) {
  TempDir tmp;
  const llm::Model flt = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqF32)).quant, "f.gguf");
  const llm::Model f16 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqF16)).quant, "h.gguf");
  const llm::Model q8 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ8_0)).quant, "q.gguf");
  TinyQuantSpec one = TinyQuantSpec::all(llm_test::kTqF32);
  one.down = llm_test::kTqQ4_0;  // one projection of each layer quantized
  const llm::Model mixed = load(tmp, llm_test::tiny_quant_gguf(one).quant, "m.gguf");
  TinyQuantSpec head_only = TinyQuantSpec::all(llm_test::kTqF32);
  head_only.head = llm_test::kTqQ6_K;  // only the head
  const llm::Model headq = load(tmp, llm_test::tiny_quant_gguf(head_only).quant, "o.gguf");
  TinyQuantSpec tied = TinyQuantSpec::all(llm_test::kTqF32);
  tied.tied = true;
  tied.embd = llm_test::kTqQ8_0;  // the tied head is the (quantized) embedding
  const llm::Model tiedq = load(tmp, llm_test::tiny_quant_gguf(tied).quant, "t.gguf");

  EXPECT_EQ(llm::default_gemv_name(flt, false), "warp-r2");
  EXPECT_EQ(llm::default_gemv_name(flt, true), "warp-r2");
  EXPECT_EQ(llm::default_gemv_name(f16, false), "warp-r2");
  for (const llm::Model* m : {&q8, &mixed, &headq, &tiedq}) {
    SCOPED_TRACE(m->source);
    EXPECT_EQ(llm::default_gemv_name(*m, false), "warp");
    EXPECT_EQ(llm::default_gemv_name(*m, true), "warp-r2");
  }
  // An untied model whose only quantized tensor is the embedding: the embedding is no projection.
  TinyQuantSpec embd_only = TinyQuantSpec::all(llm_test::kTqF32);
  embd_only.embd = llm_test::kTqQ8_0;
  const llm::Model embq = load(tmp, llm_test::tiny_quant_gguf(embd_only).quant, "e.gguf");
  EXPECT_EQ(embq.weights.embedding.quant, uint32_t(llm_test::kTqQ8_0));
  EXPECT_EQ(llm::default_gemv_name(embq, false), "warp-r2");
  EXPECT_EQ(llm::quant_summary(embq), "");
}

// The quantized default by size: "warp" (exact activations) for models streaming under 1 GiB of quantized weights per
// token, "warp-dp4a" from there when every projection is quantized (engine/gemv_choice.h says why); a model whose
// projections are not all quantized keeps "warp" whatever its size (warp-dp4a has no BF16 form).
TEST(GemvPlan, QuantizedDefaultFollowsTheBytesStreamedPerToken) {
  EXPECT_EQ(llm::default_quant_gemv_name(66 << 20, true), "warp");                   // SmolLM2 Q4_1 (66 MB)
  EXPECT_EQ(llm::default_quant_gemv_name(llm::kDp4aDefaultBytes - 1, true), "warp");
  EXPECT_EQ(llm::default_quant_gemv_name(llm::kDp4aDefaultBytes, true), "warp-dp4a");
  EXPECT_EQ(llm::default_quant_gemv_name(int64_t(4220) << 20, true), "warp-dp4a");    // 8B Q4_0 (4.22 GB)
  EXPECT_EQ(llm::default_quant_gemv_name(int64_t(4220) << 20, false), "warp");       // a BF16 projection among them
  EXPECT_TRUE(llm::gemv_plan("warp-dp4a").has_quant);
}

TEST(GemvPlan, RefusalsOnAnAllQuantizedModel) {
  TempDir tmp;
  const llm::Model q8 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ8_0)).quant, "q.gguf");
  ASSERT_EQ(q8.weights.layers[0].wq.quant, uint32_t(llm_test::kTqQ8_0));
  for (const char* n : {"", "warp", "thread", "as-stored", "warp-dp4a"})
    EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan(n), q8, false), "") << n;
  for (const char* n : kBf16Only) {
    const std::string why = llm::gemv_refusal(llm::gemv_plan(n), q8, false);
    EXPECT_FALSE(why.empty()) << n;
    EXPECT_TRUE(contains(why, std::string("'") + n + "'")) << why;
    EXPECT_TRUE(contains(why, "Q8_0")) << why;
    EXPECT_TRUE(contains(why, "blk.0.attn_q.weight")) << why;  // the first projection
    EXPECT_EQ(why.find('\n'), std::string::npos) << "one line: " << why;
  }
  // Dequantized, every BF16 mapping runs it; the quantized-only forms have nothing to run.
  for (const char* n : {"", "warp", "thread", "warp-r2", "cublas", "colmajor", "thread-splitk", "warp-few"})
    EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan(n), q8, true), "") << n;
  for (const char* n : {"as-stored", "warp-dp4a"}) {
    const std::string why = llm::gemv_refusal(llm::gemv_plan(n), q8, true);
    EXPECT_TRUE(contains(why, n)) << why;
    EXPECT_TRUE(contains(why, "--dequantize")) << why;
    EXPECT_TRUE(contains(why, "blk.0.attn_q.weight")) << why;
  }
  EXPECT_THROW(llm::gemv_refusal(llm::gemv_plan("nope"), q8, false), llm::Error);

  // A Q4_K model names its type.
  const llm::Model q4k = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ4_K)).quant, "k.gguf");
  const std::string why = llm::gemv_refusal(llm::gemv_plan("cublas"), q4k, false);
  EXPECT_TRUE(contains(why, "Q4_K")) << why;
  EXPECT_TRUE(contains(why, "blk.0.attn_q.weight")) << why;
}

TEST(GemvPlan, RefusalsOnAnAllFloatModel) {
  TempDir tmp;
  const llm::Model flt = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqF32)).quant, "f.gguf");
  for (const char* n : {"", "warp", "thread", "warp-r2", "cublas", "colmajor", "thread-splitk", "warp-few"}) {
    EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan(n), flt, false), "") << n;
    EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan(n), flt, true), "") << n;
  }
  for (const char* n : {"as-stored", "warp-dp4a"})
    for (bool deq : {false, true}) {
      const std::string why = llm::gemv_refusal(llm::gemv_plan(n), flt, deq);
      EXPECT_FALSE(why.empty()) << n;
      EXPECT_TRUE(contains(why, std::string("'") + n + "'")) << why;
      EXPECT_TRUE(contains(why, "blk.0.attn_q.weight")) << why;
      EXPECT_TRUE(contains(why, llm::dtype_name(llm::DType::F32))) << why;
    }
}

TEST(GemvPlan, RefusalsOnMixedModelsNameTheOffendingTensor) {
  TempDir tmp;
  // Every layer's ffn_down is Q4_0, the rest F32: BF16-only mappings name blk.0.ffn_down.weight; the
  // quantized-only forms name the first float projection, blk.0.attn_q.weight.
  TinyQuantSpec s = TinyQuantSpec::all(llm_test::kTqF32);
  s.down = llm_test::kTqQ4_0;
  const llm::Model m = load(tmp, llm_test::tiny_quant_gguf(s).quant, "m.gguf");
  EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan("warp"), m, false), "");
  EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan("thread"), m, false), "");
  const std::string a = llm::gemv_refusal(llm::gemv_plan("warp-r2"), m, false);
  EXPECT_TRUE(contains(a, "Q4_0") && contains(a, "blk.0.ffn_down.weight")) << a;
  const std::string b = llm::gemv_refusal(llm::gemv_plan("as-stored"), m, false);
  EXPECT_TRUE(contains(b, "as-stored") && contains(b, "blk.0.attn_q.weight")) << b;
  EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan("warp-r2"), m, true), "");

  // Only the head quantized.
  TinyQuantSpec h = TinyQuantSpec::all(llm_test::kTqF32);
  h.head = llm_test::kTqQ6_K;
  const llm::Model hm = load(tmp, llm_test::tiny_quant_gguf(h).quant, "h.gguf");
  const std::string c = llm::gemv_refusal(llm::gemv_plan("colmajor"), hm, false);
  EXPECT_TRUE(contains(c, "Q6_K") && contains(c, "output.weight")) << c;
}

TEST(GemvPlan, QuantSummaryCountsEachType) {
  TempDir tmp;
  const llm::Model flt = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqF32)).quant, "f.gguf");
  EXPECT_EQ(llm::quant_summary(flt), "");
  // 2 layers x 7 projections + the head.
  const llm::Model q8 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ8_0)).quant, "q.gguf");
  const std::string s8 = llm::quant_summary(q8);
  EXPECT_TRUE(contains(s8, "Q8_0 x 15 (")) << s8;
  EXPECT_EQ(s8.find(','), std::string::npos) << s8;

  TinyQuantSpec s;
  s.wq = llm_test::kTqQ8_0;
  s.wk = llm_test::kTqQ4_0;
  s.wv = llm_test::kTqF32;
  s.wo = llm_test::kTqQ4_1;
  s.gate = llm_test::kTqQ5_0;
  s.up = llm_test::kTqQ5_1;
  s.down = llm_test::kTqQ4_K;
  s.head = llm_test::kTqQ6_K;
  const llm::Model mixed = load(tmp, llm_test::tiny_quant_gguf(s).quant, "mixed.gguf");
  const std::string sm = llm::quant_summary(mixed);
  for (const char* part : {"Q8_0 x 2 (", "Q4_0 x 2 (", "Q4_1 x 2 (", "Q5_0 x 2 (", "Q5_1 x 2 (", "Q4_K x 2 (",
                           "Q6_K x 1 ("})
    EXPECT_TRUE(contains(sm, part)) << part << " in " << sm;
  EXPECT_FALSE(contains(sm, "F32")) << sm;
  EXPECT_EQ(std::count(sm.begin(), sm.end(), ','), 6) << sm;

  // Tied: the head is the embedding, counted once as a projection.
  TinyQuantSpec t = TinyQuantSpec::all(llm_test::kTqF32);
  t.tied = true;
  t.embd = llm_test::kTqQ8_0;
  const llm::Model tied = load(tmp, llm_test::tiny_quant_gguf(t).quant, "t.gguf");
  EXPECT_TRUE(tied.config.tied_embeddings);
  EXPECT_TRUE(contains(llm::quant_summary(tied), "Q8_0 x 1 (")) << llm::quant_summary(tied);
}

// ---- CPU reference: quantized reads are exact ------------------------------------------------------------------------

std::vector<float> cpu_teacher_forced(const llm::Model& m, const std::vector<int>& ids) {
  llm::BackendOptions o;
  o.device = "cpu";
  o.ctx_size = 64;
  auto b = llm::make_backend(m, o);
  return llm::teacher_forced_logits(*b, ids);
}

double worst_rel_l2(const std::vector<float>& got, const std::vector<float>& want, int vocab) {
  double worst = 0.0;
  for (size_t p = 0; p + size_t(vocab) <= want.size(); p += size_t(vocab))
    worst = std::max(worst, llm_test::tq_rel_l2(got.data() + p, want.data() + p, size_t(vocab)));
  return worst;
}

std::vector<TinyQuantSpec> equivalence_specs() {
  std::vector<TinyQuantSpec> v;
  for (uint32_t t : {llm_test::kTqQ8_0, llm_test::kTqQ4_0, llm_test::kTqQ4_K, llm_test::kTqQ4_1, llm_test::kTqQ5_0,
                     llm_test::kTqQ5_1, llm_test::kTqQ5_K, llm_test::kTqQ6_K})
    v.push_back(TinyQuantSpec::all(t));
  TinyQuantSpec mixed;  // every type at once, a quantized embedding and F16 too
  mixed.embd = llm_test::kTqQ4_0;
  mixed.wq = llm_test::kTqQ8_0;
  mixed.wk = llm_test::kTqQ4_0;
  mixed.wv = llm_test::kTqF32;
  mixed.wo = llm_test::kTqQ4_1;
  mixed.gate = llm_test::kTqQ5_0;
  mixed.up = llm_test::kTqQ5_1;
  mixed.down = llm_test::kTqQ4_K;
  mixed.head = llm_test::kTqQ6_K;
  mixed.seed = 7;
  v.push_back(mixed);
  TinyQuantSpec tied = TinyQuantSpec::all(llm_test::kTqQ8_0);
  tied.tied = true;
  tied.embd = llm_test::kTqQ8_0;
  tied.wv = llm_test::kTqF16;
  tied.seed = 11;
  v.push_back(tied);
  return v;
}

TEST(GemvPlanCpuReference, QuantizedEqualsDequantizedF32Twin) {
  TempDir tmp;
  const std::vector<TinyQuantSpec> specs = equivalence_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TinyQuantSpec& s = specs[i];
    const std::string what = std::string("spec ") + std::to_string(i) + " wq=" + llm_test::tq_type_name(s.wq) +
                             " down=" + llm_test::tq_type_name(s.down) + " head=" +
                             llm_test::tq_type_name(s.tied ? s.embd : s.head);
    SCOPED_TRACE(what);
    const llm_test::TinyQuantGguf g = llm_test::tiny_quant_gguf(s);
    const llm::Model mq = load(tmp, g.quant, "q" + std::to_string(i) + ".gguf");
    const llm::Model mf = load(tmp, g.twin, "f" + std::to_string(i) + ".gguf");
    ASSERT_EQ(mq.weights.layers[0].wq.quant, s.wq == llm_test::kTqF32 || s.wq == llm_test::kTqF16 ? 0u : s.wq);
    ASSERT_EQ(mf.weights.layers[0].wq.quant, 0u);
    // Reads of each quantized tensor equal the twin's F32 values bit for bit.
    EXPECT_EQ(mq.weights.layers[1].w_down.to_f32(), mf.weights.layers[1].w_down.to_f32());
    EXPECT_EQ(mq.weights.embedding.to_f32(), mf.weights.embedding.to_f32());
    const std::vector<int> ids = llm_test::tq_tokens(s.vocab, 24);
    const std::vector<float> lq = cpu_teacher_forced(mq, ids), lf = cpu_teacher_forced(mf, ids);
    ASSERT_EQ(lq.size(), ids.size() * size_t(s.vocab));
    ASSERT_EQ(lf.size(), lq.size());
    for (float v : lq) ASSERT_TRUE(std::isfinite(v));
    const double err = worst_rel_l2(lq, lf, s.vocab);
    std::printf("[cpu quant vs F32 twin] %s: worst rel L2 %.3g\n", what.c_str(), err);
    EXPECT_LE(err, 1e-5);
    // The logits are not trivially small (the comparison would mean nothing).
    double amax = 0.0;
    for (float v : lf) amax = std::max(amax, double(std::fabs(v)));
    EXPECT_GT(amax, 0.5);
  }
}

TEST(GemvPlanCpuReference, PerturbedBlockScaleChangesTheLogits) {
  TempDir tmp;
  for (uint32_t t : {llm_test::kTqQ8_0, llm_test::kTqQ4_K}) {
    SCOPED_TRACE(llm_test::tq_type_name(t));
    const llm_test::TinyQuantGguf g = llm_test::tiny_quant_gguf(TinyQuantSpec::all(t));
    llm_test::GgufWriter bad = g.quant;
    llm_test::GgufTensorSpec* q = bad.find("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    // Block 0's fp16 d (the first two bytes for both Q8_0 and Q4_K): doubled by adding one to the exponent.
    uint16_t d = uint16_t(uint8_t(q->bytes[0]) | (uint8_t(q->bytes[1]) << 8));
    ASSERT_NE(d & 0x7c00, 0x7c00);
    d = uint16_t(d + 0x0400);
    q->bytes[0] = char(d & 0xff);
    q->bytes[1] = char(d >> 8);
    const llm::Model mf = load(tmp, g.twin, "f.gguf");
    const llm::Model mb = load(tmp, bad, "bad.gguf");
    const std::vector<int> ids = llm_test::tq_tokens(256, 24);
    const std::vector<float> lf = cpu_teacher_forced(mf, ids), lb = cpu_teacher_forced(mb, ids);
    ASSERT_EQ(lf.size(), lb.size());
    double err = worst_rel_l2(lb, lf, 256);
    std::printf("[cpu negative control] %s perturbed scale: worst rel L2 %.3g\n", llm_test::tq_type_name(t), err);
    EXPECT_GT(err, 1e-4);
    EXPECT_NE(mb.weights.layers[0].wq.to_f32(), mf.weights.layers[0].wq.to_f32());
  }
}

}  // namespace

namespace {

// decode_path_refusal: the persistent path runs BF16 weights through the lanes-along-K mappings, quantized ones through
// the quantized "warp" and "warp-dp4a" forms, with a BF16 KV cache and fused projections, and names whatever else it is given; the
// graph path refuses nothing.
TEST(GemvPlan, DecodePathRefusals) {
  using llm::DecodePath;
  const llm::Model flt = llm::load_synthetic("tiny-gqa");
  for (const char* n : {"", "warp-r2", "warp", "warp-few"})
    EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, n, flt, false, false, true), "") << n;
  for (const char* n : {"cublas", "thread", "colmajor", "thread-splitk"}) {
    const std::string why = llm::decode_path_refusal(DecodePath::Persistent, n, flt, false, false, true);
    EXPECT_TRUE(contains(why, std::string("'") + n + "' cannot run inside it")) << why;
    EXPECT_EQ(llm::decode_path_refusal(DecodePath::Graph, n, flt, false, false, true), "") << n;
  }
  EXPECT_TRUE(contains(llm::decode_path_refusal(DecodePath::Persistent, "", flt, false, true, true), "--kv-dtype fp8"));
  EXPECT_TRUE(
      contains(llm::decode_path_refusal(DecodePath::Persistent, "", flt, false, false, false), "fused projections"));
  EXPECT_TRUE(contains(llm::decode_path_refusal(DecodePath::Persistent, "", llm::load_synthetic("tiny-hd"), false,
                                                false, true),
                       "head_dim 24"));
  // Rows too wide for the kernel's shared memory are refused with the bytes they need; Llama 3 70B's fit.
  llm::ModelConfig wide = flt.config;
  wide.dim = 8192;
  wide.n_heads = 64;
  wide.n_kv_heads = 8;
  wide.head_dim = 128;
  wide.hidden_dim = 28672;
  EXPECT_EQ(llm::persistent_refusal(wide, "70b", llm::gemv_plan("warp-r2"), "", "", false, true), "");
  wide.hidden_dim = 40000;
  const std::string why_wide = llm::persistent_refusal(wide, "wide", llm::gemv_plan("warp-r2"), "", "", false, true);
  EXPECT_TRUE(contains(why_wide, "rows of 40000 columns (dim 8192) need ")) << why_wide;
  EXPECT_TRUE(contains(why_wide, "bytes of shared memory per block")) << why_wide;
  // The cluster form (--cluster) adds each block's mirrors of x, att and hb: SmolLM2's and 8B's shapes fit, 70B's
  // does not (its 28,672-wide hb alone is 112 KiB), and a size other than 8 or 16 is refused by name.
  llm::ModelConfig smol = wide, b8 = wide;  // the shapes alone (no weights made)
  smol.dim = 576, smol.n_heads = 9, smol.n_kv_heads = 3, smol.head_dim = 64, smol.hidden_dim = 1536;
  b8.dim = 4096, b8.n_heads = 32, b8.n_kv_heads = 8, b8.head_dim = 128, b8.hidden_dim = 14336;
  for (int n : {8, 16}) {
    EXPECT_EQ(llm::cluster_refusal(smol, "smol", n), "");
    EXPECT_EQ(llm::cluster_refusal(b8, "8b", n), "");
  }
  wide.hidden_dim = 28672;
  const std::string why_cluster = llm::cluster_refusal(wide, "70b", 16);
  EXPECT_TRUE(contains(why_cluster, "--cluster: 70b (dim 8192, hidden 28672) needs ")) << why_cluster;
  EXPECT_TRUE(contains(why_cluster, "with the mirrors of x, att and hb")) << why_cluster;
  for (int n : {0, 4, 32})
    EXPECT_TRUE(contains(llm::cluster_refusal(smol, "smol", n), "takes 8 or 16 blocks")) << n;
  // Weights kept quantized run through the quantized "warp" form (the default for them) or "warp-dp4a"; the other
  // quantized forms are refused by name, and so is a gate|up group whose members differ in type.
  TempDir tmp;
  const llm::Model q8 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ8_0)).quant, "q.gguf");
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "", q8, false, false, true), "");
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "warp", q8, false, false, true), "");
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "warp-dp4a", q8, false, false, true), "");
  for (const char* n : {"thread", "as-stored"}) {
    const std::string why = llm::decode_path_refusal(DecodePath::Persistent, n, q8, false, false, true);
    EXPECT_TRUE(contains(why, std::string("'") + n + "' cannot run inside it")) << why;
    EXPECT_TRUE(contains(why, "keeps Q8_0")) << why;
  }
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "warp-r2", q8, true, false, true), "");
  EXPECT_EQ(llm::mixed_gate_up(q8, false), "");
  // q|k|v in three types (Q4_K_M keeps v in Q6_K) runs: the kernel takes a part per type.
  TinyQuantSpec qkv_spec = TinyQuantSpec::all(llm_test::kTqQ8_0);
  qkv_spec.wk = llm_test::kTqQ4_0;
  qkv_spec.wv = llm_test::kTqF16;
  const llm::Model qkv_mixed = load(tmp, llm_test::tiny_quant_gguf(qkv_spec).quant, "qkv.gguf");
  EXPECT_EQ(llm::mixed_gate_up(qkv_mixed, false), "");
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "", qkv_mixed, false, false, true), "");
  // gate and up in two types cannot: a gate|up unit pairs row i of each.
  TinyQuantSpec mixed_spec = TinyQuantSpec::all(llm_test::kTqQ8_0);
  mixed_spec.up = llm_test::kTqQ4_0;
  const llm::Model mixed = load(tmp, llm_test::tiny_quant_gguf(mixed_spec).quant, "mixed.gguf");
  EXPECT_EQ(llm::mixed_gate_up(mixed, false), "blk.0.ffn_gate.weight");
  EXPECT_EQ(llm::mixed_gate_up(mixed, true), "");
  const std::string why_mixed = llm::decode_path_refusal(DecodePath::Persistent, "", mixed, false, false, true);
  EXPECT_TRUE(contains(why_mixed, "gate and up in one weight type")) << why_mixed;
  EXPECT_TRUE(contains(why_mixed, "blk.0.ffn_gate.weight and the matrix fused with it differ")) << why_mixed;
  EXPECT_EQ(llm::decode_path_refusal(DecodePath::Persistent, "", mixed, true, false, true), "");  // --dequantize
  EXPECT_EQ(llm::parse_decode_path("graph"), DecodePath::Graph);
  EXPECT_EQ(llm::parse_decode_path("persistent"), DecodePath::Persistent);
  EXPECT_THROW(llm::parse_decode_path("fast"), llm::Error);
  EXPECT_STREQ(llm::decode_path_name(DecodePath::Persistent), "persistent");
}

// The plan is resolved once and the refusals take it: gemv_plan(name, model, dequantize) throws exactly the line
// gemv_refusal gives, decode_path_refusal of a name says what it says of the name's plan, and the exact texts are
// today's.
TEST(GemvPlan, ThePlanCarriesTheRefusals) {
  TempDir tmp;
  const llm::Model q8 = load(tmp, llm_test::tiny_quant_gguf(TinyQuantSpec::all(llm_test::kTqQ8_0)).quant, "q.gguf");
  const llm::Model flt = llm::load_synthetic("tiny-gqa");
  EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan("cublas"), q8, false),
            "GEMV mapping 'cublas' has no form for Q8_0 weights (blk.0.attn_q.weight); quantized weights run with "
            "warp (default), thread, as-stored or warp-dp4a, or pass --dequantize to run them as BF16");
  EXPECT_EQ(llm::gemv_refusal(llm::gemv_plan("warp-dp4a"), flt, false),
            "GEMV mapping 'warp-dp4a' exists only for quantized weights, and " + flt.weights.layers[0].wq.name +
                " is not quantized (" + std::string(llm::dtype_name(flt.weights.layers[0].wq.dtype)) +
                "); BF16 weights run with warp-r2 "
            "(default), warp, thread, colmajor, cublas, thread-splitk or warp-few");
  for (const llm::GemvRow& r : llm::kGemvTable)
    for (const llm::Model* m : {&q8, &flt}) {
      SCOPED_TRACE(r.name);
      const std::string why = llm::gemv_refusal(llm::gemv_plan(r.name), *m, false);
      if (why.empty()) {
        EXPECT_EQ(llm::gemv_plan(r.name, *m, false).row, &r);
      } else {
        llm_test::expect_error([&] { llm::gemv_plan(r.name, *m, false); }, {why});
      }
      for (llm::DecodePath path : {llm::DecodePath::Graph, llm::DecodePath::Persistent})
        EXPECT_EQ(llm::decode_path_refusal(path, llm::gemv_plan(r.name), *m, false, false, true),
                  llm::decode_path_refusal(path, r.name, *m, false, false, true));
    }
  // An unknown name fails with gemv_plan's text, before any refusal (the CUDA engine's constructor resolves this way).
  llm_test::expect_error([&] { llm::gemv_plan("nope", q8, false); },
                         {"unknown GEMV mapping 'nope' (known: " + llm::gemv_mapping_names() + ")"});
  // "" resolves to the model's default: the quantized default on a quantized model.
  EXPECT_EQ(llm::gemv_plan("", q8, false).name, "warp");
  EXPECT_EQ(llm::gemv_plan("", flt, false).name, "warp-r2");
  EXPECT_EQ(llm::decode_path_refusal(llm::DecodePath::Persistent, "cublas", flt, false, false, true),
            "--decode persistent runs the lanes-along-K GEMV mappings (warp-r2, warp, warp-few); 'cublas' cannot run "
            "inside it: use --decode graph for it");
  EXPECT_EQ(llm::persistent_refusal(flt.config, "q8", llm::gemv_plan("thread"), "Q8_0 x 1", "", false, true),
            "--decode persistent runs quantized weights with the quantized 'warp' and 'warp-dp4a' mappings only; "
            "'thread' cannot run inside it (q8 keeps Q8_0 x 1): use --gemv warp, --dequantize, or --decode graph");
  // The plan's forms, as the engine reads them: warp-dp4a runs no BF16 weight and its quantized form is the dp4a one.
  const llm::GemvPlan dp4a = llm::gemv_plan("warp-dp4a");
  EXPECT_EQ(dp4a.bf16, llm::GemvBf16Form::None);
  EXPECT_EQ(dp4a.quant, llm::QuantGemvKind::WarpDp4a);
  EXPECT_EQ(dp4a.quant_persistent, llm::PersistentGemv::QuantDp4a);
}

}  // namespace
