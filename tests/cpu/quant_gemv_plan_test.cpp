// The CUDA-free half of the quantized GEMV (kernels/quant/gemv_quant_plan.h): per-type traits and leading dimensions agree
// with models/quant.h's pack_quant, bytes read agree with packed_bytes_read, plane sizes with the PackedQuant vectors,
// the launch plans cover every row and every K unit, layout checks refuse bad fields by name. Runs on any machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/gemv_choice.h"  // gemv_plan: a name's quantized form
#include <cmath>
#include <cstring>

#include "core/counter_rng.h"
#include "kernels/attention/split_rule.h"  // attention_decode_splits: the GEMV's merge applies attention's rule
#include "kernels/gemv/gemv_epilogue.h"    // GemvEpilogue::tokens, gemv_epilogue_at_token
#include "kernels/quant/gemv_quant_plan.h"
#include "kernels/quant/quant_dequant.h"
#include "models/quant.h"

namespace llm {
namespace {

using Q = GgmlQuantType;
const Q kTypes[] = {Q::Q4_0, Q::Q4_1, Q::Q5_0, Q::Q5_1, Q::Q8_0, Q::Q4_K, Q::Q5_K, Q::Q6_K};
const QuantGemvKind kKinds[] = {QuantGemvKind::Warp, QuantGemvKind::Thread, QuantGemvKind::AsStored,
                                QuantGemvKind::WarpDp4a};

TEST(QuantGemvPlan, TraitsAndStridesAgreeWithPackQuant) {
  for (Q t : kTypes) {
    for (int64_t k : {256, 768, 4096}) {
      const int64_t n = 3;
      SCOPED_TRACE(std::string(ggml_quant_name(t)) + " K=" + std::to_string(k));
      const std::vector<uint8_t> blocks(ggml_quant_row_bytes(t, k) * size_t(n), 0);
      const PackedQuant p = pack_quant(blocks.data(), t, n, k);
      const QuantGemvWeight w = quant_gemv_describe(int(t), n, k);
      const QuantTypeTraits tr = quant_type_traits(int(t));
      EXPECT_STREQ(tr.name, ggml_quant_name(t));
      EXPECT_EQ(tr.block_bytes, int(ggml_quant_block_bytes(t)));
      EXPECT_EQ(tr.block_weights, ggml_quant_block_weights(t));
      EXPECT_EQ(int(w.family), int(p.family));  // Int4 = 0, Int8 = 1 in both enums
      EXPECT_EQ(w.group, p.group);
      EXPECT_EQ(w.code_offset, p.code_offset);
      EXPECT_EQ(w.has_min, p.has_min);
      EXPECT_EQ(w.two_level, p.two_level);
      EXPECT_EQ(w.n_groups, p.n_groups);
      EXPECT_EQ(w.ld_codes, p.ld_codes);
      EXPECT_EQ(w.ld_groups, p.ld_groups);
      EXPECT_EQ(w.groups_per_super, p.groups_per_super);
      EXPECT_EQ(w.ld_sub, p.ld_sub);
      EXPECT_EQ(w.ld_super, p.ld_super);
      EXPECT_EQ(w.ld_heads, p.ld_heads);
      EXPECT_EQ(w.ld_hi, p.ld_hi);
      EXPECT_EQ(quant_gemv_hi_bits(w), p.hi_bits);
      EXPECT_EQ(w.row_bytes, int64_t(ggml_quant_row_bytes(t, k)));
      EXPECT_NO_THROW(quant_gemv_check_layout(w));

      const QuantGemvPlaneBytes b = quant_gemv_plane_bytes(w);
      EXPECT_EQ(b.codes, p.codes.size());
      EXPECT_EQ(b.code_hi, p.code_hi.size());
      EXPECT_EQ(b.scales, p.scales.size() * 2);
      EXPECT_EQ(b.mins, p.mins.size() * 2);
      EXPECT_EQ(b.sub_scales, p.sub_scales.size());
      EXPECT_EQ(b.super_d, p.super_d.size() * 2);
      EXPECT_EQ(b.k_heads, p.k_heads.size());
      EXPECT_EQ(b.blocks, blocks.size());
      EXPECT_EQ(int64_t(b.codes + b.code_hi + b.scales + b.mins + b.sub_scales + b.super_d + b.k_heads),
                packed_bytes_allocated(p));

      EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, w), packed_bytes_read(p));
      EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Thread, w), packed_bytes_read(p));
      EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::WarpDp4a, w), packed_bytes_read(p));
      EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::AsStored, w), int64_t(blocks.size()));
    }
  }
}

