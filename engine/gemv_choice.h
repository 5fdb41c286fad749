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

// The quantized types of a model's projection and head weights with tensor counts and bytes, e.g.
// "Q4_1 x 210 (78.6 MB), Q8_0 x 1 (28.7 MB)"; "" when nothing is quantized.
std::string quant_summary(const Model& model);

}  // namespace llm
