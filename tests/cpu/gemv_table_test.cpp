// The GEMV mapping table of core/gemv_table.h (built without CUDA) and the plan a name resolves into
// (engine/gemv_choice.h): every row is well formed, every name round-trips through the plan, the one check every path
// uses (--gemv, --ab, /gemv) says the same texts as before, the sector model describes every row, and, in a CUDA build,
// each row's BF16 form is the registry's kernel of that form (no GPU needed: the registry is a list of host structs).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "analysis/quant_sector_model.h"
#include "analysis/sector_model.h"
#include "core/error.h"
#include "core/gemv_table.h"
#include "engine/gemv_choice.h"
#include "measure/ab_run.h"
#include "models_test_util.h"

#if LLM_HAVE_CUDA
#include "kernels/gemv/gemv.h"
#include "kernels/quant/gemv_quant.h"
#endif

namespace llm {
namespace {

// The rows' one-line whys, worded as the reference copies (core/gemv_names.h before the table): what --help prints.
TEST(GemvTable, RowsAreWellFormedAndTheDefaultsFirst) {
  ASSERT_EQ(kGemvRows, 9);
  EXPECT_STREQ(kGemvDefaultMapping, "warp-r2");
  EXPECT_STREQ(kQuantGemvDefault, "warp");
  std::set<std::string> seen;
  int bf16 = 0, quant = 0;
  for (const GemvRow& r : kGemvTable) {
    SCOPED_TRACE(r.name);
    EXPECT_TRUE(seen.insert(r.name).second) << "listed twice";
    EXPECT_TRUE(r.has_bf16() || r.has_quant()) << "a row runs something";
    EXPECT_EQ(r.has_bf16(), r.why != nullptr);
    EXPECT_EQ(r.has_quant(), r.quant_why != nullptr);
    EXPECT_EQ(r.has_bf16(), r.access != GemvAccess::None);
    if (r.why) {
      EXPECT_GT(std::string(r.why).size(), 10u);
    }
    if (r.quant_why) {
      EXPECT_GT(std::string(r.quant_why).size(), 10u);
    }
    // A persistent stage of each kind only where that kind of form exists, and of that kind.
    EXPECT_TRUE(r.bf16_persistent == PersistentGemv::None || r.bf16_persistent == PersistentGemv::OneRow ||
                r.bf16_persistent == PersistentGemv::TwoRows);
    EXPECT_TRUE(r.quant_persistent == PersistentGemv::None || r.quant_persistent == PersistentGemv::QuantFma ||
                r.quant_persistent == PersistentGemv::QuantDp4a);
    if (!r.has_bf16()) {
      EXPECT_EQ(r.bf16_persistent, PersistentGemv::None);
    }
    if (!r.has_quant()) {
      EXPECT_EQ(r.quant_persistent, PersistentGemv::None);
    }
    if (r.has_quant()) {
      EXPECT_EQ(r.quant_types, kGgmlQuantTypesAll) << "every form runs the seven types";
    }
    bf16 += r.has_bf16();
    quant += r.has_quant();
  }
  EXPECT_EQ(bf16, kGemvBf16Forms);
  EXPECT_EQ(quant, kQuantGemvKinds);
  // Each form belongs to exactly one row, and the row of a form is found back.
  for (int f = 0; f < kGemvBf16Forms; ++f) ASSERT_NE(gemv_row(GemvBf16Form(f)), nullptr) << f;
  for (int k = 0; k < kQuantGemvKinds; ++k) ASSERT_NE(gemv_row(QuantGemvKind(k)), nullptr) << k;
  EXPECT_STREQ(gemv_row(GemvBf16Form::Warp)->why,
               "lanes along K of the row-major weight, 16-byte loads, shuffle reduction: the coalesced one");
  EXPECT_STREQ(quant_gemv_kind_why(QuantGemvKind::WarpDp4a),
               "warp's loads with x quantized to int8 per 32 in each block's shared memory, dp4a dot products");
  for (const char* n : {"warp-r2", "warp", "thread", "colmajor", "cublas", "thread-splitk", "warp-few"})
    EXPECT_TRUE(gemv_row(n) && gemv_row(n)->has_bf16()) << n;
  for (const char* n : {"warp", "thread", "as-stored", "warp-dp4a"})
    EXPECT_TRUE(gemv_row(n) && gemv_row(n)->has_quant()) << n;
}

// The inputs a quantized form takes besides weights and x: x's int8 form only on warp-dp4a (the form that quantizes x to
// int8 per 32 itself), the fold's block sums only on the warp forms (a row's quantized form is what the engine asks
// about).
TEST(GemvTable, QuantFormInputsFollowTheForms) {
  int x_q8 = 0, sums = 0;
  for (const GemvRow& r : kGemvTable) {
    if (!r.has_quant()) continue;
    const bool dp4a = std::string(r.name) == "warp-dp4a";
    EXPECT_EQ(quant_kind_reads_x_q8(r.quant), dp4a) << r.name;
    x_q8 += quant_kind_reads_x_q8(r.quant);
    sums += quant_kind_reads_norm_sums(r.quant);
  }
  EXPECT_EQ(x_q8, 1);
  EXPECT_EQ(sums, 2);  // warp, warp-dp4a
  EXPECT_FALSE(quant_kind_reads_norm_sums(QuantGemvKind::Thread));
  EXPECT_FALSE(quant_kind_reads_norm_sums(QuantGemvKind::AsStored));
}

TEST(GemvTable, NamesListsAndLinesComeFromTheRows) {
  EXPECT_FALSE(gemv_mapping_known(""));
  EXPECT_FALSE(gemv_mapping_known("Warp"));
  EXPECT_EQ(gemv_mapping_names(), "warp-r2 (default), warp, thread, colmajor, cublas, thread-splitk, warp-few; for "
                                  "quantized weights: warp (default), thread, as-stored, warp-dp4a");
  EXPECT_EQ(gemv_mapping_list(), "warp-r2,warp,thread,colmajor,cublas,thread-splitk,warp-few");
  EXPECT_EQ(gemv_mapping_list(true), "warp,thread,as-stored,warp-dp4a");
  const std::string lines = gemv_mapping_lines("  ");
  EXPECT_EQ(lines.rfind("  warp-r2 (default)  ", 0), 0u) << lines;
  for (const GemvRow& r : kGemvTable) {
    if (r.why) {
      EXPECT_NE(lines.find(r.why), std::string::npos) << r.name;
    }
    if (r.quant_why) {
      EXPECT_NE(lines.find(r.quant_why), std::string::npos) << r.name;
    }
  }
  EXPECT_STREQ(gemv_mapping_what(""), gemv_row("warp-r2")->why);
  EXPECT_STREQ(gemv_mapping_what("as-stored"), "");
}

TEST(GemvTable, TheOneCheck) {
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "", true));
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "thread", false));
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "warp-r2", true));  // the default is what the CPU path means anyway
  llm_test::expect_error([] { check_gemv_mapping("--gemv", "nope", false); },
                         {"--gemv: unknown GEMV mapping 'nope' (known: " + gemv_mapping_names() + ")"});
  llm_test::expect_error([] { check_gemv_mapping("--gemv", "nope", true); }, {"unknown GEMV mapping 'nope'"});
  llm_test::expect_error([] { check_gemv_mapping("/gemv", "warp", true); },
                         {"/gemv warp: GEMV mappings apply to --device cuda"});
}