TEST(QuantGemvPlan, BytesPerWeightOfTheLlama8bShape) {
  // 4096 x 4096: Q4_0 prepacked reads 4.5 bits per weight, as stored 4.5 too (18 bytes per 32); Q4_K 4.5 both ways
  // (codes + the 16-byte heads as stored); Q6_K 6.5625 both ways (nibbles + 2 high bits + sub-scales + d).
  const QuantGemvWeight q40 = quant_gemv_describe(quant_type_id::kQ4_0, 4096, 4096);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, q40), 4096ll * 4096 * 9 / 16);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::AsStored, q40), 4096ll * 4096 * 9 / 16);
  const QuantGemvWeight q4k = quant_gemv_describe(quant_type_id::kQ4_K, 4096, 4096);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, q4k), 4096ll * (2048 + 16 * 16));
  const QuantGemvWeight q6k = quant_gemv_describe(quant_type_id::kQ6_K, 4096, 4096);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, q6k), 4096ll * (2048 + 1024 + 256 + 16 * 2));
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, q6k), quant_gemv_bytes_read(QuantGemvKind::AsStored, q6k));
  const QuantGemvWeight q5k = quant_gemv_describe(quant_type_id::kQ5_K, 4096, 4096);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::Warp, q5k), quant_gemv_bytes_read(QuantGemvKind::AsStored, q5k));
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::AsStored, q6k), 4096ll * 16 * 210);
  EXPECT_EQ(quant_gemv_bytes_read(QuantGemvKind::AsStored, q4k), 4096ll * 16 * 144);
}

TEST(QuantGemvPlan, PlansCoverEveryRowAndUnit) {
  for (Q t : kTypes) {
    const bool kq = t == Q::Q4_K || t == Q::Q5_K || t == Q::Q6_K;
    for (int64_t k : {32, 96, 576, 4096, 14336}) {
      if (kq && k % 256 != 0) continue;
      for (int64_t n : {1, 7, 1000, 4096, 14336, 128256}) {
        const QuantGemvWeight w = quant_gemv_describe(int(t), n, k);
        for (QuantGemvKind kind : kKinds) {
          SCOPED_TRACE(std::string(ggml_quant_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) + " " +
                       quant_gemv_kind_name(kind));
          const QuantGemvPlan p = quant_gemv_plan(kind, w, 132);
          ASSERT_GT(p.grid, 0);
          EXPECT_EQ(p.block, kQuantGemvThreads);
          if (kind == QuantGemvKind::Thread) {
            EXPECT_GE(int64_t(p.grid) * kQuantGemvThreads, n);
            EXPECT_LT(int64_t(p.grid - 1) * kQuantGemvThreads, n);
            EXPECT_EQ(p.units, quant_gemv_chunks(w));
            continue;
          }
          const bool warp = kind == QuantGemvKind::Warp || kind == QuantGemvKind::WarpDp4a;
          const int64_t units = warp ? quant_gemv_chunks(w) : k / w.block_weights;
          EXPECT_EQ(p.units, units);
          EXPECT_TRUE(p.splits == 1 || p.splits == 2 || p.splits == 4 || p.splits == 8) << p.splits;
          EXPECT_GE(int64_t(p.slice_units) * p.splits, units);      // the slices cover K
          EXPECT_LT(int64_t(p.slice_units) * (p.splits - 1), units);  // and none is empty
          if (p.splits > 1) {  // a split slice still has a unit per lane
            EXPECT_GE(units / p.splits, 32);
          }
          const int64_t rows = warp ? kQuantWarpRows : 1;
          EXPECT_EQ(p.rows_per_warp, rows);
          EXPECT_EQ(p.row_groups, (n + rows - 1) / rows);
          const int64_t groups_per_block = kQuantWarpsPerBlock / p.splits;
          EXPECT_GE(int64_t(p.grid) * groups_per_block, p.lanes);  // every warp lane has its warps
          EXPECT_LT(int64_t(p.grid - 1) * groups_per_block, p.lanes);  // and no block is idle
          EXPECT_GE(p.lanes, 1);
          EXPECT_LE(p.lanes, p.row_groups);  // every lane owns at least one row group
          if (!warp || p.splits > 1) EXPECT_EQ(p.lanes, p.row_groups);  // one group per lane
          if (warp) EXPECT_LE(p.lanes * p.splits, int64_t(132) * kQuantWarpMinBlocks * kQuantWarpsPerBlock);  // one wave
        }
      }
    }
  }
  // Small N splits K: more warps for 1 row than a single warp.
  const QuantGemvWeight one = quant_gemv_describe(quant_type_id::kQ4_0, 1, 14336);
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::Warp, one, 132).splits, 8);
  const QuantGemvWeight big = quant_gemv_describe(quant_type_id::kQ4_0, 14336, 4096);
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::Warp, big, 132).splits, 1);
  // 3,584 row groups of 4 rows on 2,112 resident warps: one wave of lanes, each walking 1 or 2 groups.
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::Warp, big, 132).lanes, 132 * kQuantWarpMinBlocks * kQuantWarpsPerBlock);
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::Warp, big, 132, 3).lanes, 132 * 3 * kQuantWarpsPerBlock);
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::Warp, big, 132).loads_in_flight * 16, 128);  // 8 x 16 B per lane
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::AsStored, big, 132).bytes_per_load, 2);     // 18-byte blocks
  const QuantGemvWeight q41 = quant_gemv_describe(quant_type_id::kQ4_1, 14336, 4096);
  EXPECT_EQ(quant_gemv_plan(QuantGemvKind::AsStored, q41, 132).bytes_per_load, 4);     // 20-byte blocks
}

