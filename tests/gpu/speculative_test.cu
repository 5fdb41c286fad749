// Speculative decoding on the CUDA engine (issue 36, first GPU step): verify() is a prefill pass over the drafted
// tokens whose every row goes through the decode head; rewind() has nothing to undo over a BF16 cache. Checked here:
// verify's rows against teacher-forced decode logits (stories260K; the real SmolLM2 file, quantized: its pass
// dequantizes every matrix); a rewind then a second verify gives the bits of a verify that never saw the wrong drafts;
// greedy output with prompt lookup equals greedy output without it up to the first position where the target's top-2
// margin is small, counted and printed: under 5e-2 by default (the verify pass rounds its rows to BF16, then int8 for
// quantized matrices, where decode takes FP32), under 1e-3 (issue 36's bound) with EngineTuning::exact_verify (the
// decode step's activations: only the summation order differs); the FP8 cache verifies eagerly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../cpu/greedy_reference_util.h"  // Greedy, greedy_reference
#include "../cpu/default_model_util.h"  // LLM_REQUIRE_SMOLLM2, smollm2_path
#include "core/error.h"
#include "engine/backend.h"
#include "engine/cuda_backend.h"
#include "engine/gemv_choice.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "models/model.h"
#include "models/quantize_model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

#define REQUIRE_GPU() \
  if (!llm::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

const std::string kStories = std::string(LLM_TEST_MODELS) + "/stories260K";
// Where verify's GEMM rows and decode's GEMV rows may round a greedy choice differently: a top-2 margin this small.
constexpr float kNearTie = 5e-2f;       // default verify: BF16-rounded rows
constexpr float kNearTieExact = 1e-3f;  // exact_verify: issue 36's bound

// The prefill-pass verify with the decode step's activations (the decode-order verify off: these tests measure the
// pass, which BF16 models and the other forms still run).
llm::EngineTuning exact_tuning() {
  llm::EngineTuning t;
  t.exact_verify = llm::ExactVerify::kOn;
  t.verify_order = llm::VerifyOrder::kPass;
  return t;
}

std::unique_ptr<llm::Backend> cuda(const llm::Model& m, llm::KvDtype kv = llm::KvDtype::BF16, int ctx = 512,
                                   bool verify_graph = false, llm::EngineTuning tuning = {},
                                   const std::string& gemv = "") {
  llm::BackendOptions o;
  o.device = "cuda";
  o.gemv = gemv;
  o.tuning = tuning;
  o.tuning.verify_graph = verify_graph;
  o.ctx_size = ctx;
  o.kv_dtype = kv;
  return llm::make_backend(m, o);
}

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// verify(ids[p .. p+k)) after a prefill of ids[0 .. p) against decode steps of ids[p .. p+k) after the same prefill:
// every row (what speculation replaces: the cache before the drafts is the same on both sides). Returns the worst
// relative L2 distance.
double expect_verify_rows_match_decode(const llm::Model& m, const std::vector<int>& ids, int p, double tol,
                                       const llm::EngineTuning& tuning = {}, const char* what = "default",
                                       const std::string& gemv = "") {
  const int vocab = m.config.vocab_size, k = int(ids.size()) - p;
  auto a = cuda(m, llm::KvDtype::BF16, 512, false, tuning, gemv),
       b = cuda(m, llm::KvDtype::BF16, 512, false, tuning, gemv);
  a->prefill(ids.data(), p, 0);
  b->prefill(ids.data(), p, 0);
  const std::vector<float> rows = a->verify(ids.data() + p, k, p);
  EXPECT_EQ(rows.size(), size_t(k) * size_t(vocab));
  if (rows.size() != size_t(k) * size_t(vocab)) return INFINITY;
  double worst = 0;
  for (int i = 0; i < k; ++i) {
    b->decode(ids[size_t(p + i)], p + i);
    const std::vector<float> want = b->logits();
    const double e = rel_l2(rows.data() + size_t(i) * vocab, want.data(), size_t(vocab));
    worst = std::max(worst, e);
    EXPECT_LE(e, tol) << m.source << " (" << what << ") verify row " << i;
  }
  // The last row is the current logits too.
  const std::vector<float> cur = a->logits();
  EXPECT_EQ(std::memcmp(cur.data(), rows.data() + size_t(k - 1) * vocab, size_t(vocab) * 4), 0);
  std::printf("%s (%s): verify of %d rows vs decode steps: worst rel L2 %.3e\n", m.source.c_str(), what, k, worst);
  return worst;
}

// Where a verify's rows depart from the decode steps, knob by knob (printed; bounded loosely): the fusions of the
// decode step and the batched passes each off in turn.
void print_knob_distances(const llm::Model& m, const std::vector<int>& ids, int p) {
  std::vector<std::pair<const char*, llm::EngineTuning>> knobs(7);
  knobs[6].first = "--exact-vfy on";
  knobs[6].second.exact_verify = llm::ExactVerify::kOn;
  for (auto& k : knobs) k.second.verify_order = llm::VerifyOrder::kPass;  // the pass's distances (decode order's: 0)
  knobs[0].first = "--fuse-norm off";
  knobs[0].second.fuse_norm = false;
  knobs[1].first = "--norm-sums off";
  knobs[1].second.norm_sums = false;
  knobs[2].first = "--fuse-glu off";
  knobs[2].second.fuse_swiglu_q8 = false;
  knobs[3].first = "--bf16-rows 0";
  knobs[3].second.bf16_batch_rows = 0;
  knobs[4].first = "--batch-rows 0";
  knobs[4].second.quant_batch_rows = 0;
  knobs[5].first = "--fuse-norm off --bf16-rows 0 --batch-rows 0";
  knobs[5].second.fuse_norm = false;
  knobs[5].second.bf16_batch_rows = 0;
  knobs[5].second.quant_batch_rows = 0;
  for (const auto& [what, t] : knobs) expect_verify_rows_match_decode(m, ids, p, 5e-2, t, what);
}

// Greedy generation with prompt lookup on `target` against `ref` without it: the same tokens up to the first position
// whose top-2 margin is under near_tie (such positions counted and printed). Returns the speculative run.
llm::GenerateResult expect_lookup_matches_plain(const std::string& what, llm::Backend& ref, llm::Backend& target,
                                                const llm::Model& m, const std::vector<int>& prompt, int n,
                                                float near_tie) {
  const llm_test::Greedy want = llm_test::greedy_reference(ref, prompt, n, m.config.eos_ids);
  llm::LookupDrafter lookup;
  llm::GenerateOptions go;
  go.n_predict = n;
  go.sampler.temperature = 0.0f;
  go.drafter = &lookup;
  const llm::GenerateResult got = llm::generate(target, m.config, prompt, go, nullptr);
  int near_ties = 0;
  for (float mgn : want.margin) near_ties += mgn < near_tie;
  size_t same = 0;
  while (same < want.tokens.size() && same < got.tokens.size() && want.tokens[same] == got.tokens[same]) ++same;
  std::printf("%s: %zu tokens, the first %zu as without speculation; drafted %lld, accepted %lld (%.1f%%) in %lld "
              "verify steps; %d positions with a top-2 margin under %.0e\n",
              what.c_str(), got.tokens.size(), same, (long long)got.spec.drafted, (long long)got.spec.accepted,
              100.0 * got.spec.accept_rate(), (long long)got.spec.steps, near_ties, double(near_tie));
  if (same < want.tokens.size() && same < got.tokens.size())
    EXPECT_LT(want.margin[same], near_tie) << "greedy outputs differ at token " << same << " where the top-2 margin is "
                                           << want.margin[same];
  else
    EXPECT_EQ(got.tokens, want.tokens);
  return got;
}

void expect_greedy_same(const std::string& what, const llm::Model& m, const std::vector<int>& prompt, int n,
                        const llm::EngineTuning& tuning = {}, float near_tie = kNearTie) {
  SCOPED_TRACE(what);
  auto ref = cuda(m, llm::KvDtype::BF16, 512, false, tuning), target = cuda(m, llm::KvDtype::BF16, 512, false, tuning);
  const llm::GenerateResult got = expect_lookup_matches_plain(what, *ref, *target, m, prompt, n, near_tie);
  EXPECT_GT(got.spec.accepted, 0) << "lookup on a repetitive story should have some drafts accepted";
  if (got.stop_reason == "length") EXPECT_EQ(got.spec.steps + got.spec.accepted, int64_t(got.tokens.size()));
}

}  // namespace

