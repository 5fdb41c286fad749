// Which GEMV runs which weight type (see engine/gemv_choice.h).
#include "engine/gemv_choice.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "kernels/persistent/persistent_decode_smem.h"  // CUDA-free
#include "models/quant.h"

namespace llm {

namespace {

// Every projection decode runs (the head is the embedding when tied), in order.
template <typename F>
void for_each_projection(const Model& model, F f) {
  for (const LayerWeights& l : model.weights.layers)
    for (const HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) f(*t);
  f(model.config.tied_embeddings ? model.weights.embedding : model.weights.head);
}

// "warp (default), thread, as-stored or warp-dp4a": the rows with a quantized (or a BF16) form, for the refusals.
std::string names_or(bool quant) {
  std::string s;
  const GemvRow* def = quant ? &gemv_default_quant_row() : &gemv_default_bf16_row();
  const GemvRow* last = nullptr;
  for (const GemvRow& r : kGemvTable)
    if (quant ? r.has_quant() : r.has_bf16()) last = &r;
  for (const GemvRow& r : kGemvTable) {
    if (!(quant ? r.has_quant() : r.has_bf16())) continue;
    if (!s.empty()) s += &r == last ? " or " : ", ";
    s += std::string(r.name) + (&r == def ? " (default)" : "");
  }
  return s;
}

}  // namespace

GemvPlan gemv_plan(const std::string& name) {
  const GemvRow* row = name.empty() ? &gemv_default_bf16_row() : gemv_row(name);
  if (!row) fail("unknown GEMV mapping '", name, "' (known: ", gemv_mapping_names(), ")");
  // "" takes each kind's default: the BF16 default has no quantized form, the quantized default's BF16 form is not
  // the BF16 default.
  const GemvRow& b = name.empty() ? gemv_default_bf16_row() : *row;
  const GemvRow& q = name.empty() ? gemv_default_quant_row() : *row;
  GemvPlan p;
  p.name = name;
  p.row = row;
  p.bf16 = b.bf16;
  p.bf16_persistent = b.bf16_persistent;
  p.has_quant = q.has_quant();
  p.quant = q.quant;
  p.quant_types = q.quant_types;
  p.quant_persistent = q.quant_persistent;
  return p;
}

GemvPlan gemv_plan(const std::string& name, const Model& model, bool dequantize) {
  GemvPlan p = gemv_plan(name.empty() ? default_gemv_name(model, dequantize) : name);
  if (const std::string why = gemv_refusal(p, model, dequantize); !why.empty()) fail(why);
  return p;
}

std::string default_gemv_name(const Model& model, bool dequantize) {
  bool quant = false, all_quant = true;
  int64_t bytes = 0;
  for_each_projection(model, [&](const HostTensor& t) {
    const bool q = t.quant != 0 && !dequantize;
    quant = quant || q;
    all_quant = all_quant && q;
    if (q) bytes += int64_t(ggml_quant_row_bytes(GgmlQuantType(t.quant), t.cols)) * t.rows;
  });
  if (!quant) return kGemvDefaultMapping;
  const std::string name = default_quant_gemv_name(bytes, all_quant);
  // The pick must run the model as a default always does (a type without a form keeps "warp").
  return gemv_refusal(gemv_plan(name), model, dequantize).empty() ? name : kQuantGemvDefault;
}

std::string default_quant_gemv_name(int64_t quant_bytes, bool dp4a_runs) {
  return dp4a_runs && quant_bytes >= kDp4aDefaultBytes ? "warp-dp4a" : kQuantGemvDefault;
}

std::string gemv_refusal(const GemvPlan& plan, const Model& model, bool dequantize) {
  if (!plan.named()) return "";  // the default always runs (default_gemv_name)
  std::string why;
  for_each_projection(model, [&](const HostTensor& t) {
    if (!why.empty()) return;
    const bool quant = t.quant != 0 && !dequantize;
    if (quant && !plan.runs_quant_type(t.quant))
      why = "GEMV mapping '" + plan.name + "' has no form for " + ggml_quant_name(GgmlQuantType(t.quant)) +
            " weights (" + printable(t.name) + "); quantized weights run with " + names_or(true) +
            ", or pass --dequantize to run them as BF16";
    if (!quant && plan.bf16 == GemvBf16Form::None)
      why = "GEMV mapping '" + plan.name + "' exists only for quantized weights, and " + printable(t.name) +
            " is not quantized (" + (t.quant ? "--dequantize" : std::string(dtype_name(t.dtype))) +
            "); BF16 weights run with " + names_or(false);
  });
  return why;
}

const char* decode_path_name(DecodePath p) { return p == DecodePath::Persistent ? "persistent" : "graph"; }

DecodePath parse_decode_path(const std::string& name) {
  if (name == "graph") return DecodePath::Graph;
  if (name == "persistent") return DecodePath::Persistent;
  fail("unknown --decode '", printable(name), "' (graph or persistent)");
}

int persistent_pair_rows(PersistentGemv bf16_persistent) {
  return bf16_persistent == PersistentGemv::TwoRows ? 1 : bf16_persistent == PersistentGemv::OneRow ? 0 : -1;
}

std::string cluster_refusal(const ModelConfig& c, const std::string& source, int cluster) {
  if (cluster != 8 && cluster != 16)
    return "--cluster " + std::to_string(cluster) + ": the persistent kernel's cluster form takes 8 or 16 blocks";
  const int64_t base = persistent_smem(c.dim, c.q_dim(), c.hidden_dim, c.head_dim).bytes;
  const int64_t smem = persistent_mirror_offset(base) + persistent_mirror_bytes(c.dim, c.q_dim(), c.hidden_dim);
  if (smem > kPersistentMaxSmemBytes)
    return "--cluster: " + source + " (dim " + std::to_string(c.dim) + ", hidden " + std::to_string(c.hidden_dim) +
           ") needs " + std::to_string(smem) + " bytes of shared memory per block with the mirrors of x, att and hb, "
           "more than the " + std::to_string(kPersistentMaxSmemBytes) + " it can have; use --cluster 0";
  return "";
}

std::string persistent_refusal(const ModelConfig& c, const std::string& source, const GemvPlan& plan,
                               const std::string& kept_quant, const std::string& mixed_group, bool fp8_kv,
                               bool fuse_projections) {
  if (!kept_quant.empty() && plan.quant_persistent == PersistentGemv::None)
    return "--decode persistent runs quantized weights with the quantized 'warp' and 'warp-dp4a' mappings only; '" +
           (plan.named() ? plan.name : std::string(kQuantGemvDefault)) + "' cannot run inside it (" + source +
           " keeps " + kept_quant + "): use --gemv warp, --dequantize, or --decode graph";
  if (!mixed_group.empty())
    return "--decode persistent needs gate and up in one weight type (its gate|up stage pairs their rows); " +
           mixed_group + " and the matrix fused with it differ: use --decode graph, or --dequantize";
  // A name with no BF16 form ("warp-dp4a") runs only where every projection is kept quantized (gemv_refusal).
  if (plan.bf16_persistent == PersistentGemv::None && (plan.bf16 != GemvBf16Form::None || kept_quant.empty())) {
    std::string lanes_along_k;  // "warp-r2, warp, warp-few": the BF16 forms with a persistent stage
    for (const GemvRow& r : kGemvTable)
      if (r.bf16_persistent != PersistentGemv::None)
        lanes_along_k += (lanes_along_k.empty() ? "" : ", ") + std::string(r.name);
    return "--decode persistent runs the lanes-along-K GEMV mappings (" + lanes_along_k + "); '" + plan.name +
           "' cannot run inside it: use --decode graph for it";
  }
  if (fp8_kv) return "--decode persistent keeps the KV cache in BF16; --kv-dtype fp8 runs with --decode graph";
  if (!fuse_projections) return "--decode persistent needs fused projections (q|k|v and gate|up in one matrix each)";
  const int hd = c.head_dim, lpk = hd / 8;
  if (hd % 8 != 0 || hd > 256 || lpk <= 0 || (lpk & (lpk - 1)) != 0)
    return "--decode persistent: head_dim " + std::to_string(hd) + " of " + source +
           " is not 8, 16, 32, 64, 128 or 256; use --decode graph";
  const int64_t smem = persistent_smem(c.dim, c.q_dim(), c.hidden_dim, hd).bytes;  // the kernel's own sum
  if (smem > kPersistentMaxSmemBytes) {
    const int widest = std::max({c.dim, c.hidden_dim, c.q_dim()});
    return "--decode persistent: rows of " + std::to_string(widest) + " columns (dim " + std::to_string(c.dim) +
           ") need " + std::to_string(smem) + " bytes of shared memory per block, more than the " +
           std::to_string(kPersistentMaxSmemBytes) + " it can have; "
           "use --decode graph";
  }
  return "";
}

std::string mixed_gate_up(const Model& model, bool dequantize) {
  auto kept = [&](const HostTensor& t) { return t.quant != 0 && !dequantize ? t.quant : 0u; };
  for (const LayerWeights& l : model.weights.layers)
    if (kept(l.w_gate) != kept(l.w_up)) return printable(l.w_gate.name);
  return "";
}

std::string decode_path_refusal(DecodePath path, const GemvPlan& plan, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections) {
  if (path == DecodePath::Graph) return "";
  const GemvPlan p = plan.named() ? plan : gemv_plan(default_gemv_name(model, dequantize));
  return persistent_refusal(model.config, model.source, p, dequantize ? "" : quant_summary(model),
                            fuse_projections ? mixed_gate_up(model, dequantize) : "", fp8_kv, fuse_projections);
}

std::string decode_path_refusal(DecodePath path, const std::string& gemv, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections) {
  return decode_path_refusal(path, gemv_plan(gemv), model, dequantize, fp8_kv, fuse_projections);
}

std::string quant_summary(const Model& model) {
  struct Count {
    int tensors = 0;
    double bytes = 0;
  };
  std::map<std::string, Count> by_type;
  for_each_projection(model, [&](const HostTensor& t) {
    if (!t.quant) return;
    Count& n = by_type[ggml_quant_name(GgmlQuantType(t.quant))];
    n.tensors++;
    n.bytes += double(t.nbytes());
  });
  std::string s;
  for (const auto& kv : by_type) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s x %d (%.1f MB)", kv.first.c_str(), kv.second.tensors, kv.second.bytes / 1e6);
    s += (s.empty() ? "" : ", ") + std::string(buf);
  }
  return s;
}

}  // namespace llm