// Where decode's input forms apply (GemvEpilogue::glu, ::merge: kernels/gemv/gemv_epilogue.h): the "warp" form while
// it stages x in shared memory (two blocks' worth per SM, k up to 29,056), no other form; and the split count a GEMV
// that merges attention's splits computes from the step's position is the split pass's (attention_split_rows).
TEST(QuantGemvPlan, InputFormsWhereXIsStagedAndTheSplitRuleTheyRead) {
  using llm::QuantGemvKind;
  EXPECT_TRUE(llm::quant_stages_x_forms(QuantGemvKind::Warp, 576));
  EXPECT_TRUE(llm::quant_stages_x_forms(QuantGemvKind::Warp, 14336));
  EXPECT_TRUE(llm::quant_stages_x_forms(QuantGemvKind::Warp, 29056));
  EXPECT_FALSE(llm::quant_stages_x_forms(QuantGemvKind::Warp, 29056 + 32));
  for (QuantGemvKind k : {QuantGemvKind::WarpDp4a, QuantGemvKind::Thread, QuantGemvKind::AsStored})
    EXPECT_FALSE(llm::quant_stages_x_forms(k, 576));
  // Splits of a decode at position pos: ceil(len / rows) with len = min(pos + 1, max_ctx).
  const int sms = 132;
  EXPECT_EQ(llm::attention_decode_splits(0, 8192, 3, sms), 1);
  EXPECT_EQ(llm::attention_decode_splits(63, 8192, 3, sms), 1);
  EXPECT_EQ(llm::attention_decode_splits(64, 8192, 3, sms), 2);
  EXPECT_EQ(llm::attention_decode_splits(299, 8192, 3, sms), 5);
  EXPECT_EQ(llm::attention_decode_splits(9000, 8192, 3, sms), llm::attention_decode_splits(8191, 8192, 3, sms));
  for (int kv : {1, 3, 8})
    for (int pos : {0, 100, 1000, 5000, 60000, 131071}) {
      const int len = pos + 1, rows = llm::attention_split_rows(kv, len, sms);
      EXPECT_EQ(llm::attention_decode_splits(pos, 1 << 20, kv, sms), (len + rows - 1) / rows) << kv << " " << pos;
      EXPECT_LE(int64_t(kv) * llm::attention_decode_splits(pos, 1 << 20, kv, sms),
                std::max<int64_t>(int64_t(llm::kAttnSplitsPerSm) * sms, kv))
          << "at most two split blocks per SM (or one split)";
    }
}