TEST(CudaSpeculative, VerifyRowsMatchTeacherForcedDecode) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  std::vector<int> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(1 + (i * 37) % (m.config.vocab_size - 1));
  expect_verify_rows_match_decode(m, ids, 31, 2e-2);  // 9 rows: a pending token and 8 drafts
  expect_verify_rows_match_decode(m, ids, 1, 2e-2);
  print_knob_distances(m, ids, 31);
}

// exact_verify: the decode step's activations, so the rows agree to the summation order. stories260K (BF16; its down
// projection's K = 172 takes the batched GEMV's two-byte loads); SmolLM2 on "warp" (FP32 rows) and "warp-dp4a" (int8
// rows quantized from FP32). 39 rows: past the batched BF16 GEMV's 16, cuBLAS on BF16 rows again.
TEST(CudaSpeculative, ExactVerifyRowsMatchDecodeSteps) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  std::vector<int> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(1 + (i * 37) % (m.config.vocab_size - 1));
  expect_verify_rows_match_decode(m, ids, 31, 1e-4, exact_tuning(), "exact");
  expect_verify_rows_match_decode(m, ids, 1, 2e-2, exact_tuning(), "exact, 39 rows");
  LLM_REQUIRE_SMOLLM2();  // stories260K above is checked either way
  const llm::Model s = llm::load_model(llm_test::smollm2_path());
  std::vector<int> sids;
  for (int i = 0; i < 24; ++i) sids.push_back(1 + (i * 7919) % (s.config.vocab_size - 1));
  // 30 layers amplify the batch-k GEMVs' other summation order (the synthetic SmolLM2 shape in Q4_1: 2.0e-4 on warp,
  // 2.0e-2 on warp-dp4a, where a flipped int8 code is 1/127 of a block; this file 5.1e-4 and 1.0e-2; H100), so the
  // bounds here are that order's, not bit-exactness; ExactVerifyDistancesByKnob holds the 5-layer model to 1e-5 (a
  // tied head read through its BF16 copy put this file's rows 7.0e-4 from the decode steps, stories260K's 1.3e-3).
  expect_verify_rows_match_decode(s, sids, 15, 1e-3, exact_tuning(), "exact, warp");
  expect_verify_rows_match_decode(s, sids, 15, 5e-2, exact_tuning(), "exact, warp-dp4a", "warp-dp4a");
}

