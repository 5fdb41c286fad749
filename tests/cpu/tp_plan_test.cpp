// The tensor-parallel sharding plan (engine/tp_plan.h): the splits, uneven vocabularies, refusals by name, the shards
// of float, RoPE-permuted, synthetic and quantized tensors, and the host collectives (all-reduce, argmax combine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/tp_plan.h"
#include "models/quant.h"
#include "models/quantize_model.h"
#include "tp_test_util.h"

namespace {

using llm::TpPlan;
using llm::TpRange;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const llm::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpPlan, SplitsAreContiguousNearEqualAndCoverEverything) {
  for (int64_t n : {1, 7, 172, 1001, 49152})
    for (int parts = 1; parts <= 5; ++parts) {
      if (n < parts) continue;
      int64_t next = 0, lo = n, hi = 0;
      for (int i = 0; i < parts; ++i) {
        const TpRange r = llm::tp_split(n, parts, i);
        EXPECT_EQ(r.begin, next) << n << " over " << parts;
        next = r.end;
        lo = std::min(lo, r.size()), hi = std::max(hi, r.size());
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1) << n << " over " << parts;
    }
  // 1001 over 4: the uneven shards, larger last.
  EXPECT_EQ(llm::tp_split(1001, 4, 0).size(), 250);
  EXPECT_EQ(llm::tp_split(1001, 4, 3).size(), 251);
  EXPECT_EQ(llm::tp_split(1001, 2, 1).begin, 500);
}

TEST(TpPlan, HeadsStayWholeAndEachRankHoldsCompleteGqaGroups) {
  const llm::Model m = llm_test::tiny_gqa_odd_vocab();
  const llm::ModelConfig& c = m.config;
  for (int n : {1, 2, 4}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const TpPlan p = llm::plan_tp(c, n, m.source);
    ASSERT_EQ(p.n_ranks, n);
    ASSERT_EQ(int(p.ranks.size()), n);
    const int group = c.n_heads / c.n_kv_heads;
    int64_t vocab = 0;
    for (int r = 0; r < n; ++r) {
      const llm::TpRank& k = p.ranks[size_t(r)];
      EXPECT_EQ(k.kv_heads.size(), c.n_kv_heads / n);
      EXPECT_EQ(k.q_heads.size(), c.n_heads / n);
      // Its query heads are exactly the groups of its KV heads.
      EXPECT_EQ(k.q_heads.begin, k.kv_heads.begin * group);
      EXPECT_EQ(k.q_heads.end, k.kv_heads.end * group);
      EXPECT_EQ(p.q_rows(r).begin, k.q_heads.begin * c.head_dim);
      EXPECT_EQ(p.kv_rows(r).size(), k.kv_heads.size() * c.head_dim);
      EXPECT_EQ(k.ffn.size(), c.hidden_dim / n);
      EXPECT_EQ(k.vocab.begin, vocab);
      vocab = k.vocab.end;
    }
    EXPECT_EQ(vocab, 1001);
  }
  // N = 2: vocabulary 500 + 501, FFN 64 + 64, q rows 32 + 32.
  const TpPlan p = llm::plan_tp(c, 2, m.source);
  EXPECT_EQ(p.ranks[0].vocab.size(), 500);
  EXPECT_EQ(p.ranks[1].vocab.size(), 501);
  EXPECT_EQ(p.ranks[1].ffn.begin, 64);
  EXPECT_EQ(p.q_rows(1).begin, 32);
  EXPECT_EQ(p.kv_rows(1).begin, 16);
}