// The token axis (kernels/ops/token_axis.h, GemvEpilogue::tokens): token t of a launch sees every per-token pointer
// t * stride bytes on, an absent (null) buffer stays absent, and the weights (norm_w) stay where they are; only the
// warp forms have it.
TEST(QuantGemvPlan, TokenAxisMovesEveryPerTokenPointerAndNoWeight) {
  alignas(16) static float buf[4096];
  const int64_t stride = 1024;  // bytes
  EXPECT_EQ(llm::token_ptr(buf, stride, 0), buf);
  EXPECT_EQ(llm::token_ptr(buf, stride, 3), buf + 3 * 256);
  const float* cbuf = buf;
  EXPECT_EQ(llm::token_ptr(cbuf, stride, 2), buf + 512);
  EXPECT_EQ(llm::token_ptr(static_cast<float*>(nullptr), stride, 5), nullptr);
  const void* vbuf = buf;
  EXPECT_EQ(llm::token_ptr(vbuf, stride, 1), static_cast<const void*>(buf + 256));

  llm::GemvEpilogue ep;
  ep.tokens = llm::TokenAxis{4, stride};
  EXPECT_TRUE(ep.tokens.many());
  EXPECT_FALSE(llm::TokenAxis{}.many());
  ep.scale = buf + 1;
  ep.scale_sums = buf + 2;
  ep.scale_count = reinterpret_cast<const unsigned*>(buf + 3);
  ep.norm_w = buf + 4;
  ep.xg = buf + 5;
  ep.inv = buf + 6;
  ep.partials = buf + 7;
  ep.arrivals = reinterpret_cast<unsigned*>(buf + 8);
  ep.count = reinterpret_cast<unsigned*>(buf + 9);
  ep.x_q8 = buf + 12;
  ep.glu = buf + 16;
  ep.merge.part_o = buf + 20;
  ep.merge.part_ml = buf + 24;
  ep.merge.d_pos = reinterpret_cast<const int*>(buf + 28);
  const llm::GemvEpilogue e = llm::gemv_epilogue_at_token(ep, 2);
  const float* on = buf + 512;  // two tokens of 256 floats
  EXPECT_EQ(e.scale, on + 1);
  EXPECT_EQ(e.scale_sums, on + 2);
  EXPECT_EQ(static_cast<const void*>(e.scale_count), static_cast<const void*>(on + 3));
  EXPECT_EQ(e.norm_w, buf + 4) << "a weight is shared by every token";
  EXPECT_EQ(e.xg, on + 5);
  EXPECT_EQ(e.inv, on + 6);
  EXPECT_EQ(e.partials, on + 7);
  EXPECT_EQ(static_cast<const void*>(e.arrivals), static_cast<const void*>(on + 8));
  EXPECT_EQ(static_cast<const void*>(e.count), static_cast<const void*>(on + 9));
  EXPECT_EQ(e.x_q8, static_cast<const void*>(on + 12));
  EXPECT_EQ(e.glu, on + 16);
  EXPECT_EQ(e.merge.part_o, on + 20);
  EXPECT_EQ(e.merge.part_ml, on + 24);
  EXPECT_EQ(static_cast<const void*>(e.merge.d_pos), static_cast<const void*>(on + 28));
  EXPECT_EQ(e.tokens.n, 4);
  const llm::GemvEpilogue none = llm::gemv_epilogue_at_token(llm::GemvEpilogue{}, 3);
  EXPECT_EQ(none.scale, nullptr);
  EXPECT_EQ(none.xg, nullptr);
  EXPECT_FALSE(none.merge.any());
  EXPECT_EQ(llm::gemv_epilogue_at_token(ep, 0).xg, ep.xg);

  using llm::QuantGemvKind;
  EXPECT_TRUE(llm::quant_kind_token_axis(QuantGemvKind::Warp));
  EXPECT_TRUE(llm::quant_kind_token_axis(QuantGemvKind::WarpDp4a));
  EXPECT_FALSE(llm::quant_kind_token_axis(QuantGemvKind::Thread));
  EXPECT_FALSE(llm::quant_kind_token_axis(QuantGemvKind::AsStored));
}