namespace {

// A decode-order verify (EngineTuning::verify_order) against decode steps: after the same prefill of p tokens, a
// verify of ids[p .. p + k) on one engine and k decode steps on another; every row must be the decode step's logits
// bit for bit. Then a rewind and the same verify again (its captured graph with verify_graph: the position read on the
// device) must give the same bits. Returns false (and checks nothing) where the verify does not run in decode order.
bool expect_decode_order_rows(const std::string& what, const llm::Model& m, const std::vector<int>& ids, int p,
                              const llm::EngineTuning& t, const std::string& gemv, bool graph) {
  SCOPED_TRACE(what);
  const int vocab = m.config.vocab_size, k = int(ids.size()) - p, ctx = std::min(512, m.config.max_seq_len);
  auto a = cuda(m, llm::KvDtype::BF16, ctx, graph, t, gemv), b = cuda(m, llm::KvDtype::BF16, ctx, graph, t, gemv);
  if (!llm::as_cuda_backend(*a).verify_in_decode_order()) {
    std::printf("%s: the verify runs as a prefill pass here (not checked)\n", what.c_str());
    return false;
  }
  a->prefill(ids.data(), p, 0);
  b->prefill(ids.data(), p, 0);
  std::vector<float> rows = a->verify(ids.data() + p, k, p);
  EXPECT_EQ(rows.size(), size_t(k) * size_t(vocab));
  rows.resize(size_t(k) * size_t(vocab), NAN);
  int differ = 0;
  double worst = 0;
  for (int i = 0; i < k; ++i) {
    b->decode(ids[size_t(p + i)], p + i);
    const std::vector<float> want = b->logits();
    const float* got = rows.data() + size_t(i) * vocab;
    if (std::memcmp(got, want.data(), size_t(vocab) * sizeof(float)) != 0) {
      ++differ;
      worst = std::max(worst, rel_l2(got, want.data(), size_t(vocab)));
    }
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << k << " verify rows differ from the decode steps (worst "
                       << "rel L2 " << worst << ")";
  for (int r = 0; r < 2; ++r) {  // eager then captured where graph is on (the second verify of a length captures)
    a->rewind(p);
    const std::vector<float> again = a->verify(ids.data() + p, k, p);
    EXPECT_EQ(again.size(), rows.size());
    EXPECT_TRUE(again.size() == rows.size() && std::memcmp(again.data(), rows.data(), rows.size() * 4) == 0)
        << what << ": verify again after a rewind (round " << r << ")";
  }
  std::printf("%s: %d verify rows at position %d, %d differ from the decode steps\n", what.c_str(), k, p, differ);
  return true;
}

}  // namespace

// Small shapes of every kernel the decode-order verify launches over a token axis (the quantized warp forms with the
// norm fold, RoPE + store and attention as two launches, the merge, SwiGLU's int8 form; BF16's warp-r2 and the SIMT
// attention), eager and captured, for compute-sanitizer (memcheck, racecheck, synccheck): a filter of its own,
// CudaSpeculativeSanitizerSmall.*, each case still checked bit for bit.
TEST(CudaSpeculativeSanitizerSmall, DecodeOrderVerify) {
  REQUIRE_GPU();
  int checked = 0, asked = 1;
  for (const char* type : {"q4_1", "q4_k_m"}) {
    llm::Model m = llm::load_model("synthetic:tiny-gqa");
    llm::quantize_model(m, llm::parse_quantize_type(type));
    std::vector<int> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(1 + (i * 7919) % (m.config.vocab_size - 1));
    for (const char* gemv : {"warp", "warp-dp4a"}) {
      if (!llm::gemv_refusal(llm::gemv_plan(gemv), m, false).empty()) continue;
      for (bool graph : {false, true}) {
        ++asked;
        checked += expect_decode_order_rows(std::string("tiny-gqa ") + type + " " + gemv + (graph ? " captured" : ""),
                                            m, ids, 7, {}, gemv, graph);
      }
    }
  }
  const llm::Model stories = llm::load_model(kStories + "/stories260K.bin");
  std::vector<int> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(1 + (i * 37) % (stories.config.vocab_size - 1));
  checked += expect_decode_order_rows("stories260K warp-r2", stories, ids, 7, {}, "warp-r2", false);
  EXPECT_GE(asked, 5) << "warp and warp-dp4a refused every small quantized model";
  EXPECT_EQ(checked, asked) << "the decode-order verify ran on fewer of the small cases than asked";
}

// The decode-order verify (the default up to 1 GiB per token where every decode matrix has a token axis): each row is the
// decode step's logits bit for bit, on the synthetic SmolLM2 shape (head_dim 64, groups of 3: the tensor-core
// attention), tiny-gqa (head_dim 16: the SIMT attention) and tiny-long in Q4_1, Q8_0 and the Q4_K_M mix, on warp and
// warp-dp4a, and stories260K in BF16 on warp-r2, with each decode fusion off in turn (every launch form forward_token
// has gets its token axis), 9 rows (one pass) and 21 rows (two passes of the 16 slabs), eager and captured; and on the
// real SmolLM2 file.
TEST(CudaSpeculative, DecodeOrderVerifyRowsAreTheDecodeStepsBitForBit) {
  REQUIRE_GPU();
  std::vector<std::pair<std::string, llm::EngineTuning>> knobs(8);
  knobs[0].first = "defaults";
  knobs[1].first = "--fuse-norm off";
  knobs[1].second.fuse_norm = false;
  knobs[2].first = "--norm-sums off";
  knobs[2].second.norm_sums = false;
  knobs[3].first = "--stage-glu off";
  knobs[3].second.stage_glu = false;
  knobs[4].first = "--stage-glu off --fuse-glu off";
  knobs[4].second.stage_glu = false;
  knobs[4].second.fuse_swiglu_q8 = false;
  knobs[5].first = "--o-merge on";
  knobs[5].second.stage_merge = true;
  knobs[6].first = "--fuse-rope off";
  knobs[6].second.fuse_rope = false;
  knobs[7].first = "--fork-mix on";
  knobs[7].second.fork_pieces = true;
  int checked = 0;
  for (const char* type : {"q4_1", "q8_0", "q4_k_m"})
    for (const char* base : {"synthetic:smollm2-135m", "synthetic:tiny-gqa", "synthetic:tiny-long"}) {
      llm::Model m = llm::load_model(base);
      llm::quantize_model(m, llm::parse_quantize_type(type));
      std::vector<int> ids;
      for (int i = 0; i < 40; ++i) ids.push_back(1 + (i * 7919) % (m.config.vocab_size - 1));
      for (const char* gemv : {"warp", "warp-dp4a"}) {
        if (!llm::gemv_refusal(llm::gemv_plan(gemv), m, false).empty()) continue;
        const bool smol = std::string(base) == "synthetic:smollm2-135m";
        for (size_t i = 0; i < knobs.size(); ++i) {
          if (i > 0 && !(smol && std::string(type) == "q4_1")) break;  // every knob on one model, defaults on all
          const std::string what = std::string(base) + " " + type + " " + gemv + " (" + knobs[i].first + ")";
          checked += expect_decode_order_rows(what, m, std::vector<int>(ids.begin(), ids.begin() + 24), 15,
                                              knobs[i].second, gemv, true);
        }
        checked += expect_decode_order_rows(std::string(base) + " " + type + " " + gemv + ", 21 rows", m,
                                            std::vector<int>(ids.begin(), ids.begin() + 40), 19, {}, gemv, true);
        if (smol) {  // deep in the cache: each token's attention over 4 to 5 key splits, merged
          std::vector<int> deep;
          for (int i = 0; i < 309; ++i) deep.push_back(1 + (i * 7919) % (m.config.vocab_size - 1));
          checked += expect_decode_order_rows(std::string(base) + " " + type + " " + gemv + " at 300", m, deep, 300,
                                              {}, gemv, true);
        }
      }
    }
  EXPECT_GE(checked, 30) << "the decode-order verify ran on too few of the quantized models";
  {  // The negative control: with it off the same verify is a prefill pass, and its rows are not the decode steps'.
    llm::Model m = llm::load_model("synthetic:smollm2-135m");
    llm::quantize_model(m, llm::parse_quantize_type("q4_1"));
    llm::EngineTuning off;
    off.verify_order = llm::VerifyOrder::kPass;
    auto a = cuda(m, llm::KvDtype::BF16, 512, false, off);
    EXPECT_FALSE(llm::as_cuda_backend(*a).verify_in_decode_order());
    std::vector<int> ids;
    for (int i = 0; i < 24; ++i) ids.push_back(1 + (i * 7919) % (m.config.vocab_size - 1));
    EXPECT_GT(expect_verify_rows_match_decode(m, ids, 15, 1e-2, off, "pass verify"), 0.0);
  }
  {  // BF16 weights on warp-r2 (the default, which has the token axis: head_dim 8, the SIMT attention; auto takes it
     // under kDecodeOrderAutoBytes), and on "warp" (none: the prefill pass, said by the backend)
    const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
    EXPECT_TRUE(llm::as_cuda_backend(*cuda(m)).verify_in_decode_order()) << "auto: warp-r2 has the token axis";
    std::vector<int> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(1 + (i * 37) % (m.config.vocab_size - 1));
    EXPECT_TRUE(expect_decode_order_rows("stories260K BF16 warp-r2", m, std::vector<int>(ids.begin(), ids.begin() + 24),
                                         15, {}, "warp-r2", true));
    EXPECT_TRUE(expect_decode_order_rows("stories260K BF16 warp-r2, 21 rows", m, ids, 19, {}, "warp-r2", true));
    llm::EngineTuning unfused;
    unfused.fuse_norm = false;
    EXPECT_TRUE(expect_decode_order_rows("stories260K BF16 warp-r2 --fuse-norm off", m,
                                         std::vector<int>(ids.begin(), ids.begin() + 24), 15, unfused, "warp-r2",
                                         true));
    llm::EngineTuning decode;  // asked for, still none on a form without the axis
    decode.verify_order = llm::VerifyOrder::kDecode;
    EXPECT_FALSE(
        llm::as_cuda_backend(*cuda(m, llm::KvDtype::BF16, 512, false, decode, "warp")).verify_in_decode_order());
  }
  LLM_REQUIRE_SMOLLM2();  // the synthetic models above are checked either way
  const llm::Model s = llm::load_model(llm_test::smollm2_path());
  std::vector<int> sids;
  for (int i = 0; i < 24; ++i) sids.push_back(1 + (i * 7919) % (s.config.vocab_size - 1));
  for (const char* gemv : {"", "warp-dp4a"})
    EXPECT_TRUE(expect_decode_order_rows(std::string("SmolLM2 file ") + gemv, s, sids, 15, {}, gemv, true));
}

TEST(CudaSpeculative, ExactVerifyKeepsGreedyOutputUpToNearTies) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  auto tok = llm::load_tokenizer(m, kStories + "/tok512.model");
  expect_greedy_same("stories260K lookup, exact verify (cuda)", m,
                     tok->encode("Once upon a time, there was a little girl named Lily. Lily", true), 160,
                     exact_tuning(), kNearTieExact);
  LLM_REQUIRE_SMOLLM2();  // stories260K above is checked either way
  const llm::Model s = llm::load_model(llm_test::smollm2_path());
  auto stok = llm::load_tokenizer(s, "");
  expect_greedy_same("SmolLM2 lookup, exact verify (cuda)", s,
                     stok->encode("Repeat this list twice: apples, pears, plums, cherries, figs, dates, limes.", true),
                     96, exact_tuning(), kNearTieExact);
}

