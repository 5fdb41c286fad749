// Which GEMV runs which weight type, decided in ONE place for every path (run-llama, chat, llama-ab, the CUDA
// engine): a --gemv name becomes a GemvPlan once, and the refusals take the plan. Builds without CUDA: run-llama
// refuses an impossible --gemv / weight-type pair (exit 2) before any GPU work.
#pragma once
#include <string>

#include "core/gemv_table.h"  // the mappings' rows: forms, persistent stages
#include "models/model.h"

namespace llm {

// A --gemv name resolved ONCE into the forms decode runs: made by gemv_plan from the name (the table's row, core/
// gemv_table.h), carried from there on (the refusals below, the A/B run, the sector model, the registries), never
// compared by name again.
struct GemvPlan {
  std::string name;            // as given ("" = the defaults: the first BF16 row for BF16 weights, the first
                               // quantized row for quantized ones); for messages only
  const GemvRow* row = nullptr;  // the name's row (the BF16 default's row for "")
  GemvBf16Form bf16 = GemvBf16Form::None;  // what BF16 weights run (None: this name runs no BF16 weight)
  bool has_quant = false;      // a quantized form exists
  QuantGemvKind quant = QuantGemvKind::Warp;  // what weights kept quantized run (when has_quant)
  uint32_t quant_types = 0;    // GGML types (1u << id) that form runs
  PersistentGemv bf16_persistent = PersistentGemv::None;   // the BF16 form inside the persistent kernel
  PersistentGemv quant_persistent = PersistentGemv::None;  // the quantized form inside it