TEST(QuantGemvPlan, LayoutChecksRefuseByName) {
  auto message = [](const QuantGemvWeight& w) -> std::string {
    try {
      quant_gemv_check_layout(w, "blk.0.attn_q.weight");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  QuantGemvWeight w = quant_gemv_describe(quant_type_id::kQ4_0, 8, 64);
  w.ld_codes = 40;
  EXPECT_NE(message(w).find("ld_codes"), std::string::npos) << message(w);
  EXPECT_NE(message(w).find("blk.0.attn_q.weight"), std::string::npos) << message(w);
  EXPECT_NE(message(w).find("Q4_0"), std::string::npos) << message(w);
  w = quant_gemv_describe(quant_type_id::kQ6_K, 8, 256);
  w.group = 32;
  EXPECT_NE(message(w).find("group"), std::string::npos) << message(w);
  w = quant_gemv_describe(quant_type_id::kQ6_K, 8, 256);
  w.ld_super = 1;
  EXPECT_NE(message(w).find("ld_super"), std::string::npos) << message(w);
  w = quant_gemv_describe(quant_type_id::kQ4_K, 8, 512);
  w.ld_heads = 16;  // two heads per row need 32 bytes
  EXPECT_NE(message(w).find("ld_heads"), std::string::npos) << message(w);
  EXPECT_THROW(quant_gemv_describe(quant_type_id::kQ4_K, 8, 96), Error);  // K-quants need multiples of 256
  EXPECT_THROW(quant_gemv_describe(quant_type_id::kQ8_0, 8, 48), Error);
  EXPECT_THROW(quant_type_traits(0), Error);
  // A name's quantized form comes from its plan: "cublas" has none, each form's name resolves to that form.
  EXPECT_FALSE(gemv_plan("cublas").has_quant);
  for (QuantGemvKind k : kKinds) {
    const GemvPlan p = gemv_plan(quant_gemv_kind_name(k));
    EXPECT_TRUE(p.has_quant) << quant_gemv_kind_name(k);
    EXPECT_EQ(p.quant, k) << quant_gemv_kind_name(k);
  }
}

// One description of the prepacked planes (core/quant_planes.h): PackedQuant::planes() views its vectors with the
// pitches quant_gemv_describe gives, and a QuantGemvWeight takes that view whole (no field-by-field copy).
TEST(QuantGemvPlan, OneDescriptionOfThePlanes) {
  for (Q t : kTypes) {
    SCOPED_TRACE(ggml_quant_name(t));
    const int64_t n = 5, k = 512;
    const std::vector<uint8_t> blocks(ggml_quant_row_bytes(t, k) * size_t(n), 0);
    const PackedQuant p = pack_quant(blocks.data(), t, n, k);
    QuantGemvWeight w = quant_gemv_describe(int(t), n, k);
    const QuantPlanes view = p.planes();
    EXPECT_EQ(view.ld_codes, w.ld_codes);
    EXPECT_EQ(view.ld_groups, w.ld_groups);
    EXPECT_EQ(view.ld_sub, w.ld_sub);
    EXPECT_EQ(view.ld_super, w.ld_super);
    EXPECT_EQ(view.ld_heads, w.ld_heads);
    EXPECT_EQ(view.ld_hi, w.ld_hi);
    EXPECT_EQ(view.codes, p.codes.data());
    EXPECT_EQ(view.code_hi, p.code_hi.empty() ? nullptr : p.code_hi.data());
    EXPECT_EQ(view.scales, p.scales.empty() ? nullptr : p.scales.data());
    EXPECT_EQ(view.k_heads, p.k_heads.empty() ? nullptr : p.k_heads.data());
    w.planes() = view;
    EXPECT_NO_THROW(quant_gemv_check_layout(w));
    const QuantGemvPlaneBytes b = quant_gemv_plane_bytes(w);
    EXPECT_EQ(b.codes, p.codes.size());
    EXPECT_EQ(b.scales, p.scales.size() * 2);
    EXPECT_EQ(b.sub_scales, p.sub_scales.size());
    EXPECT_EQ(b.k_heads, p.k_heads.size());
    w.clear_pointers();
    EXPECT_EQ(w.codes, nullptr);
    EXPECT_EQ(w.ld_codes, view.ld_codes);  // the pitches stay
  }
}

// Prefill's dequantization (kernels/quant/quant_dequant.h, the device kernel's arithmetic run on the host) equals
// packed_weight bit for bit, every weight of every type: real quantizer output where models/quant.h has one (Q4_1, Q5_1:
// random blocks, fp16 fields included), awkward row counts, K of one and of several super-blocks.
TEST(QuantDequant, PlaneWeightsEqualPackedWeightBitForBit) {
  for (Q t : kTypes) {
    for (int64_t k : {256, 768}) {
      const int64_t n = 7;
      SCOPED_TRACE(std::string(ggml_quant_name(t)) + " K=" + std::to_string(k));
      std::vector<uint8_t> blocks;
      if (t == Q::Q4_1 || t == Q::Q5_1) {
        blocks.resize(ggml_quant_row_bytes(t, k) * size_t(n));
        for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(rng_mix(uint64_t(int(t)) * 1000003u + i) & 0xFF);
      } else {
        std::vector<float> x(size_t(n * k));
        for (size_t i = 0; i < x.size(); ++i) x[i] = rng_value(uint64_t(int(t)), 4, i, 0.0f, 2.0f);
        blocks = quantize_matrix(t, x.data(), n, k);
      }
      const PackedQuant p = pack_quant(blocks.data(), t, n, k);
      QuantGemvWeight w = quant_gemv_describe(int(t), n, k);
      w.planes() = p.planes();
      int64_t mismatches = 0, finite = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j0 = 0; j0 < k; j0 += 8) {
          float got[8];
          quant_plane_weights8(w, r, j0, got);
          for (int e = 0; e < 8; ++e) {
            const float want = packed_weight(p, r, j0 + e);
            uint32_t a, b;
            std::memcpy(&a, &got[e], 4);
            std::memcpy(&b, &want, 4);
            mismatches += a != b;
            finite += std::isfinite(want) && want != 0.0f;
          }
        }
      }
      // The device kernel's form: one 16-byte chunk of codes at a time (quant_plane_chunk).
      const int per = quant_chunk_weights(w);
      int64_t chunk_mismatches = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k / per; ++c) {
          uint32_t words[4];
          quant_plane_chunk_words(w, r, c, words);
          float got[32];
          if (per == 32)
            quant_plane_chunk<true>(w, r, c, words, got);
          else
            quant_plane_chunk<false>(w, r, c, words, got);
          for (int e = 0; e < per; ++e) {
            const float want = packed_weight(p, r, c * per + e);
            chunk_mismatches += std::memcmp(&got[e], &want, 4) != 0;
          }
        }
      }
      EXPECT_EQ(mismatches, 0);
      EXPECT_EQ(chunk_mismatches, 0);
      EXPECT_GT(finite, n * k / 2) << "the check must see real weights, not zeros or NaNs";
    }
  }
}

}  // namespace
}  // namespace llm

