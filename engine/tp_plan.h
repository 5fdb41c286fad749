// Tensor parallelism: how a model's weights split over N ranks (--tp N), as pure functions of the config and the
// stored tensors, and the host form of the collectives the ranks need. The CPU reference runs the plan as N
// simulated ranks (engine/cpu_tp_backend.cpp), which checks the sharding without GPUs.
//
// The split (Megatron-style, one all-reduce after o and one after down per layer):
//   * q, k, v: by output rows, attention heads whole: rank r holds KV heads [r*Hkv/N, (r+1)*Hkv/N) and the query
//     heads of exactly those GQA groups, so its attention needs nothing from the other ranks;
//   * o: by input columns (the q rows of its heads): each rank's o product is a partial sum over its heads;
//   * gate, up: by output rows (hidden/N FFN rows each); down: by those input columns, again a partial sum;
//   * the head: by vocabulary rows, rank r holds [r*V/N, (r+1)*V/N) (uneven when N does not divide V); greedy picks
//     are combined from each rank's (value, index), other sampling from the gathered logits;
//   * RMSNorm weights and the embedding: replicated on every rank.
// Quantized (GGUF) tensors split on block boundaries only: row splits never cut a block (rows are whole), column
// splits must fall on a multiple of the type's block of weights, or the tensor is refused by name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace llm {

struct TpRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// One rank's share, in the counts of the model (heads, FFN rows, vocabulary rows).
struct TpRank {
  TpRange q_heads, kv_heads, ffn, vocab;
};

struct TpPlan {
  int n_ranks = 1;
  int head_dim = 0;
  std::vector<TpRank> ranks;
  // The rows of q (and the columns of o), and of k and v, that rank r holds.
  TpRange q_rows(int r) const;
  TpRange kv_rows(int r) const;
};

// [i*n/parts, (i+1)*n/parts): the i-th of `parts` near-equal pieces of n (sizes differ by at most one).
TpRange tp_split(int64_t n, int parts, int i);

// Why a model of config `c` (named `source` in the message) cannot be split over n ranks, or "" when it can: one
// line naming every model value that does not divide, e.g. "--tp 2: models-cache/x.gguf cannot be split over 2
// ranks: n_heads = 9 is not divisible by 2; n_kv_heads = 3 is not divisible by 2 (each rank holds whole KV heads and
// their query heads)". n < 1 is refused too.
std::string tp_shape_refusal(const ModelConfig& c, int n, const std::string& source);
// The plan for n ranks; throws llm::Error(tp_shape_refusal) when the shape cannot be split.
TpPlan plan_tp(const ModelConfig& c, int n, const std::string& source);

// Why the stored weights cannot be split as `plan` says, or "": the first quantized tensor whose column split (o,
// down) cuts a block, named with its type, block and the column, e.g. "--tp 4: blk.0.attn_output.weight (Q8_0,
// blocks of 32 weights) cannot be split at column 16 of 64: the split would cut a quant block".
std::string tp_weight_refusal(const ModelWeights& w, const TpPlan& plan);
// Both refusals in turn for `model` over n ranks ("" when it splits).
std::string tp_refusal(const Model& model, int n);

// Rank r's model as an engine of its own sees it (the CUDA ranks, engine/cuda/tp_rank.h): its query and KV heads, its
// FFN rows, its head rows as the vocabulary, untied (its head rows are a tensor of their own: shard_weights); the
// rest (dim, layers, norms, RoPE) the whole model's; no BOS or EOS (the token ids are the driver's, and a rank embeds
// every id of the whole vocabulary).
ModelConfig tp_rank_config(const ModelConfig& c, const TpPlan& plan, int r);

// Engine rows [r0, r0 + n) of t as a tensor of their own: a view of the stored bytes (rows of a RoPE-permuted q/k
// tensor must start and end on a head), or for a synthetic fill the values materialized as BF16 (exact).
HostTensor shard_rows(const HostTensor& t, int64_t r0, int64_t n);
// Columns [c0, c0 + n) of every row of t, copied in their stored form (quantized: whole blocks; c0 and n must be
// multiples of the block, else llm::Error naming the tensor); synthetic fills materialized as BF16.
HostTensor shard_cols(const HostTensor& t, int64_t c0, int64_t n);
// The tensors rank r holds, in ModelWeights' roles: embedding and norms replicated, the head its vocabulary rows
// (also for a tied model: rows of the embedding), every projection its shard.
ModelWeights shard_weights(const Model& model, const TpPlan& plan, int r);

// ---------------------------------------------------------------------------------------------------------------------
// The collectives in host form (what NCCL or a peer-to-peer kernel does between GPUs).

// Sums bufs[0..n_ranks)[0..n) element-wise, in rank order, and writes the sum back to every rank's buffer: every rank
// ends with the same bits.
void host_all_reduce_sum(float* const* bufs, int n_ranks, size_t n);

// One rank's greedy candidate: the largest of its logits among the ids it may return, the lowest id on ties.
struct RankPick {
  int64_t id = -1;  // global id; -1: the rank has no candidate (its rows are all past the sampled vocabulary)
  float value = 0.0f;
};
// logits [0, rows) of a rank whose first row is global id `first`; candidates are the ids below `limit`.
RankPick rank_argmax(const float* logits, int64_t rows, int64_t first, int64_t limit);
// The global greedy pick from the ranks' candidates, given in vocabulary order: the largest value, the lowest id on
// ties (exactly engine/sampler.h's argmax over the whole vocabulary); -1 when no rank has a candidate.
int64_t combine_argmax(const std::vector<RankPick>& picks);

}  // namespace llm
