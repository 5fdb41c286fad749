// The CUDA engine's memory plan (engine/memory_plan.h) on the CPU: the sums by item and by stored type, the context
// chosen when the default does not fit, the refusal with its bytes, and the line said at load.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/model.h"
#include "models/quant.h"
#include "models/quantize_model.h"
#include "kernels/gemv/gemv_epilogue.h"     // kGemvEpiloguePartials
#include "kernels/quant/gemv_quant_plan.h"  // quant_batch_x_bytes
#include "models_test_util.h"

namespace {

using llm::DeviceSizes;
using llm::MemoryPlan;
using llm::MemoryPlanner;
using llm::Model;
using llm_test::expect_error;

constexpr double kMiB = double(1 << 20), kGiB = double(1 << 30);

// Sizes a test can predict: 1 MiB of KV cache per position, 4 KiB of attention scratch per position.
DeviceSizes fake_sizes() {
  DeviceSizes s;
  s.kv_bytes = [](int ctx) { return double(ctx) * kMiB; };
  s.attention_scratch = [](int ctx) { return double(ctx) * 4096.0; };
  s.sample_scratch = 1000;
  s.gemv_context = 2000;
  return s;
}

double matrix_elements(const llm::ModelConfig& c) {  // every projection of every layer
  return double(c.n_layers) * (2.0 * c.q_dim() * c.dim + 2.0 * c.kv_dim() * c.dim + 3.0 * c.hidden_dim * c.dim);
}

TEST(MemoryPlan, Bf16ModelCountsTheRowMajorCopyAndOnePrepackedCopy) {
  const Model m = llm::load_synthetic("llama3.1-8b");
  const llm::ModelConfig& c = m.config;
  const MemoryPlanner planner(m, /*tied=*/false, /*keep_quant=*/true, llm::KvDtype::BF16, fake_sizes());
  const MemoryPlan p = planner.plan(8192, 2048);
  const double head = double(c.vocab_size) * c.dim;
  EXPECT_DOUBLE_EQ(p.weights, 2.0 * (matrix_elements(c) + 2.0 * head));  // embedding and the untied head
  EXPECT_DOUBLE_EQ(p.prepacked, 2.0 * (matrix_elements(c) + head));      // decode reads the head, not the embedding
  ASSERT_EQ(p.prepacked_by_type.size(), 1u);
  EXPECT_EQ(p.prepacked_by_type[0].first, "BF16");
  EXPECT_DOUBLE_EQ(p.kv, 8192 * kMiB);
  EXPECT_GE(p.scratch, 8192 * 4096.0 + 3000.0 + double(llm::kCublasWorkspaceBytes));
  EXPECT_DOUBLE_EQ(p.total(), p.weights + p.prepacked + p.norms + p.kv + p.activations + p.scratch +
                                  double(llm::kReserveBytes));
  // The 8B shape in BF16: 15 GiB of weights, about as much again prepacked.
  EXPECT_NEAR(p.weights / kGiB, 14.96, 0.01);
}

// The batch-k GEMV's int8 rows follow --batch-rows (EngineTuning::quant_batch_rows), capped by the pass and by
// kQuantBatchPassMax: the default 64 costs 64 rows of the widest input, --batch-rows 2048 a whole chunk's.
TEST(MemoryPlan, BatchRowsFollowTheTuning) {
  EXPECT_EQ(llm::quant_batch_rows_held(2048, 64), 64);
  EXPECT_EQ(llm::quant_batch_rows_held(16, 64), 16);      // a short context's chunk
  EXPECT_EQ(llm::quant_batch_rows_held(2048, 0), 1);      // never batched: one row, not none
  EXPECT_EQ(llm::quant_batch_rows_held(4096, 100000), llm::kQuantBatchPassMax);
  const Model m = llm::load_synthetic("llama3.1-8b");
  DeviceSizes small = fake_sizes(), large = fake_sizes();
  large.quant_batch_rows = 2048;
  const MemoryPlan a = MemoryPlanner(m, false, true, llm::KvDtype::BF16, small).plan(8192, 2048);
  const MemoryPlan b = MemoryPlanner(m, false, true, llm::KvDtype::BF16, large).plan(8192, 2048);
  const int64_t wide = m.config.hidden_dim;
  EXPECT_DOUBLE_EQ(b.activations - a.activations,
                   double(llm::quant_batch_x_bytes(2048, wide) - llm::quant_batch_x_bytes(64, wide)));
  EXPECT_EQ(small.quant_batch_rows, 64);  // the default
  EXPECT_NEAR((b.activations - a.activations) / kMiB, 2048.0 * 19712 / kMiB - 64.0 * 19712 / kMiB, 1.0);
}

// The CUDA engine's decode buffers come in kTokenSlabs token slabs (a decode-order verify runs the decode step's kernels
// for that many tokens side by side, engine/cuda/activations.h): with DeviceSizes::decode_slab the plan counts
// kTokenSlabs slabs in place of the one set of decode buffers it counts without.
TEST(MemoryPlan, DecodeBuffersCountedPerTokenSlab) {
  const Model m = llm::load_synthetic("llama3.1-8b");
  const llm::ModelConfig& c = m.config;
  DeviceSizes slabs = fake_sizes();
  slabs.decode_slab = [](int ctx) { return 3.0 * kMiB + double(ctx); };
  const MemoryPlan one = MemoryPlanner(m, false, true, llm::KvDtype::BF16, fake_sizes()).plan(8192, 2048);
  const MemoryPlan many = MemoryPlanner(m, false, true, llm::KvDtype::BF16, slabs).plan(8192, 2048);
  const double set = 4.0 * (2.0 * c.dim + 3.0 * c.q_dim() + 2.0 * c.kv_dim() + 3.0 * c.hidden_dim + c.vocab_size) +
                     4.0 * (2.0 * llm::kGemvEpiloguePartials + 5) +
                     double(llm::quant_batch_x_bytes(1, c.hidden_dim));
  EXPECT_DOUBLE_EQ(many.activations - one.activations, llm::kTokenSlabs * (3.0 * kMiB + 8192) - set);
  EXPECT_EQ(llm::kTokenSlabs, 16);
  EXPECT_DOUBLE_EQ(many.kv, one.kv);
}

// A mapping whose layout is the row-major copy (warp, warp-r2, thread, cuBLAS: GemvMapping::rowmajor_align) reads
// that copy in place: no prepacked BF16 bytes, so 8B BF16 holds 15 GiB of weights, not 30, and 70B BF16 (131 GiB) fits
// a 139 GiB H200 with the context that fits beside it.
TEST(MemoryPlan, ARowMajorMappingReadsTheBf16CopyInPlace) {
  DeviceSizes sizes = fake_sizes();
  sizes.bf16_rowmajor_align = 8;
  const Model m = llm::load_synthetic("llama3.1-8b");
  const MemoryPlan p = MemoryPlanner(m, false, true, llm::KvDtype::BF16, sizes).plan(8192, 2048);
  EXPECT_DOUBLE_EQ(p.prepacked, 0.0);
  EXPECT_TRUE(p.prepacked_by_type.empty());
  EXPECT_NEAR(p.weights / kGiB, 14.96, 0.01);
  const std::string line = MemoryPlanner(m, false, true, llm::KvDtype::BF16, sizes).describe(p, "warp-r2", 8192, 1);
  EXPECT_NE(line.find("prepacked 'warp-r2' 0.00 GiB (none: it reads the BF16 copy in place)"), std::string::npos)
      << line;

  const Model big = llm::load_synthetic("llama3.1-70b");
  DeviceSizes real = sizes;  // the 70B KV cache as the engine sizes it: 80 layers x 2 x 8 heads x 128 x 2 bytes
  real.kv_bytes = [](int ctx) { return double(ctx) * 80.0 * 2 * 8 * 128 * 2; };
  real.attention_scratch = [](int ctx) { return double(ctx) * 64.0; };
  const MemoryPlanner planner(big, false, true, llm::KvDtype::BF16, real);
  const size_t h200_free = size_t(139.3 * kGiB);
  testing::internal::CaptureStderr();
  const int ctx = planner.choose_ctx(0, 131072, 2048, h200_free);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_GE(ctx, 8192) << err;
  EXPECT_LT(ctx, 131072) << err;
  EXPECT_NE(err.find("ctx_size capped to " + std::to_string(ctx)), std::string::npos) << err;
  EXPECT_NO_THROW(planner.require_fit(planner.plan(ctx, 2048), h200_free, "warp-r2", ctx, false));
}

TEST(MemoryPlan, QuantizedWeightsArePrepackedAtTheirStoredSizeByType) {
  Model m = llm::load_synthetic("tiny-gqa");
  llm::quantize_model(m, llm::parse_quantize_type("q4_k_m"), 1);
  double want_quant = 0, want_bf16 = 0;
  int quant_types = 0;
  std::map<std::string, double> by_type;
  for (const auto& lw : m.weights.layers)
    for (const llm::HostTensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) {
      ASSERT_NE(t->quant, 0u) << t->name;
      const auto q = llm::GgmlQuantType(t->quant);
      by_type[llm::ggml_quant_name(q)] += double(llm::ggml_quant_row_bytes(q, t->cols)) * double(t->rows);
    }
  const llm::HostTensor& head = m.weights.head;
  if (head.quant) {
    const auto q = llm::GgmlQuantType(head.quant);
    by_type[llm::ggml_quant_name(q)] += double(llm::ggml_quant_row_bytes(q, head.cols)) * double(head.rows);
  } else {
    by_type["BF16"] += 2.0 * double(head.numel());
  }
  for (const auto& kv : by_type) {
    if (kv.first == "BF16") {
      want_bf16 += kv.second;
    } else {
      want_quant += kv.second;
      ++quant_types;
    }
  }

  const MemoryPlanner kept(m, false, /*keep_quant=*/true, llm::KvDtype::BF16, fake_sizes());
  const MemoryPlan p = kept.plan(256, 256);
  EXPECT_DOUBLE_EQ(p.prepacked, want_quant + want_bf16);
  ASSERT_EQ(p.prepacked_by_type.size(), by_type.size());
  for (size_t i = 0; i < p.prepacked_by_type.size(); ++i) {
    EXPECT_DOUBLE_EQ(p.prepacked_by_type[i].second, by_type[p.prepacked_by_type[i].first]);
    if (i) {
      EXPECT_GE(p.prepacked_by_type[i - 1].second, p.prepacked_by_type[i].second) << "largest first";
    }
  }
  // Q4_K_M keeps at least two types (Q4_K or its fallback, and Q6_K or its fallback), all well under BF16's size.
  EXPECT_GE(quant_types, 2);
  EXPECT_LT(p.prepacked, 0.5 * 2.0 * (matrix_elements(m.config) + double(head.numel())));

  // No BF16 copy of what is kept quantized (issue 35): the head only when it is not quantized; the untied embedding
  // (the lookup table) in pinned host memory, outside the GPU's total; prefill's scratch holds the largest layer
  // matrix kept quantized (gate|up), once (never the head: prefill runs it as a GEMV).
  const llm::ModelConfig& c = m.config;
  const double embedding = 2.0 * double(m.weights.embedding.numel());
  EXPECT_TRUE(llm::embedding_on_host(m, false, false));
  EXPECT_DOUBLE_EQ(p.weights, head.quant ? 0.0 : 2.0 * double(head.numel()));
  EXPECT_DOUBLE_EQ(p.host_embedding, embedding);
  EXPECT_DOUBLE_EQ(p.prefill_dequant, 2.0 * 2.0 * double(c.hidden_dim) * double(c.dim));
  EXPECT_GE(p.scratch, p.prefill_dequant);
  const std::string line = kept.describe(p, "warp", 256, size_t(1) << 40);
  EXPECT_EQ(line.find("(stored "), std::string::npos) << line;  // counted at the stored size: nothing to add
  EXPECT_NE(line.find("(BF16 row-major copy of what is not kept quantized"), std::string::npos) << line;
  EXPECT_NE(line.find("(prefill's dequantized matrix " + llm::gib_str(p.prefill_dequant) + ")"), std::string::npos)
      << line;
  EXPECT_NE(line.find("the embedding's " + llm::gib_str(embedding) + " GiB in pinned host memory"), std::string::npos)
      << line;
  // Tied, the embedding is the head's matrix: on the GPU.
  EXPECT_FALSE(llm::embedding_on_host(m, true, false));
  const MemoryPlan t = MemoryPlanner(m, true, true, llm::KvDtype::BF16, fake_sizes()).plan(256, 256);
  EXPECT_DOUBLE_EQ(t.host_embedding, 0.0);
  EXPECT_DOUBLE_EQ(t.weights, embedding);

  // --dequantize: every decode matrix is prepacked as BF16, and the BF16 copy is whole again (no prefill scratch).
  const MemoryPlanner deq(m, false, /*keep_quant=*/false, llm::KvDtype::BF16, fake_sizes());
  const MemoryPlan d = deq.plan(256, 256);
  ASSERT_EQ(d.prepacked_by_type.size(), 1u);
  EXPECT_EQ(d.prepacked_by_type[0].first, "BF16");
  EXPECT_DOUBLE_EQ(d.prepacked, 2.0 * (matrix_elements(m.config) + double(head.numel())));
  EXPECT_DOUBLE_EQ(d.weights, embedding + 2.0 * (matrix_elements(c) + double(head.numel())));
  EXPECT_DOUBLE_EQ(d.prefill_dequant, 0.0);
  EXPECT_FALSE(llm::embedding_on_host(m, false, true));
  EXPECT_DOUBLE_EQ(d.host_embedding, 0.0);
}

// With the decode form's count of a quantized matrix (DeviceSizes::quant_matrix_bytes: the CUDA engine's
// quant_matrix_device_bytes: the planes as the form lays them out), the plan counts that per matrix and
// type instead of the stored size.
TEST(MemoryPlan, QuantizedMatricesCountedByTheFormsLayout) {
  Model m = llm::load_synthetic("tiny-gqa");
  llm::quantize_model(m, llm::parse_quantize_type("q4_k_m"), 1);
  DeviceSizes sizes = fake_sizes();
  int calls = 0;
  sizes.quant_matrix_bytes = [&calls](llm::GgmlQuantType t, int64_t n, int64_t k) {
    ++calls;
    return 1e5 * (3.0 + 0.01 * double(int(t))) * double(n * k);  // a count of its own per type, GiB-sized
  };
  const MemoryPlan p = MemoryPlanner(m, false, true, llm::KvDtype::BF16, sizes).plan(256, 256);
  std::map<std::string, double> want;
  int quantized = 0;
  std::vector<const llm::HostTensor*> mats;
  for (const auto& lw : m.weights.layers)
    for (const llm::HostTensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down}) mats.push_back(t);
  mats.push_back(&m.weights.head);
  for (const llm::HostTensor* t : mats) {
    if (!t->quant) {
      want["BF16"] += 2.0 * double(t->numel());
      continue;
    }
    ++quantized;
    const auto q = llm::GgmlQuantType(t->quant);
    want[llm::ggml_quant_name(q)] += 1e5 * (3.0 + 0.01 * double(int(q))) * double(t->rows * t->cols);
  }
  EXPECT_EQ(calls, quantized);
  // The line gives each quantized type's stored bytes beside the form's where they differ.
  const std::string line = MemoryPlanner(m, false, true, llm::KvDtype::BF16, sizes).describe(p, "warp", 256, size_t(1) << 40);
  for (const auto& [type, stored] : p.stored_by_type)
    EXPECT_NE(line.find(type + " " + llm::gib_str(want[type]) + " (stored " + llm::gib_str(stored) + ")"),
              std::string::npos)
        << line;
  ASSERT_EQ(p.prepacked_by_type.size(), want.size());
  for (const auto& [type, bytes] : p.prepacked_by_type) EXPECT_DOUBLE_EQ(bytes, want[type]) << type;
  EXPECT_GE(want.size(), 2u);  // the mix (with its fallbacks at these widths) keeps two quantized types or more
}