TEST(CudaSpeculative, VerifyRowsMatchTeacherForcedDecodeOnTheQuantizedSmolLM2File) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  std::vector<int> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(1 + (i * 7919) % (m.config.vocab_size - 1));
  expect_verify_rows_match_decode(m, ids, 15, 3e-2);
  print_knob_distances(m, ids, 15);
}

// Wrong drafts verified, rewound, then the right ones: the same bits as a verify that never saw the wrong ones.
TEST(CudaSpeculative, RewindThenVerifyIsAsNeverThere) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  std::vector<int> prompt, right, wrong;
  for (int i = 0; i < 20; ++i) prompt.push_back(1 + (i * 37) % 500);
  for (int i = 0; i < 6; ++i) right.push_back(3 + i * 11), wrong.push_back(200 + i * 13);
  auto a = cuda(m), b = cuda(m);
  a->prefill(prompt.data(), int(prompt.size()), 0);
  b->prefill(prompt.data(), int(prompt.size()), 0);
  a->verify(wrong.data(), int(wrong.size()), 20);
  a->rewind(20);
  const std::vector<float> got = a->verify(right.data(), int(right.size()), 20);
  const std::vector<float> want = b->verify(right.data(), int(right.size()), 20);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  // And decode after a rewind reads the right rows: the next token's logits equal b's.
  a->rewind(23);
  b->rewind(23);
  a->decode(right[3], 23);
  b->decode(right[3], 23);
  EXPECT_EQ(a->logits(), b->logits());
  EXPECT_THROW(a->rewind(-1), llm::Error);
  EXPECT_THROW(a->verify(right.data(), 0, 0), llm::Error);
  EXPECT_THROW(a->verify(right.data(), 2, 511), llm::Error);  // past the context
}

