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

bool is_bf16_gemv_name(const std::string& name) {
  for (const GemvMappingName& m : kGemvMappingNames)
    if (name == m.name) return true;
  return false;
}

// Every projection decode runs (the head is the embedding when tied), in order.
template <typename F>
void for_each_projection(const Model& model, F f) {
  for (const LayerWeights& l : model.weights.layers)
    for (const HostTensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) f(*t);
  f(model.config.tied_embeddings ? model.weights.embedding : model.weights.head);
}

}  // namespace

GemvChoice resolve_gemv_choice(const std::string& name) {
  GemvChoice c;
  if (name.empty()) return {kGemvDefaultMapping, kQuantGemvDefault};
  if (!gemv_mapping_known(name)) fail("unknown GEMV mapping '", name, "' (known: ", gemv_mapping_names(), ")");
  if (is_bf16_gemv_name(name)) c.bf16 = name;
  if (is_quant_gemv_name(name)) c.quant = name;
  return c;
}

std::string default_gemv_name(const Model& model, bool dequantize) {
  bool quant = false;
  for_each_projection(model, [&](const HostTensor& t) { quant = quant || (t.quant != 0 && !dequantize); });
  return quant ? kQuantGemvDefault : kGemvDefaultMapping;
}

std::string gemv_refusal(const std::string& name, const Model& model, bool dequantize) {
  if (name.empty()) return "";  // the default always runs (default_gemv_name)
  const GemvChoice c = resolve_gemv_choice(name);
  std::string why;
  for_each_projection(model, [&](const HostTensor& t) {
    if (!why.empty()) return;
    const bool quant = t.quant != 0 && !dequantize;
    if (quant && c.quant.empty())
      why = "GEMV mapping '" + name + "' has no form for " + ggml_quant_name(GgmlQuantType(t.quant)) +
            " weights (" + printable(t.name) + "); quantized weights run with warp (default), thread, as-stored or "
            "warp-dp4a, or pass --dequantize to run them as BF16";
    if (!quant && c.bf16.empty())
      why = "GEMV mapping '" + name + "' exists only for quantized weights, and " + printable(t.name) +
            " is not quantized (" + (t.quant ? "--dequantize" : std::string(dtype_name(t.dtype))) +
            "); BF16 weights run with " + kGemvDefaultMapping + " (default), warp, thread, colmajor, cublas, "
            "thread-splitk or warp-few";
  });
  return why;
}

const char* decode_path_name(DecodePath p) { return p == DecodePath::Persistent ? "persistent" : "graph"; }

DecodePath parse_decode_path(const std::string& name) {
  if (name == "graph") return DecodePath::Graph;
  if (name == "persistent") return DecodePath::Persistent;
  fail("unknown --decode '", printable(name), "' (graph or persistent)");
}

int persistent_pair_rows(const std::string& bf16_mapping) {
  if (bf16_mapping == "warp-r2") return 1;
  if (bf16_mapping == "warp" || bf16_mapping == "warp-few") return 0;
  return -1;
}

std::string persistent_refusal(const ModelConfig& c, const std::string& source, const std::string& mapping,
                               const std::string& kept_quant, const std::string& mixed_group, bool fp8_kv,
                               bool fuse_projections) {
  const GemvChoice choice = resolve_gemv_choice(mapping);
  if (!kept_quant.empty() && choice.quant != "warp" && choice.quant != "warp-dp4a")
    return "--decode persistent runs quantized weights with the quantized 'warp' and 'warp-dp4a' mappings only; '" +
           (mapping.empty() ? std::string(kQuantGemvDefault) : mapping) + "' cannot run inside it (" + source +
           " keeps " + kept_quant + "): use --gemv warp, --dequantize, or --decode graph";
  if (!mixed_group.empty())
    return "--decode persistent needs each fused group (q|k|v, gate|up) in one weight type; " + mixed_group +
           " and the matrices fused with it differ: use --decode graph, or --dequantize";
  const std::string bf16 = choice.bf16;
  // A name with no BF16 form ("warp-dp4a") runs only where every projection is kept quantized (gemv_refusal).
  if (persistent_pair_rows(bf16) < 0 && (!bf16.empty() || kept_quant.empty()))
    return "--decode persistent runs the lanes-along-K GEMV mappings (warp-r2, warp, warp-few); '" + mapping +
           "' cannot run inside it: use --decode graph for it";
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

std::string mixed_fused_group(const Model& model, bool dequantize) {
  auto kept = [&](const HostTensor& t) { return t.quant != 0 && !dequantize ? t.quant : 0u; };
  for (const LayerWeights& l : model.weights.layers) {
    for (const std::vector<const HostTensor*>& group :
         {std::vector<const HostTensor*>{&l.wq, &l.wk, &l.wv}, std::vector<const HostTensor*>{&l.w_gate, &l.w_up}})
      for (const HostTensor* t : group)
        if (kept(*t) != kept(*group[0])) return printable(group[0]->name);
  }
  return "";
}

std::string decode_path_refusal(DecodePath path, const std::string& gemv, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections) {
  if (path == DecodePath::Graph) return "";
  const std::string name = gemv.empty() ? default_gemv_name(model, dequantize) : gemv;
  return persistent_refusal(model.config, model.source, name, dequantize ? "" : quant_summary(model),
                            fuse_projections ? mixed_fused_group(model, dequantize) : "", fp8_kv, fuse_projections);
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