TEST(TpPlan, SmolLM2ShapeSplitsOverThreeAndIsRefusedOverTwoByName) {
  const llm::Model m = llm::load_synthetic("smollm2-135m");  // 9 heads / 3 KV heads, FFN 1536
  EXPECT_EQ(llm::tp_shape_refusal(m.config, 3, m.source), "");
  EXPECT_EQ(llm::tp_shape_refusal(m.config, 1, m.source), "");
  const std::string why = llm::tp_shape_refusal(m.config, 2, m.source);
  EXPECT_EQ(why,
            "--tp 2: synthetic:smollm2-135m cannot be split over 2 ranks: n_heads = 9 is not divisible by 2; "
            "n_kv_heads = 3 is not divisible by 2 (each rank holds whole KV heads and the query heads of their "
            "groups)");
  EXPECT_EQ(error_of([&] { llm::plan_tp(m.config, 2, m.source); }), why);
  EXPECT_EQ(llm::tp_refusal(m, 2), why);
  // One line, whatever fails.
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

TEST(TpPlan, EveryShapeThatDoesNotDivideIsNamedWithItsValueAndN) {
  const llm::Model m = llm_test::tiny_tp_model(8, 4, 8, 100, 3, false);  // FFN 100, vocabulary 3
  EXPECT_EQ(llm::tp_shape_refusal(m.config, 4, m.source),
            "--tp 4: " + m.source + " cannot be split over 4 ranks: vocab_size = 3 is smaller than 4 (each rank "
            "holds at least one row of the head)");
  const std::string three = llm::tp_shape_refusal(m.config, 3, m.source);
  for (const char* want : {"n_heads = 8 is not divisible by 3", "n_kv_heads = 4 is not divisible by 3",
                           "hidden_dim = 100 is not divisible by 3"})
    EXPECT_NE(three.find(want), std::string::npos) << three;
  EXPECT_EQ(three.find("vocab_size"), std::string::npos) << three;
  const std::string eight = llm::tp_shape_refusal(m.config, 8, m.source);
  EXPECT_EQ(eight.find("n_heads"), std::string::npos) << eight;  // 8 query heads split over 8; their KV heads do not
  for (const char* want : {"n_kv_heads = 4 is not divisible by 8", "hidden_dim = 100 is not divisible by 8",
                           "vocab_size = 3 is smaller than 8"})
    EXPECT_NE(eight.find(want), std::string::npos) << eight;
  EXPECT_EQ(llm::tp_shape_refusal(m.config, 0, m.source), "--tp 0: the number of ranks must be at least 1");
  EXPECT_EQ(llm::tp_shape_refusal(m.config, 2, m.source), "");
}

// Quantized weights split on block boundaries: o's split at column q_dim/N and down's at hidden/N must be multiples of
// the type's block, else the tensor is refused by name.
TEST(TpPlan, AQuantizedSplitThatCutsABlockIsRefusedByTensorName) {
  llm::Model m = llm_test::tiny_gqa_odd_vocab();  // q_dim 64, FFN 128
  llm::quantize_model(m, llm::parse_quantize_type("q8_0"));
  ASSERT_EQ(m.weights.layers[0].wo.quant, uint32_t(llm::GgmlQuantType::Q8_0));
  EXPECT_EQ(llm::tp_refusal(m, 2), "");  // o cut at 32, down at 64: whole blocks of 32
  const std::string why = llm::tp_refusal(m, 4);  // o cut at 16: inside a block
  EXPECT_EQ(why, "--tp 4: " + m.weights.layers[0].wo.name +
                     " (Q8_0, blocks of 32 weights) cannot be split at column 16 of 64: the split would cut a quant "
                     "block (o and down are split by input columns)");
  // The FFN: 4 heads of 16 (o cut at 32 is whole) but FFN 96 over 2 cuts down's block at column 48.
  llm::Model f = llm_test::tiny_tp_model(4, 2, 16, 96, 256, true);
  llm::quantize_model(f, llm::parse_quantize_type("q8_0"));
  const std::string down = llm::tp_refusal(f, 2);
  const std::string want = " (Q8_0, blocks of 32 weights) cannot be split at column 48 of 96";
  EXPECT_NE(down.find(f.weights.layers[0].w_down.name + want), std::string::npos)
      << down;
  // The same shapes in floats split anywhere.
  EXPECT_EQ(llm::tp_refusal(llm_test::tiny_tp_model(4, 2, 16, 96, 256, true), 2), "");
}

// K-quants' blocks are 256 weights: q_dim 512 splits over 2 (column 256) but not over 4 (column 128).
TEST(TpPlan, KQuantBlocksOf256AreNeverCut) {
  llm::Model m = llm_test::tiny_tp_model(8, 4, 64, 512, 300, false);  // q_dim 512, FFN 512
  llm::quantize_model(m, llm::parse_quantize_type("q4_k"));
  ASSERT_EQ(m.weights.layers[0].wo.quant, uint32_t(llm::GgmlQuantType::Q4_K));
  ASSERT_EQ(m.weights.layers[0].w_down.quant, uint32_t(llm::GgmlQuantType::Q4_K));
  EXPECT_EQ(llm::tp_refusal(m, 2), "");
  EXPECT_EQ(llm::tp_refusal(m, 4), "--tp 4: " + m.weights.layers[0].wo.name +
                                       " (Q4_K, blocks of 256 weights) cannot be split at column 128 of 512: the split "
                                       "would cut a quant block (o and down are split by input columns)");
}

// A float tensor with its own bytes, [rows, cols], element (r, c) = r * 1000 + c (file order).
llm::HostTensor f32_tensor(int64_t rows, int64_t cols, int rope_head_dim = 0) {
  auto buf = std::make_shared<std::vector<float>>(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (*buf)[size_t(r * cols + c)] = float(r * 1000 + c);
  llm::HostTensor t;
  t.name = "test.weight";
  t.dtype = llm::DType::F32;
  t.rows = rows;
  t.cols = cols;
  t.data = buf->data();
  t.owner = buf;
  t.rope_head_dim = rope_head_dim;
  return t;
}

void expect_block(const llm::HostTensor& full, const llm::HostTensor& shard, int64_t r0, int64_t c0) {
  const std::vector<float> a = full.to_f32(), b = shard.to_f32();
  for (int64_t r = 0; r < shard.rows; ++r)
    for (int64_t c = 0; c < shard.cols; ++c)
      ASSERT_EQ(b[size_t(r * shard.cols + c)], a[size_t((r0 + r) * full.cols + c0 + c)]) << r << "," << c;
}

TEST(TpShards, FloatRowsAndColumnsAreTheSubMatrixInEngineOrder) {
  const llm::HostTensor t = f32_tensor(24, 40);
  const llm::HostTensor rows = llm::shard_rows(t, 8, 8);
  EXPECT_EQ(rows.rows, 8);
  EXPECT_EQ(rows.cols, 40);
  expect_block(t, rows, 8, 0);
  const llm::HostTensor cols = llm::shard_cols(t, 10, 20);
  EXPECT_EQ(cols.rows, 24);
  EXPECT_EQ(cols.cols, 20);
  expect_block(t, cols, 0, 10);
  EXPECT_NE(error_of([&] { llm::shard_cols(t, 30, 20); }).find("out of 40"), std::string::npos);
}

TEST(TpShards, RopePermutedRowsSplitOnWholeHeadsOnly) {
  const llm::HostTensor t = f32_tensor(24, 6, /*rope_head_dim=*/8);  // 3 heads of 8 rotate-half rows
  const llm::HostTensor h1 = llm::shard_rows(t, 8, 16);               // heads 1 and 2
  expect_block(t, h1, 8, 0);                                          // the engine rows, permutation included
  EXPECT_EQ(h1.to_f32()[0], 8000.0f);   // engine row 8 = file row 8 (first of head 1)
  EXPECT_EQ(h1.to_f32()[6], 12000.0f);  // engine row 9 = file row 8 + 4 (rotate-half pair)
  EXPECT_NE(error_of([&] { llm::shard_rows(t, 4, 8); }).find("split a head of 8 rows"), std::string::npos);
}

TEST(TpShards, SyntheticFillsAreMaterializedExactly) {
  const llm::Model m = llm_test::tiny_gqa_odd_vocab();
  const llm::HostTensor& q = m.weights.layers[1].wq;  // synthetic, rotate-half rows
  ASSERT_TRUE(q.synthetic);
  expect_block(q, llm::shard_rows(q, 16, 32), 16, 0);
  const llm::HostTensor& down = m.weights.layers[0].w_down;
  expect_block(down, llm::shard_cols(down, 32, 64), 0, 32);
}

TEST(TpShards, QuantizedShardsAreWholeBlocksAndDequantizeToTheSameWeights) {
  llm::Model m = llm_test::tiny_gqa_odd_vocab();
  llm::quantize_model(m, llm::parse_quantize_type("q8_0"));
  const llm::HostTensor& down = m.weights.layers[0].w_down;  // [64, 128] Q8_0
  ASSERT_TRUE(down.quant);
  const llm::HostTensor cols = llm::shard_cols(down, 64, 64);
  EXPECT_EQ(cols.quant, down.quant);
  EXPECT_EQ(cols.nbytes(), down.nbytes() / 2);
  expect_block(down, cols, 0, 64);
  expect_block(down, llm::shard_rows(down, 32, 32), 32, 0);
  const std::string why = error_of([&] { llm::shard_cols(down, 16, 32); });
  EXPECT_NE(why.find(down.name + " (Q8_0, blocks of 32 weights): columns [16, 48) would cut a quant block"),
            std::string::npos)
      << why;
}

TEST(TpShards, EachRankHoldsItsShardsAndTheReplicatedTensors) {
  const llm::Model m = llm_test::tiny_gqa_odd_vocab(/*tied=*/true);
  const TpPlan p = llm::plan_tp(m.config, 4, m.source);
  for (int r = 0; r < 4; ++r) {
    const llm::ModelWeights w = llm::shard_weights(m, p, r);
    EXPECT_EQ(w.embedding.rows, 1001);  // replicated
    EXPECT_EQ(w.final_norm.cols, 64);
    EXPECT_EQ(w.head.rows, p.ranks[size_t(r)].vocab.size());  // tied: its rows of the embedding
    expect_block(m.weights.embedding, w.head, p.ranks[size_t(r)].vocab.begin, 0);
    const llm::LayerWeights& l = w.layers[1];
    EXPECT_EQ(l.wq.rows, 16);  // 2 heads of 8
    EXPECT_EQ(l.wk.rows, 8);   // 1 KV head
    EXPECT_EQ(l.wo.cols, 16);
    EXPECT_EQ(l.wo.rows, 64);
    EXPECT_EQ(l.w_up.rows, 32);
    EXPECT_EQ(l.w_down.cols, 32);
    EXPECT_EQ(l.attn_norm.cols, 64);
  }
}

// A rank's config is its shard's shape, valid on its own, with the whole model's width, depth and RoPE.
TEST(TpShards, EachRankConfigIsItsShardsShapeAndValidates) {
  const llm::Model m = llm_test::tiny_gqa_odd_vocab(/*tied=*/true);
  const TpPlan p = llm::plan_tp(m.config, 4, m.source);
  int64_t vocab = 0;
  for (int r = 0; r < 4; ++r) {
    const llm::ModelConfig c = llm::tp_rank_config(m.config, p, r);
    const llm::ModelWeights w = llm::shard_weights(m, p, r);
    EXPECT_EQ(c.n_heads * c.head_dim, w.layers[0].wq.rows);
    EXPECT_EQ(c.n_kv_heads * c.head_dim, w.layers[0].wk.rows);
    EXPECT_EQ(c.hidden_dim, w.layers[0].w_gate.rows);
    EXPECT_EQ(c.vocab_size, w.head.rows);
    EXPECT_FALSE(c.tied_embeddings);  // its head rows are a tensor of their own
    EXPECT_EQ(c.dim, m.config.dim);
    EXPECT_EQ(c.n_layers, m.config.n_layers);
    EXPECT_EQ(c.head_dim, m.config.head_dim);
    EXPECT_EQ(c.rope_theta, m.config.rope_theta);
    EXPECT_EQ(c.n_heads / c.n_kv_heads, m.config.n_heads / m.config.n_kv_heads);  // whole GQA groups
    EXPECT_NO_THROW(c.validate("rank"));  // no BOS or EOS past its head rows
    vocab += c.vocab_size;
  }
  EXPECT_EQ(vocab, m.config.vocab_size);  // 1001 over 4: uneven, every row once
}

TEST(TpCollectives, AllReduceGivesEveryRankTheSameSumInRankOrder) {
  std::vector<std::vector<float>> parts = {{1e8f, 1.0f, 2.5f}, {1.0f, -3.0f, 0.25f}, {-1e8f, 4.0f, 0.0f}};
  std::vector<float*> bufs;
  for (auto& p : parts) bufs.push_back(p.data());
  llm::host_all_reduce_sum(bufs.data(), 3, 3);
  // (1e8 + 1) rounds to 1e8 in FP32, then - 1e8: 0, the rank-order sum (a fixed order, so every run gives these bits).
  const std::vector<float> want = {(1e8f + 1.0f) + -1e8f, 2.0f, 2.75f};
  for (const auto& p : parts) EXPECT_EQ(p, want);
}

// The combined greedy pick equals engine/sampler.h's argmax over the whole (gathered) vocabulary, lowest id on ties,
// for uneven shards, limits (sample_vocab) that cut into or past a rank, and ties across rank boundaries.
TEST(TpCollectives, ArgmaxCombineEqualsTheUnshardedArgmaxIncludingTies) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 1 + int(rng() % 40), n = 1 + int(rng() % 5);
    if (vocab < n) continue;
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& v : logits) v = float(int(rng() % 4)) - 2.0f;  // few values: many ties
    const int limit = 1 + int(rng() % unsigned(vocab));
    std::vector<llm::RankPick> picks;
    for (int r = 0; r < n; ++r) {
      const TpRange s = llm::tp_split(vocab, n, r);
      picks.push_back(llm::rank_argmax(logits.data() + s.begin, s.size(), s.begin, limit));
    }
    ASSERT_EQ(llm::combine_argmax(picks), llm::argmax(logits.data(), limit))
        << "vocab " << vocab << " ranks " << n << " limit " << limit;
  }
  // A rank past the limit has no candidate; no candidate at all gives -1.
  const float x[2] = {5.0f, 9.0f};
  EXPECT_EQ(llm::rank_argmax(x, 2, 10, 10).id, -1);
  EXPECT_EQ(llm::rank_argmax(x, 2, 10, 11).id, 10);
  EXPECT_EQ(llm::combine_argmax({llm::rank_argmax(x, 2, 10, 10)}), -1);
  // The tie across the boundary goes to the lower rank.
  EXPECT_EQ(llm::combine_argmax({{3, 9.0f}, {10, 9.0f}}), 3);
}

}  // namespace