TEST(CudaSpeculative, GreedyOutputIsUnchangedWithPromptLookup) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  auto tok = llm::load_tokenizer(m, kStories + "/tok512.model");
  expect_greedy_same("stories260K lookup (cuda)", m,
                     tok->encode("Once upon a time, there was a little girl named Lily. Lily", true), 160);
}

TEST(CudaSpeculative, GreedyOutputIsUnchangedOnTheSmolLM2File) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const llm::Model m = llm::load_model(llm_test::smollm2_path());
  auto tok = llm::load_tokenizer(m, "");
  expect_greedy_same("SmolLM2 lookup (cuda)", m,
                     tok->encode("Repeat this list twice: apples, pears, plums, cherries, figs, dates, limes.", true),
                     96);
}

// The FP8 cache verifies eagerly (its prefill attention reads pos0 on the host) and the loop keeps every rewind inside
// the open block (Backend::exact_rewind_end). A verify stores its rows together and then attends, where decode stores
// one row before each attends, so the block scales the earlier rows see can differ: rows are compared loosely and the
// greedy output up to a near tie of kNearTie.
TEST(CudaSpeculative, Fp8CacheVerifiesAndKeepsGreedyOutputUpToNearTies) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_synthetic("tiny-long");  // head_dim 64: the FP8 cache runs it
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % 97);
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 20);  // a repeat, so lookup has something to propose
  auto ref = cuda(m, llm::KvDtype::FP8), target = cuda(m, llm::KvDtype::FP8);
  EXPECT_TRUE(target->supports_verify());
  EXPECT_EQ(target->exact_rewind_end(40), 64);
  EXPECT_EQ(target->exact_rewind_end(63), 64);
  EXPECT_EQ(target->exact_rewind_end(64), 96);
  // Rows: a verify of 6 after a prefill of 30 against 6 decode steps after the same prefill.
  {
    auto a = cuda(m, llm::KvDtype::FP8), b = cuda(m, llm::KvDtype::FP8);
    a->prefill(prompt.data(), 30, 0);
    b->prefill(prompt.data(), 30, 0);
    const int vocab = m.config.vocab_size;
    const std::vector<float> rows = a->verify(prompt.data() + 30, 6, 30);
    double worst = 0;
    for (int i = 0; i < 6; ++i) {
      b->decode(prompt[size_t(30 + i)], 30 + i);
      const std::vector<float> want = b->logits();
      worst = std::max(worst, rel_l2(rows.data() + size_t(i) * vocab, want.data(), size_t(vocab)));
    }
    std::printf("tiny-long FP8: verify of 6 rows vs decode steps: worst rel L2 %.3e\n", worst);
    EXPECT_LT(worst, 5e-2);
  }
  const llm::GenerateResult got =
      expect_lookup_matches_plain("tiny-long FP8 lookup", *ref, *target, m, prompt, 96, kNearTie);
  EXPECT_GT(got.spec.drafted, 0);
}

// EngineTuning::verify_graph: the pass captured once per draft length and replayed reads its position on the device:
// the same verifies, at moving positions with rewinds between them (eager, then captured, then replayed, for two
// lengths), give the logits of the eager engine, within rounding, with the same greedy choice at every row. Rounding:
// cuBLAS may pick another algorithm under capture, and a captured pass always splits its attention's keys (it is
// replayed at any position) where an eager one whose keys make one split runs the plain kernel: another summation
// order, 1.0e-4 to 1.3e-4 on SmolLM2's 30 layers (H100, 2026-12-07), so the bound is 5e-4. stories260K (BF16,
// head_dim 8: the generic prefill attention kernel) and synthetic SmolLM2-135M quantized to Q4_0 (its matrices through
// the batch-k GEMV, head_dim 64: the tensor-core one).
void expect_graph_verify_matches_eager(const llm::Model& m) {
  SCOPED_TRACE(m.source);
  const int vocab = m.config.vocab_size;
  std::vector<int> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back(1 + (i * 37) % (vocab - 1));
  auto g = cuda(m, llm::KvDtype::BF16, 512, true), e = cuda(m);
  g->prefill(prompt.data(), int(prompt.size()), 0);
  e->prefill(prompt.data(), int(prompt.size()), 0);
  int pos = 20;
  double worst = 0;
  for (int round = 0; round < 8; ++round) {
    const int k = round % 2 ? 5 : 3;
    std::vector<int> drafts;
    for (int i = 0; i < k; ++i) drafts.push_back(1 + (round * 131 + i * 17) % (vocab - 1));
    const std::vector<float> got = g->verify(drafts.data(), k, pos);
    const std::vector<float> want = e->verify(drafts.data(), k, pos);
    ASSERT_EQ(got.size(), want.size());
    for (int r = 0; r < k; ++r) {
      const float* a = got.data() + size_t(r) * vocab;
      const float* b = want.data() + size_t(r) * vocab;
      const double err = rel_l2(a, b, size_t(vocab));
      worst = std::max(worst, err);
      EXPECT_LE(err, 5e-4) << "round " << round << " row " << r;
      EXPECT_EQ(std::max_element(a, a + vocab) - a, std::max_element(b, b + vocab) - b) << "round " << round;
    }
    // Keep two of the k tokens, as an accepted prefix would, and move on.
    pos += 2;
    g->rewind(pos);
    e->rewind(pos);
  }
  std::printf("%s: captured verify vs eager over 8 verifies at moving positions: worst rel L2 %.3e\n",
              m.source.c_str(), worst);
}