// Every name round-trips: its plan has its row's forms, the persistent stages, and the name for messages; "" takes
// each kind's default; an unknown name says today's text.
TEST(GemvTable, EveryNameRoundTripsThroughThePlan) {
  for (const GemvRow& r : kGemvTable) {
    SCOPED_TRACE(r.name);
    const GemvPlan p = gemv_plan(r.name);
    EXPECT_EQ(p.name, r.name);
    EXPECT_EQ(p.row, &r);
    EXPECT_EQ(p.bf16, r.bf16);
    EXPECT_EQ(p.has_quant, r.has_quant());
    if (r.has_quant()) {
      EXPECT_EQ(p.quant, r.quant);
    }
    EXPECT_EQ(p.bf16_persistent, r.bf16_persistent);
    EXPECT_EQ(p.quant_persistent, r.quant_persistent);
    if (r.has_bf16()) {
      EXPECT_STREQ(gemv_form_name(p.bf16), r.name);
    }
    if (r.has_quant()) {
      EXPECT_STREQ(quant_gemv_kind_name(p.quant), r.name);
    }
  }
  const GemvPlan def = gemv_plan("");
  EXPECT_FALSE(def.named());
  EXPECT_EQ(def.bf16, GemvBf16Form::WarpR2);
  EXPECT_TRUE(def.has_quant);
  EXPECT_EQ(def.quant, QuantGemvKind::Warp);
  EXPECT_EQ(def.bf16_persistent, PersistentGemv::TwoRows);
  EXPECT_EQ(def.quant_persistent, PersistentGemv::QuantFma);
  EXPECT_EQ(persistent_pair_rows(PersistentGemv::TwoRows), 1);
  EXPECT_EQ(persistent_pair_rows(PersistentGemv::OneRow), 0);
  EXPECT_EQ(persistent_pair_rows(PersistentGemv::QuantDp4a), -1);
  // What the persistent path reads off a plan: pair_rows from the BF16 stage, dp4a from the quantized one.
  EXPECT_EQ(persistent_pair_rows(gemv_plan("warp-r2").bf16_persistent), 1);
  EXPECT_EQ(persistent_pair_rows(gemv_plan("warp").bf16_persistent), 0);
  EXPECT_EQ(persistent_pair_rows(gemv_plan("warp-few").bf16_persistent), 0);
  for (const char* n : {"thread", "colmajor", "cublas", "thread-splitk", "as-stored", "warp-dp4a"})
    EXPECT_EQ(persistent_pair_rows(gemv_plan(n).bf16_persistent), -1) << n;
  EXPECT_EQ(gemv_plan("warp-dp4a").quant_persistent, PersistentGemv::QuantDp4a);
  EXPECT_EQ(gemv_plan("warp").quant_persistent, PersistentGemv::QuantFma);
  EXPECT_EQ(gemv_plan("thread").quant_persistent, PersistentGemv::None);
  llm_test::expect_error([] { gemv_plan("nope"); },
                         {"unknown GEMV mapping 'nope' (known: " + gemv_mapping_names() + ")"});
  EXPECT_FALSE(gemv_plan("cublas").has_quant);  // a BF16-only name's plan has no quantized form
}