namespace llm {
namespace {

// pack_quant packs a large matrix on several threads (rows split among them): every plane byte equals what packing
// each row alone (one thread) gives. Random blocks (the planes only move bytes; their values do not matter here).
TEST(QuantPack, ThreadedPackingEqualsRowByRow) {
  for (Q t : {Q::Q4_0, Q::Q5_1, Q::Q8_0, Q::Q4_K, Q::Q5_K, Q::Q6_K}) {
    SCOPED_TRACE(ggml_quant_name(t));
    const int64_t n = 1031, k = 4096;  // n * k over the threaded threshold (2^22 weights); n odd
    const size_t row_bytes = ggml_quant_row_bytes(t, k);
    std::vector<uint8_t> blocks(row_bytes * size_t(n));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(rng_mix(uint64_t(int(t)) * 7919u + i) & 0xFF);
    const PackedQuant all = pack_quant(blocks.data(), t, n, k);
    int64_t bad_rows = 0;
    for (int64_t r = 0; r < n; ++r) {
      const PackedQuant one = pack_quant(blocks.data() + size_t(r) * row_bytes, t, 1, k);
      auto same = [&](const auto& whole, const auto& row, int64_t ld) {
        return ld == 0 || std::equal(row.begin(), row.begin() + ld, whole.begin() + r * ld);
      };
      const bool ok = same(all.codes, one.codes, all.ld_codes) &&
                      (all.code_hi.empty() || same(all.code_hi, one.code_hi, all.ld_hi)) &&
                      (all.scales.empty() || same(all.scales, one.scales, all.ld_groups)) &&
                      (all.mins.empty() || same(all.mins, one.mins, all.ld_groups)) &&
                      (all.sub_scales.empty() || same(all.sub_scales, one.sub_scales, all.ld_sub)) &&
                      (all.super_d.empty() || same(all.super_d, one.super_d, all.ld_super)) &&
                      (all.k_heads.empty() || same(all.k_heads, one.k_heads, all.ld_heads));
      bad_rows += !ok;
    }
    EXPECT_EQ(bad_rows, 0);
  }
}

}  // namespace
}  // namespace llm