TEST(CudaSpeculative, CapturedVerifyMatchesEagerAtMovingPositions) {
  REQUIRE_GPU();
  expect_graph_verify_matches_eager(llm::load_model(kStories + "/stories260K.bin"));
  llm::Model q = llm::load_model("synthetic:smollm2-135m");
  llm::quantize_model(q, llm::parse_quantize_type("q4_0"));
  expect_graph_verify_matches_eager(q);
}

// verify_argmax (what a greedy speculative loop calls): the ids of verify()'s rows judged on the device, the same
// bits as argmax() of the rows copied back, eager and captured, over the whole head and below a vocabulary limit.
TEST(CudaSpeculative, VerifyArgmaxIsTheArgmaxOfTheVerifyRows) {
  REQUIRE_GPU();
  llm::Model q = llm::load_model("synthetic:smollm2-135m");
  llm::quantize_model(q, llm::parse_quantize_type("q4_0"));
  const llm::Model s = llm::load_model(kStories + "/stories260K.bin");
  for (const llm::Model* m : {&s, static_cast<const llm::Model*>(&q)}) {
    auto e = cuda(*m, llm::KvDtype::BF16, 256, true);
    const int V = m->config.vocab_size;
    std::vector<int> ids;
    for (int i = 0; i < 60; ++i) ids.push_back(1 + (i * 131) % (V - 1));
    e->prefill(ids.data(), 20, 0);
    for (int round = 0; round < 3; ++round)  // eager, then captured, then replayed
      for (int limit : {0, V - V / 8}) {
        const int n = 9, pos = 20 + round;
        const std::vector<float> rows = e->verify(ids.data() + pos, n, pos);
        e->rewind(pos);
        std::vector<float> margins;  // SpecOptions::guard's: the top-2 margins beside the ids, computed on the device
        const std::vector<int> got = e->verify_argmax(ids.data() + pos, n, pos, limit, &margins);
        e->rewind(pos);
        ASSERT_EQ(got.size(), size_t(n));
        ASSERT_EQ(margins.size(), size_t(n));
        for (int i = 0; i < n; ++i) {
          const float* row = rows.data() + size_t(i) * size_t(V);
          const int lim = limit > 0 ? limit : V;
          EXPECT_EQ(got[size_t(i)], llm::argmax(row, lim))
              << m->source << ": row " << i << ", round " << round << ", limit " << limit;
          // Round 0 compares an eager pass (rows) with the captured one (the second use of its length: another
          // attention kernel, ~1e-4 apart on SmolLM2's shape); after that both are replays: the same bits.
          const float want = llm::top2_margin(row, lim, llm::argmax(row, lim));
          if (round == 0)
            EXPECT_NEAR(margins[size_t(i)], want, 5e-3f) << m->source << ": margin of row " << i << ", limit " << limit;
          else
            EXPECT_EQ(margins[size_t(i)], want)
                << m->source << ": margin of row " << i << ", round " << round << ", limit " << limit;
        }
      }
  }
}

// A prompt's pass on a model kept quantized reads the decode form's activations (EngineTuning::exact_verify's default,
// auto): int8 rows quantized from FP32 where decode runs "warp-dp4a" (a 37-token prompt, one pass under the default
// --batch-rows 64), FP32 rows where it runs "warp" (up to 8 tokens; longer prompts BF16 rows through cuBLAS). So the
// prompt's logits agree with decoding the same tokens one by one: to the summation order on "warp" (bounded), and on
// "warp-dp4a" nearer than with --exact-vfy off (BF16-rounded int8 rows, what prompts read before; the int8 rounding
// flips with any difference in x, and on random weights that grows through the layers, so only the order is asserted).
TEST(CudaSpeculative, PromptLogitsMatchDecodeStepsOnAQuantizedModel) {
  REQUIRE_GPU();
  llm::Model q = llm::load_model("synthetic:smollm2-135m");
  llm::quantize_model(q, llm::parse_quantize_type("q4_1"));
  const int V = q.config.vocab_size;
  std::vector<int> ids;
  for (int i = 0; i < 37; ++i) ids.push_back(1 + (i * 7919) % (V - 1));
  auto distance = [&](const std::string& gemv, llm::ExactVerify mode, int n) {
    llm::EngineTuning t;
    t.exact_verify = mode;
    auto a = cuda(q, llm::KvDtype::BF16, 256, false, t, gemv), b = cuda(q, llm::KvDtype::BF16, 256, false, t, gemv);
    a->prefill(ids.data(), n, 0);
    const std::vector<float> got = a->logits();
    b->prefill(ids.data(), 1, 0);
    for (int i = 1; i < n; ++i) b->decode(ids[size_t(i)], i);
    const std::vector<float> want = b->logits();
    EXPECT_EQ(got.size(), size_t(V));
    return got.size() == want.size() ? rel_l2(got.data(), want.data(), size_t(V)) : INFINITY;
  };
  for (const auto& [gemv, n] : {std::pair<std::string, int>{"warp", 8}, {"warp-dp4a", 37}}) {
    const double on = distance(gemv, llm::ExactVerify::kAuto, n), off = distance(gemv, llm::ExactVerify::kOff, n);
    std::printf("synthetic SmolLM2 Q4_1 on %s: a %d-token prompt's logits vs decode steps: rel L2 %.3e (auto), %.3e "
                "(--exact-vfy off)\n", gemv.c_str(), n, on, off);
    if (gemv == "warp") EXPECT_LE(on, 1e-3) << gemv;
    EXPECT_LT(on, off) << gemv << ": the control (BF16-rounded int8 rows) should be further from the decode steps";
  }
}