// Which matrices keep a BF16 copy: a group with any member not kept quantized keeps one (a fused q|k|v with a BF16 v
// is uploaded whole); --dequantize keeps every one.
TEST(MemoryPlan, ABf16CopyOnlyWhereSomeMemberIsNotKeptQuantized) {
  llm::HostTensor q4, bf;
  q4.quant = uint32_t(llm::GgmlQuantType::Q4_0);
  EXPECT_TRUE(llm::kept_quantized(q4, false));
  EXPECT_FALSE(llm::kept_quantized(q4, true));
  EXPECT_FALSE(llm::kept_quantized(bf, false));
  EXPECT_FALSE(llm::needs_bf16_copy({&q4, &q4, &q4}, false));
  EXPECT_TRUE(llm::needs_bf16_copy({&q4, &q4, &bf}, false));
  EXPECT_TRUE(llm::needs_bf16_copy({&q4}, true));
}

TEST(MemoryPlan, DefaultContextIsCappedToWhatFitsAndSaidOnStderr) {
  const Model m = llm::load_synthetic("tiny-gqa");
  const MemoryPlanner planner(m, false, true, llm::KvDtype::BF16, fake_sizes());
  const MemoryPlan at4k = planner.plan(4096, 256);
  // Room for everything at 4096 positions: the default stays.
  EXPECT_EQ(planner.choose_ctx(0, 4096, 256, size_t(at4k.total()) + 1), 4096);
  // 1000 MiB short: about 1000 positions fewer (1 MiB each; the attention scratch is bounded by the default's),
  // rounded down to a multiple of 256, and one line says so.
  testing::internal::CaptureStderr();
  const int ctx = planner.choose_ctx(0, 4096, 256, size_t(at4k.total() - 1000 * kMiB));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(ctx, 3072);
  EXPECT_NE(err.find("ctx_size capped to 3072 (the default 4096 needs 4.00 GiB of KV cache;"), std::string::npos)
      << err;
  // A context asked for is kept as asked (the fit check then refuses it with the numbers).
  EXPECT_EQ(planner.choose_ctx(9999, 4096, 256, 1), 9999);
  expect_error([&] { planner.choose_ctx(-1, 4096, 256, 1); }, {"ctx_size must be >= 0, found -1"});
}