TEST(GemvTable, AbListsAreChecked) {
  EXPECT_EQ(parse_ab_mappings("warp-r2, thread"), (std::vector<std::string>{"warp-r2", "thread"}));
  llm_test::expect_error([] { parse_ab_mappings("warp,nope"); }, {"--ab: unknown GEMV mapping 'nope'", "warp-r2"});
}

// The sector models describe every row: the BF16 form by its access pattern, the quantized form by its kind.
TEST(GemvTable, TheSectorModelsKnowEveryRow) {
  for (const GemvRow& r : kGemvTable) {
    SCOPED_TRACE(r.name);
    if (r.has_bf16()) {
      EXPECT_NO_THROW(find_sector_mapping(r.bf16));
    }
    if (r.has_quant()) {
      EXPECT_NO_THROW(predict_quant(r.quant, 64, 256, 2));
    }
  }
}

#if LLM_HAVE_CUDA
// The CUDA registry holds one kernel per BF16 form, in form order, each naming its row; a name's plan finds its kernel
// (gemv_mapping(plan.bf16)), and a plan without a BF16 form has none.
TEST(GemvTable, TheCudaRegistryIsIndexedByForm) {
  const auto& reg = gemv_mappings();
  ASSERT_EQ(int(reg.size()), kGemvBf16Forms);
  for (int i = 0; i < kGemvBf16Forms; ++i) {
    const GemvMapping& m = gemv_mapping(GemvBf16Form(i));
    EXPECT_EQ(&m, reg[size_t(i)]);
    EXPECT_EQ(m.form, GemvBf16Form(i));
    EXPECT_STREQ(m.name, gemv_row(GemvBf16Form(i))->name);
    EXPECT_STREQ(m.why(), gemv_row(GemvBf16Form(i))->why);
  }
  for (const GemvRow& r : kGemvTable)
    if (r.has_bf16()) {
      EXPECT_STREQ(gemv_mapping(gemv_plan(r.name).bf16).name, r.name) << r.name;
    }
  EXPECT_EQ(&gemv_mapping(gemv_plan("").bf16), &gemv_mapping(GemvBf16Form::WarpR2));
  EXPECT_STREQ(gemv_mapping(gemv_plan("").bf16).name, kGemvDefaultMapping);
  EXPECT_STREQ(gemv_default_name(), kGemvDefaultMapping);
  EXPECT_EQ(gemv_plan("as-stored").bf16, GemvBf16Form::None);
  llm_test::expect_error([] { gemv_mapping(GemvBf16Form::None); }, {"GEMV registry: no BF16 form -1"});
}

// Each row's quantized form has a launch plan for every type its row says it runs (the shape needs no device).
TEST(GemvTable, EveryQuantizedFormPlansEveryTypeOfItsRow) {
  for (const GemvRow& r : kGemvTable)
    for (uint32_t t = 0; t < 32; ++t) {
      if (!r.runs_quant_type(t)) continue;
      SCOPED_TRACE(std::string(r.name) + " type " + std::to_string(t));
      const GemvLaunchShape s = quant_gemv_shape(r.quant, quant_gemv_describe(int(t), 64, 512));
      EXPECT_GT(s.grid, 0);
      EXPECT_GT(s.bytes_in_flight_per_thread, 0);
    }
}
#endif

// The RMSNorm fold (kernels/gemv/gemv_epilogue.h) runs in every BF16 form of ours; cuBLAS's library kernels have no
// epilogue, so a plan with cuBLAS keeps the norm kernels (engine/cuda/gemv_mappings.cu reads this column).
TEST(GemvTable, EveryFormOfOursFoldsTheNormAndCublasDoesNot) {
  for (const GemvRow& r : kGemvTable) {
    SCOPED_TRACE(r.name);
    if (!r.has_bf16()) continue;
    EXPECT_EQ(r.bf16_fuses_norm, r.bf16 != GemvBf16Form::Cublas);
  }
}

}  // namespace
}  // namespace llm