namespace {

// Verify rows at [p, p + k) after a prefill of p, twice on one engine (the second after a rewind), and decode steps on
// another: {rows vs decode, second verify vs first}.
std::pair<double, double> verify_vs_decode(const llm::Model& m, const std::vector<int>& ids, int p,
                                           const llm::EngineTuning& t, const std::string& gemv) {
  const int vocab = m.config.vocab_size, k = int(ids.size()) - p;
  auto a = cuda(m, llm::KvDtype::BF16, 512, false, t, gemv), b = cuda(m, llm::KvDtype::BF16, 512, false, t, gemv);
  a->prefill(ids.data(), p, 0);
  b->prefill(ids.data(), p, 0);
  const std::vector<float> rows = a->verify(ids.data() + p, k, p);
  a->rewind(p);
  const std::vector<float> again = a->verify(ids.data() + p, k, p);
  double worst = 0;
  for (int i = 0; i < k; ++i) {
    b->decode(ids[size_t(p + i)], p + i);
    const std::vector<float> want = b->logits();
    worst = std::max(worst, rel_l2(rows.data() + size_t(i) * vocab, want.data(), size_t(vocab)));
  }
  return {worst, rel_l2(again.data(), rows.data(), rows.size())};
}

}  // namespace

// Where an exact verify departs from the decode steps, knob by knob, on a 30-layer model kept quantized (the synthetic
// SmolLM2 shape in Q4_1, tied head: head_dim 64, the tensor-core attention) and on stories260K in Q4_1 (5 layers,
// tied head, head_dim 8: the SIMT attention). Asserted: a verify is deterministic (the same rows again after a
// rewind, bit for bit); stories260K's rows within 1e-5 of the decode steps on warp (7.6e-7 on an H100; a head read
// through its BF16 copy instead of decode's planes gave 1.3e-3); the 30-layer shape within its summation order's
// amplified reach (warp 2.0e-4, warp-dp4a 2.0e-2 on an H100).
TEST(CudaSpeculative, ExactVerifyDistancesByKnob) {
  REQUIRE_GPU();
  llm::Model smol = llm::load_model("synthetic:smollm2-135m");
  llm::quantize_model(smol, llm::parse_quantize_type("q4_1"));
  llm::Model stories = llm::load_model(kStories + "/stories260K.bin");
  llm::quantize_model(stories, llm::parse_quantize_type("q4_1"));
  for (const llm::Model* m : {&smol, &stories}) {
    std::vector<int> ids;
    for (int i = 0; i < 24; ++i) ids.push_back(1 + (i * 7919) % (m->config.vocab_size - 1));
    std::vector<std::pair<const char*, llm::EngineTuning>> knobs(5);
    for (auto& k : knobs) k.second.exact_verify = llm::ExactVerify::kOn, k.second.verify_order = llm::VerifyOrder::kPass;
    knobs[0].first = "exact";
    knobs[1].first = "exact --fuse-norm off";
    knobs[1].second.fuse_norm = false;
    knobs[2].first = "exact --norm-sums off";
    knobs[2].second.norm_sums = false;
    knobs[3].first = "exact --fuse-pass off";
    knobs[3].second.fuse_pass = false;
    knobs[4].first = "exact --fuse-norm off --fuse-pass off";
    knobs[4].second.fuse_norm = false;
    knobs[4].second.fuse_pass = false;
    for (const char* gemv : {"warp", "warp-dp4a"})
      for (const auto& [what, t] : knobs) {
        if (!llm::gemv_refusal(llm::gemv_plan(gemv), *m, false).empty()) continue;  // stories' F16 down: no dp4a form
        const auto [d, again] = verify_vs_decode(*m, ids, 15, t, gemv);
        std::printf("%s Q4_1 %s (%s): 9 verify rows vs decode steps %.3e; verify again %.3e\n",
                    m->source.c_str(), gemv, what, d, again);
        EXPECT_EQ(again, 0.0) << m->source << " " << gemv << " " << what;
        const bool dp4a = std::string(gemv) == "warp-dp4a";
        EXPECT_LE(d, m == &stories ? 1e-5 : dp4a ? 5e-2 : 1e-3) << m->source << " " << gemv << " " << what;
      }
  }
}