TEST(MemoryPlan, ARefusalNamesTheModelTheBytesAndEachItem) {
  const Model m = llm::load_synthetic("llama3.1-70b");
  const MemoryPlanner planner(m, false, true, llm::KvDtype::BF16, fake_sizes());
  const MemoryPlan p = planner.plan(8192, 2048);
  const size_t h200_free = size_t(139.3 * kGiB);
  // 70B in BF16 with its prepacked copy: about 263 GiB; refused before anything is allocated.
  EXPECT_GT(p.total(), 2.0 * 131.0 * kGiB);
  expect_error([&] { planner.require_fit(p, h200_free, "warp-r2", 8192, true); },
               {"synthetic:llama3.1-70b needs " + llm::gib_str(p.total()) + " GiB of GPU memory, 139.30 GiB free",
                "weights " + llm::gib_str(p.weights) + " GiB (BF16 row-major copy)",
                "prepacked 'warp-r2' " + llm::gib_str(p.prepacked) + " GiB (BF16 " + llm::gib_str(p.prepacked) + ")",
                "KV cache 8.00 GiB (8192 positions, bf16)",
                "; without any KV cache it still needs " + llm::gib_str(p.total() - p.kv) + " GiB: no context fits"});
  // Where the weights fit and the asked context does not, the hint is a smaller context; unasked, no hint at all.
  const size_t roomy = size_t(p.total() - p.kv + 1.0 * kGiB);
  expect_error([&] { planner.require_fit(p, roomy, "warp-r2", 8192, true); }, {"; a smaller --ctx-size needs less"});
  try {
    planner.require_fit(p, roomy, "warp-r2", 8192, false);
    ADD_FAILURE() << "a plan over the free bytes was not refused";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("--ctx-size"), std::string::npos) << what;
    EXPECT_EQ(what.find("no context fits"), std::string::npos) << what;
  }
  // What fits is not refused, and the load line adds up.
  const Model small = llm::load_synthetic("tiny-gqa");
  const MemoryPlanner ok(small, false, true, llm::KvDtype::FP8, fake_sizes());
  const MemoryPlan q = ok.plan(256, 256);
  EXPECT_NO_THROW(ok.require_fit(q, h200_free, "warp", 256, false));
  const std::string line = ok.describe(q, "warp", 256, h200_free);
  EXPECT_EQ(line.rfind("memory plan: weights ", 0), 0u) << line;
  EXPECT_NE(line.find("(256 positions, fp8)"), std::string::npos) << line;
  EXPECT_NE(line.find(" = " + llm::gib_str(q.total()) + " GiB of 139.30 GiB free"), std::string::npos) << line;
}

}  // namespace