  bool named() const { return !name.empty(); }
  bool runs_quant_type(uint32_t ggml_type) const { return ggml_type < 32 && (quant_types >> ggml_type) & 1u; }
};
// The plan of a name ("" = the defaults). Unknown names throw llm::Error "unknown GEMV mapping 'NAME' (known: ...)",
// listing both kinds of form.
GemvPlan gemv_plan(const std::string& name);
// The plan decode uses for `model`: gemv_plan(name), "" resolved to default_gemv_name(model, dequantize). Throws
// llm::Error for an unknown name, and with gemv_refusal's line for a name that cannot run every projection.
GemvPlan gemv_plan(const std::string& name, const Model& model, bool dequantize);

// The mapping a run uses when --gemv is not given: the BF16 default, or, when decode keeps quantized weights, the
// default of the quantized forms (it has a BF16 form too, for any projection that is not quantized), or "warp-dp4a"
// where default_quant_gemv_name says so.
std::string default_gemv_name(const Model& model, bool dequantize);

// The quantized default for a model whose decode streams `quant_bytes` of quantized projections per token, where
// "warp-dp4a" can run every projection (`dp4a_runs`: every projection quantized) or not: "warp-dp4a" from
// kDp4aDefaultBytes on, else "warp". Why: a stream-bound model gains more from the int8 activations' fewer instructions
// per weight than it loses in exactness (H100, synthetic 8B: Q4_0 393 -> 470 t/s, Q4_K_M 283.5 -> 327.0, and a
// 26-token prompt's first token in 10.0 ms instead of 32.2 ms: the prompt reads decode's int8 rows), while a
// launch-bound small model runs "warp" faster and exact (H200, SmolLM2 Q4_1: 1,400.5 vs 1,293.8 t/s).
constexpr int64_t kDp4aDefaultBytes = int64_t(1) << 30;
std::string default_quant_gemv_name(int64_t quant_bytes, bool dp4a_runs);

// "" when `plan` can run every projection of `model` (quantized weights kept quantized unless `dequantize`);
// otherwise why not, in one line naming the mapping, the weight type and a tensor. The defaults always run.
std::string gemv_refusal(const GemvPlan& plan, const Model& model, bool dequantize);

// How decode runs a step (--decode): the CUDA graph of one kernel per op (the default), or one persistent kernel per
// token (kernels/persistent/persistent_decode.h).
enum class DecodePath { Graph, Persistent };
// The decode path a model runs without --decode: graph, for every size and format. Measured on an H100 (2026-12-06,
// llama-ab tg128 beside llama.cpp, docs/results/session-2026-12-06d.md), graph against persistent on each one's
// default mapping: SmolLM2-135M Q4_1 1,547.6 vs 1,142.9 t/s, TinyLlama-1.1B BF16 863.1 vs 843.1, 8B BF16 181.3 vs
// 176.9, Q8_0 298.8 vs 268.9, Q4_0 457.2 vs 395.0, Q4_K_M 332.0 vs 263.6. (The H200's 2026-12-04 run had persistent
// ahead on SmolLM2 dequantized to BF16 and TinyLlama; not measured again there.)
constexpr DecodePath kDefaultDecodePath = DecodePath::Graph;
const char* decode_path_name(DecodePath p);  // "graph", "persistent"
// "graph" / "persistent"; anything else throws llm::Error "unknown --decode 'NAME' (graph or persistent)".
DecodePath parse_decode_path(const std::string& name);

// The persistent path runs the lanes-along-K BF16 forms over their padded row-major layout: TwoRows (warp-r2) walks
// two rows at once (returns 1), OneRow (warp and its control warp-few) one row after the other (0); any other -1.
// Quantized weights run there through the quantized "warp" form's planes and the lane code of "warp" or "warp-dp4a".
int persistent_pair_rows(PersistentGemv bf16_persistent);

// What the persistent kernel takes, from what any caller knows: "" or why not, in one line. `plan` is what decode
// runs (gemv_plan), `kept_quant` says which weights decode keeps quantized ("" = none; they need a form with a
// persistent quantized stage: "warp" or "warp-dp4a"), `mixed_group` names a gate|up group whose members differ in type
// ("" = none: the kernel takes q|k|v in a part per type, gate|up in one), `source` names the model in the messages.
// decode_path_refusal (from a Model) and the CUDA engine (from its state) both ask it.
// What the persistent kernel's cluster form (--cluster N) takes beyond persistent_refusal: "" or why not, in one line:
// N is 8 or 16, and a block's shared memory with its mirrors of x, att and hb (persistent_mirror_bytes) fits.
std::string cluster_refusal(const ModelConfig& c, const std::string& source, int cluster);
std::string persistent_refusal(const ModelConfig& c, const std::string& source, const GemvPlan& plan,
                               const std::string& kept_quant, const std::string& mixed_group, bool fp8_kv,
                               bool fuse_projections);

// The gate tensor of the first layer whose gate and up decode would hold in different types (kept quantized in
// different GGML types, or one quantized and one not), or "". (A q|k|v group mixing types runs on both paths.)
std::string mixed_gate_up(const Model& model, bool dequantize);

// "" when `path` can run `model` with GEMV plan `plan` (unnamed: the model's default) and these options; otherwise
// why not, in one line naming the mapping, weight type, KV dtype or value. Graph runs everything the engine runs.
// Persistent refuses a mapping that is not lanes-along-K (cuBLAS, thread, colmajor, as-stored, warp-dp4a, ...), gate
// and up in different weight types, an FP8 KV cache, unfused projections, and shapes its kernel does not take (head_dim not 8 * 2^i up to 256;
// rows wider than 50,000).
std::string decode_path_refusal(DecodePath path, const GemvPlan& plan, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections);
// The same for a name: decode_path_refusal(path, gemv_plan(gemv), ...) (callers that hold a typed name).
std::string decode_path_refusal(DecodePath path, const std::string& gemv, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections);

// The quantized types of a model's projection and head weights with tensor counts and bytes, e.g.
// "Q4_1 x 210 (78.6 MB), Q8_0 x 1 (28.7 MB)"; "" when nothing is quantized.
std::string quant_summary(const Model& model);

}  // namespace llm
