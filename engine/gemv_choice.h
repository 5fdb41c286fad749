// Which GEMV runs which weight type, decided in ONE place for every path (run-llama, chat, llama-ab, the CUDA
// engine). Builds without CUDA: run-llama refuses an impossible --gemv / weight-type pair (exit 2) before any GPU work.
#pragma once
#include <string>

#include "core/gemv_names.h"  // both lists of mapping names
#include "models/model.h"

namespace llm {

// How the engine runs GEMVs for one --gemv name, per weight kind.
struct GemvChoice {
  std::string bf16;        // the BF16 registry mapping (core/gemv_names.h); "" = this name has no BF16 form
  std::string quant;       // the quantized mapping (kQuantGemvNames); "" = this name has no quantized form
};
// "" = the defaults (core/gemv_names.h's first for BF16, kQuantGemvDefault for quantized weights). "warp" and
// "thread" have both forms; the other BF16 mappings only BF16; as-stored and warp-dp4a only quantized. Unknown names
// throw llm::Error listing both lists.
GemvChoice resolve_gemv_choice(const std::string& name);

// The mapping a run uses when --gemv is not given: the BF16 default, or, when decode keeps quantized weights, the
// default of the quantized forms (it has a BF16 form too, for any projection that is not quantized).
std::string default_gemv_name(const Model& model, bool dequantize);

// "" when `name` can run every projection of `model` (quantized weights kept quantized unless `dequantize`);
// otherwise why not, in one line naming the mapping, the weight type and a tensor.
std::string gemv_refusal(const std::string& name, const Model& model, bool dequantize);

// How decode runs a step (--decode): the CUDA graph of one kernel per op (the default), or one persistent kernel per
// token (kernels/persistent/persistent_decode.h).
enum class DecodePath { Graph, Persistent };
const char* decode_path_name(DecodePath p);  // "graph", "persistent"
// "graph" / "persistent"; anything else throws llm::Error "unknown --decode 'NAME' (graph or persistent)".
DecodePath parse_decode_path(const std::string& name);

// The persistent path runs the lanes-along-K BF16 mappings over their padded row-major layout: "warp-r2" walks two
// rows at once (returns 1), "warp" and its control "warp-few" one row after the other (0); any other name -1.
// Quantized weights run there through the quantized "warp" mapping's planes and the lane code of "warp" or "warp-dp4a"
// (two rows at once).
int persistent_pair_rows(const std::string& bf16_mapping);

// What the persistent kernel takes, from what any caller knows: "" or why not, in one line. `mapping` is the --gemv
// name decode uses (resolve_gemv_choice), `kept_quant` says which weights decode keeps quantized ("" = none; they
// need the quantized "warp" or "warp-dp4a" form), `mixed_group` names a fused group (q|k|v, gate|up) whose members differ in type
// ("" = none: the kernel takes one type per matrix), `source` names the model in the messages. decode_path_refusal
// (from a Model) and the CUDA engine (from its state) both ask it.
std::string persistent_refusal(const ModelConfig& c, const std::string& source, const std::string& mapping,
                               const std::string& kept_quant, const std::string& mixed_group, bool fp8_kv,
                               bool fuse_projections);

// The first tensor of a fused group (q|k|v, gate|up) whose members decode would hold in different types (kept
// quantized in different GGML types, or some quantized and some not), or "".
std::string mixed_fused_group(const Model& model, bool dequantize);

// "" when `path` can run `model` with GEMV `gemv` ("" = the default) and these options; otherwise why not, in one
// line naming the mapping, weight type, KV dtype or value. Graph runs everything the engine runs. Persistent refuses a
// mapping that is not lanes-along-K (cuBLAS, thread, colmajor, as-stored, warp-dp4a, ...), a fused group mixing weight
// types, an FP8 KV cache, unfused projections, and shapes its kernel does not take (head_dim not 8 * 2^i up to 256;
// rows wider than 50,000).
std::string decode_path_refusal(DecodePath path, const std::string& gemv, const Model& model, bool dequantize,
                                bool fp8_kv, bool fuse_projections);

// The quantized types of a model's projection and head weights with tensor counts and bytes, e.g.
// "Q4_1 x 210 (78.6 MB), Q8_0 x 1 (28.7 MB)"; "" when nothing is quantized.
std::string quant_summary(const Model& model);

}  // namespace llm