// The spec-bench prompts (bench/spec_prompts: summarise, extract, rewrite a given text) on the real SmolLM2 file, 256
// greedy tokens each, with prompt lookup and the default verify (exact on this file: its matrices are kept quantized)
// against the decode steps: where an output departs, the reference's top-2 logit margin there (printed per prompt and
// counted against issue 36's 1e-3). Asserted: a departure only at a margin under the default verify's 5e-2.
TEST(CudaSpeculative, SpecBenchPromptsDepartOnlyAtNearTies) {
  REQUIRE_GPU();
  LLM_REQUIRE_SMOLLM2();
  const llm::Model s = llm::load_model(llm_test::smollm2_path());
  auto tok = llm::load_tokenizer(s, "");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LLM_SOURCE_DIR) + "/bench/spec_prompts"))
    if (e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 20u);
  int departed = 0, over_exact = 0;
  auto ref = cuda(s, llm::KvDtype::BF16, 2048), target = cuda(s, llm::KvDtype::BF16, 2048);
  // A decode-order verify (the default on this file) makes every row the decode step's: no output may depart.
  const bool decode_order = llm::as_cuda_backend(*target).verify_in_decode_order();
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    const std::vector<int> prompt = tok->encode(text.str(), true);
    ref->rewind(0);
    target->rewind(0);
    const llm_test::Greedy want = llm_test::greedy_reference(*ref, prompt, 256, s.config.eos_ids);
    llm::LookupDrafter lookup;
    llm::GenerateOptions go;
    go.n_predict = 256;
    go.sampler.temperature = 0.0f;
    go.drafter = &lookup;
    const llm::GenerateResult got = llm::generate(*target, s.config, prompt, go, nullptr);
    size_t same = 0;
    while (same < want.tokens.size() && same < got.tokens.size() && want.tokens[same] == got.tokens[same]) ++same;
    const bool differ = same < want.tokens.size() && same < got.tokens.size();
    std::printf("%s: %zu prompt tokens, %zu of %zu tokens as without speculation", f.stem().c_str(), prompt.size(),
                same, want.tokens.size());
    if (differ) {
      ++departed;
      over_exact += want.margin[same] >= kNearTieExact;
      std::printf("; departs at token %zu, top-2 margin %.3e", same, double(want.margin[same]));
      EXPECT_LT(want.margin[same], kNearTie) << f.stem() << ": departs at token " << same;
      EXPECT_FALSE(decode_order) << f.stem() << ": departs at token " << same << " under the decode-order verify";
    } else {
      EXPECT_EQ(got.tokens.size(), want.tokens.size()) << f.stem();
    }
    std::printf("\n");
  }
  std::printf("spec prompts (%s verify): %d of %zu outputs depart from the decode steps, %d of them at a top-2 "
              "margin of 1e-3 or more\n", decode_order ? "decode-order" : "prefill-pass", departed, files.size(),
              over_exact);
}

// prepare_verify (run-llama calls it at load under --spec): every verify length 2 .. max is captured before the first
// is timed (two rounds: eager, then the capture), and nothing after it changes: a prepared engine's verify rows are a
// fresh engine's (within the captured-vs-eager bound above) and replay the prepared graph, and greedy output with
// lookup is still the output without it. Over an FP8 cache its passes stay eager: nothing is captured.
TEST(CudaSpeculative, PreparedVerifyIsCapturedAtLoadAndChangesNothing) {
  REQUIRE_GPU();
  const llm::Model m = llm::load_model(kStories + "/stories260K.bin");
  const int vocab = m.config.vocab_size;
  auto prepared = cuda(m, llm::KvDtype::BF16, 512, true), fresh = cuda(m, llm::KvDtype::BF16, 512, true);
  llm::CudaBackend& cb = llm::as_cuda_backend(*prepared);
  EXPECT_EQ(cb.captured_verify_lengths(), 0);
  prepared->prepare_verify(9);
  EXPECT_EQ(cb.captured_verify_lengths(), 8) << "lengths 2 .. 9";
  {  // past the rows buffer's first size (17): still every length, the buffer sized once
    auto wide = cuda(m, llm::KvDtype::BF16, 512, true);
    wide->prepare_verify(25);
    EXPECT_EQ(llm::as_cuda_backend(*wide).captured_verify_lengths(), 24) << "lengths 2 .. 25";
  }
  std::vector<int> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(1 + (i * 37) % (vocab - 1));
  prepared->prefill(ids.data(), 20, 0);
  fresh->prefill(ids.data(), 20, 0);
  const std::vector<float> got = prepared->verify(ids.data() + 20, 4, 20);
  const std::vector<float> want = fresh->verify(ids.data() + 20, 4, 20);
  ASSERT_EQ(got.size(), want.size());
  for (int r = 0; r < 4; ++r) {
    const float* a = got.data() + size_t(r) * vocab;
    const float* b = want.data() + size_t(r) * vocab;
    EXPECT_LE(rel_l2(a, b, size_t(vocab)), 1e-4) << "row " << r;
    EXPECT_EQ(std::max_element(a, a + vocab) - a, std::max_element(b, b + vocab) - b) << "row " << r;
  }
  EXPECT_EQ(cb.captured_verify_lengths(), 8) << "the pass of 4 replayed its prepared graph";

  {  // FP8: its verify runs eagerly (the position read on the host), so nothing is captured; head_dim 64 (the FP8
     // cache's attention takes 64 and 128, stories260K has 8)
    const llm::Model t = llm::load_synthetic("tiny-long");
    auto fp8 = cuda(t, llm::KvDtype::FP8, 512, true);
    fp8->prepare_verify(9);
    EXPECT_EQ(llm::as_cuda_backend(*fp8).captured_verify_lengths(), 0);
  }

  auto tok = llm::load_tokenizer(m, kStories + "/tok512.model");
  const std::vector<int> prompt = tok->encode("Once upon a time, there was a little girl named Lily. Lily", true);
  auto ref = cuda(m, llm::KvDtype::BF16, 512, true), target = cuda(m, llm::KvDtype::BF16, 512, true);
  target->prepare_verify(9);
  const llm::GenerateResult spec =
      expect_lookup_matches_plain("stories260K lookup, prepared", *ref, *target, m, prompt, 96, kNearTie);
  EXPECT_GT(spec.spec.accepted, 0);
}
