// Tensor parallelism: the sharding plan, the shards, and the host collectives (engine/tp_plan.h).
#include "engine/tp_plan.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "models/quant.h"

namespace llm {

TpRange TpPlan::q_rows(int r) const {
  const TpRange h = ranks[size_t(r)].q_heads;
  return {h.begin * head_dim, h.end * head_dim};
}

TpRange TpPlan::kv_rows(int r) const {
  const TpRange h = ranks[size_t(r)].kv_heads;
  return {h.begin * head_dim, h.end * head_dim};
}

TpRange tp_split(int64_t n, int parts, int i) { return {n * i / parts, n * (i + 1) / parts}; }

std::string tp_shape_refusal(const ModelConfig& c, int n, const std::string& source) {
  const std::string head = "--tp " + std::to_string(n) + ": " + source + " cannot be split over " +
                           std::to_string(n) + (n == 1 ? " rank: " : " ranks: ");
  if (n < 1) return "--tp " + std::to_string(n) + ": the number of ranks must be at least 1";
  std::vector<std::string> why;
  const auto divides = [&](const char* name, int v, const char* note) {
    if (v % n != 0)
      why.push_back(std::string(name) + " = " + std::to_string(v) + " is not divisible by " + std::to_string(n) + note);
  };
  divides("n_heads", c.n_heads, "");
  divides("n_kv_heads", c.n_kv_heads, " (each rank holds whole KV heads and the query heads of their groups)");
  divides("hidden_dim", c.hidden_dim, " (each rank holds an equal share of the FFN rows)");
  if (c.vocab_size < n)
    why.push_back("vocab_size = " + std::to_string(c.vocab_size) + " is smaller than " + std::to_string(n) +
                  " (each rank holds at least one row of the head)");
  if (why.empty()) return "";
  std::string s = head;
  for (size_t i = 0; i < why.size(); ++i) s += (i ? "; " : "") + why[i];
  return s;
}

TpPlan plan_tp(const ModelConfig& c, int n, const std::string& source) {
  if (const std::string why = tp_shape_refusal(c, n, source); !why.empty()) fail(why);
  TpPlan p;
  p.n_ranks = n;
  p.head_dim = c.head_dim;
  for (int r = 0; r < n; ++r)
    p.ranks.push_back({tp_split(c.n_heads, n, r), tp_split(c.n_kv_heads, n, r), tp_split(c.hidden_dim, n, r),
                       tp_split(c.vocab_size, n, r)});
  return p;
}

ModelConfig tp_rank_config(const ModelConfig& c, const TpPlan& plan, int r) {
  const TpRank& k = plan.ranks.at(size_t(r));
  ModelConfig s = c;
  s.n_heads = int(k.q_heads.size());
  s.n_kv_heads = int(k.kv_heads.size());
  s.hidden_dim = int(k.ffn.size());
  s.vocab_size = int(k.vocab.size());
  s.tied_embeddings = false;
  s.bos_id = -1;  // the token ids are the driver's: a rank's config counts only its head rows
  s.eos_ids.clear();
  return s;
}

namespace {

// The first boundary of `cuts` (columns where one rank's share ends and the next begins) that falls inside a quant
// block of t, as a refusal; "" when t is not quantized or every cut is on a block boundary.
std::string cuts_block(const HostTensor& t, const std::vector<int64_t>& cuts, int n) {
  if (!t.quant) return "";
  const GgmlQuantType type = GgmlQuantType(t.quant);
  const int64_t block = ggml_quant_block_weights(type);
  for (int64_t c : cuts)
    if (c % block != 0) {
      std::ostringstream s;
      s << "--tp " << n << ": " << t.name << " (" << ggml_quant_name(type) << ", blocks of " << block
        << " weights) cannot be split at column " << c << " of " << t.cols
        << ": the split would cut a quant block (o and down are split by input columns)";
      return s.str();
    }
  return "";
}

// Owned bytes for a shard, and the tensor that points at them.
HostTensor with_bytes(const HostTensor& like, int64_t rows, int64_t cols, std::shared_ptr<std::vector<uint8_t>> buf) {
  HostTensor s;
  s.name = like.name;
  s.dtype = like.dtype;
  s.quant = like.quant;
  s.rows = rows;
  s.cols = cols;
  s.data = buf->data();
  s.owner = std::move(buf);
  return s;
}

// Engine rows [r0, r0 + n), columns [c0, c0 + nc) of a synthetic fill as BF16 (the fill's values are BF16 already).
HostTensor materialize(const HostTensor& t, int64_t r0, int64_t n, int64_t c0, int64_t nc) {
  auto buf = std::make_shared<std::vector<uint8_t>>(size_t(n * nc) * 2);
  std::vector<float> row(size_t(t.cols));
  for (int64_t i = 0; i < n; ++i) {
    t.read_rows_f32(r0 + i, 1, row.data());
    for (int64_t j = 0; j < nc; ++j) {
      const uint16_t b = f32_to_bf16(row[size_t(c0 + j)]);
      std::memcpy(buf->data() + size_t(i * nc + j) * 2, &b, 2);
    }
  }
  HostTensor s = with_bytes(t, n, nc, std::move(buf));
  s.dtype = DType::BF16;
  s.quant = 0;
  return s;
}

}  // namespace

std::string tp_weight_refusal(const ModelWeights& w, const TpPlan& plan) {
  std::vector<int64_t> o_cuts, down_cuts;
  for (int r = 1; r < plan.n_ranks; ++r) {
    o_cuts.push_back(plan.q_rows(r).begin);
    down_cuts.push_back(plan.ranks[size_t(r)].ffn.begin);
  }
  for (const LayerWeights& l : w.layers) {
    if (std::string why = cuts_block(l.wo, o_cuts, plan.n_ranks); !why.empty()) return why;
    if (std::string why = cuts_block(l.w_down, down_cuts, plan.n_ranks); !why.empty()) return why;
  }
  return "";
}

std::string tp_refusal(const Model& model, int n) {
  if (std::string why = tp_shape_refusal(model.config, n, model.source); !why.empty()) return why;
  return tp_weight_refusal(model.weights, plan_tp(model.config, n, model.source));
}

HostTensor shard_rows(const HostTensor& t, int64_t r0, int64_t n) {
  if (r0 < 0 || n < 0 || r0 + n > t.rows) fail(t.name, ": shard rows [", r0, ", ", r0 + n, ") out of ", t.rows);
  if (t.synthetic) return materialize(t, r0, n, 0, t.cols);
  if (t.rope_head_dim && (r0 % t.rope_head_dim != 0 || n % t.rope_head_dim != 0))
    fail(t.name, ": shard rows [", r0, ", ", r0 + n, ") split a head of ", t.rope_head_dim, " rows");
  // Whole heads: engine rows [r0, r0 + n) are file rows [r0, r0 + n) (the RoPE permutation stays inside a head).
  HostTensor s = t;
  s.rows = n;
  s.data = static_cast<const uint8_t*>(t.data) + size_t(r0) * t.row_bytes();
  return s;
}

HostTensor shard_cols(const HostTensor& t, int64_t c0, int64_t n) {
  if (c0 < 0 || n < 0 || c0 + n > t.cols) fail(t.name, ": shard columns [", c0, ", ", c0 + n, ") out of ", t.cols);
  if (t.synthetic) return materialize(t, 0, t.rows, c0, n);
  size_t from = 0, bytes = 0;  // of each stored row
  if (t.quant) {
    const GgmlQuantType type = GgmlQuantType(t.quant);
    const int64_t block = ggml_quant_block_weights(type);
    for (int64_t c : {c0, n})
      if (c % block != 0)
        fail("--tp: ", t.name, " (", ggml_quant_name(type), ", blocks of ", block, " weights): columns [", c0, ", ",
             c0 + n, ") would cut a quant block");
    from = size_t(c0 / block) * ggml_quant_block_bytes(type);
    bytes = size_t(n / block) * ggml_quant_block_bytes(type);
  } else {
    from = size_t(c0) * dtype_size(t.dtype);
    bytes = size_t(n) * dtype_size(t.dtype);
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(bytes * size_t(t.rows));
  const size_t pitch = t.row_bytes();
  for (int64_t r = 0; r < t.rows; ++r)  // file rows, in file order: the row permutation (if any) is kept as it was
    std::memcpy(buf->data() + size_t(r) * bytes, static_cast<const uint8_t*>(t.data) + size_t(r) * pitch + from, bytes);
  HostTensor s = with_bytes(t, t.rows, n, std::move(buf));
  s.rope_head_dim = t.rope_head_dim;
  return s;
}

ModelWeights shard_weights(const Model& model, const TpPlan& plan, int r) {
  const ModelWeights& w = model.weights;
  const TpRank& k = plan.ranks[size_t(r)];
  const TpRange q = plan.q_rows(r), kv = plan.kv_rows(r);
  ModelWeights s;
  s.embedding = w.embedding;    // replicated
  s.final_norm = w.final_norm;  // replicated
  s.head = shard_rows(model.config.tied_embeddings ? w.embedding : w.head, k.vocab.begin, k.vocab.size());
  for (const LayerWeights& l : w.layers) {
    LayerWeights d;
    d.attn_norm = l.attn_norm;
    d.ffn_norm = l.ffn_norm;
    d.wq = shard_rows(l.wq, q.begin, q.size());
    d.wk = shard_rows(l.wk, kv.begin, kv.size());
    d.wv = shard_rows(l.wv, kv.begin, kv.size());
    d.wo = shard_cols(l.wo, q.begin, q.size());
    d.w_gate = shard_rows(l.w_gate, k.ffn.begin, k.ffn.size());
    d.w_up = shard_rows(l.w_up, k.ffn.begin, k.ffn.size());
    d.w_down = shard_cols(l.w_down, k.ffn.begin, k.ffn.size());
    s.layers.push_back(std::move(d));
  }
  return s;
}

void host_all_reduce_sum(float* const* bufs, int n_ranks, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float s = bufs[0][i];
    for (int r = 1; r < n_ranks; ++r) s += bufs[r][i];
    for (int r = 0; r < n_ranks; ++r) bufs[r][i] = s;
  }
}

RankPick rank_argmax(const float* logits, int64_t rows, int64_t first, int64_t limit) {
  RankPick p;
  const int64_t n = std::min(rows, limit - first);  // candidates: global ids first .. min(first + rows, limit) - 1
  for (int64_t i = 0; i < n; ++i)
    if (p.id < 0 || logits[i] > p.value) p = {first + i, logits[i]};
  return p;
}

int64_t combine_argmax(const std::vector<RankPick>& picks) {
  RankPick best;
  for (const RankPick& p : picks)  // vocabulary order: a strictly larger value wins, so ties keep the lower id
    if (p.id >= 0 && (best.id < 0 || p.value > best.value)) best = p;
  return best.id;
}

}  // namespace llm
