// --quantize: a float checkpoint's (or a synthetic model's) weights quantized into GGML blocks (models/quant.h), so
// they run through the quantized GEMVs exactly as a GGUF file of those types would, and so write-gguf can write them
// (models/gguf_writer.h). Two kinds of scheme:
//   * one type (q8_0, q4_0, q4_k, q6_k): every projection and the head; the embedding table only where it is also
//     the (tied) head;
//   * q4_k_m: llama.cpp's Q4_K_M mix (llama_tensor_get_type in src/llama-quant.cpp, llama architecture, no experts,
//     no imatrix): output.weight Q6_K; attn_v and ffn_down Q6_K on the "use_more_bits" layers (i < n/8, i >= 7n/8,
//     or (i - n/8) % 3 == 2), Q4_K elsewhere (Q5_K on a 70B: 80 layers with grouped-query attention, llama.cpp's
//     LLM_TYPE_70B); every other projection and token_embd Q4_K. A tied embedding is the output and follows its rule.
// Rows a type cannot hold fall back as llama-quantize does (fallback_quant_type): Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, and a
// row that is not a multiple of 32 becomes F16 whatever the type (llama.cpp 0c1e570: "must use F16 due to unusual
// shape"); the output rule of q4_k_m takes Q8_0 directly when the row is not a multiple of 256. Norms stay as they
// are. Checked against llama-quantize (llama-cpp-python 0.3.36's llama.cpp, CPU build) on the float GGUFs write-gguf
// writes: Q4_K_M of synthetic:smollm2-135m and stories260K, Q8_0 and Q6_K of stories260K give byte-identical files.
// One difference is deliberate: llama-quantize's Q4_0/Q4_1/Q5_x ftypes put output.weight in Q6_K; our one-type
// schemes keep every quantized tensor in the one type.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/quant.h"

namespace llm {

struct QuantizeScheme {
  std::string name;                          // as given: "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m"
  GgmlQuantType type = GgmlQuantType::Q8_0;  // the one type; Q4_K (the default of the mix) for q4_k_m
  bool q4_k_m = false;
  QuantSearch search = QuantSearch::kReference;  // kQuick: the K-quants without their scale search (write-gguf
                                                 // --quick-quant: benchmark files of synthetic weights)
};

// "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q4_k" | "q5_k" | "q6_k" | "q4_k_m"; anything else fails naming the value and
// the allowed ones.
QuantizeScheme parse_quantize_type(const std::string& name);

// Which weight of the model a tensor is, for the q4_k_m rule.
enum class WeightRole { TokenEmbd, Output, AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown };

// The GGML type llama.cpp's Q4_K_M rule gives a weight of `role` in layer `layer` of `n_layers` whose rows are
// `cols` wide, before the row-length fallback (the output rule's own Q8_0 for cols % 256 != 0 included). `tied`:
// there is no output.weight, so token_embd takes the output rule.
// llama_70b: llama.cpp's LLM_TYPE_70B (80 layers, grouped-query attention): attn_v's Q4_K becomes Q5_K.
GgmlQuantType q4_k_m_type(WeightRole role, int layer, int n_layers, int64_t cols, bool tied, bool llama_70b = false);

// The ggml type id a `wanted` quantized type becomes on rows `cols` wide: `wanted` when it holds them, else
// llama.cpp's stand-in (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), else F16 (ggml type id 1).
uint32_t fallback_quant_type(GgmlQuantType wanted, int64_t cols);

// One tensor a scheme quantizes: what it is, the type the scheme wants, and the ggml type id it gets
// (fallback_quant_type of `wanted`: a GgmlQuantType, or 1 = F16).
struct QuantizeTarget {
  const HostTensor* tensor = nullptr;
  WeightRole role = WeightRole::AttnQ;
  int layer = -1;  // -1 for token_embd and output
  GgmlQuantType wanted = GgmlQuantType::Q8_0;
  uint32_t type = 0;
};

// The tensors `scheme` quantizes in `model` and their types. Fails, naming the file's types, when a target is already
// quantized (a GGUF file of quantized types): --quantize takes a float checkpoint or a synthetic model.
std::vector<QuantizeTarget> quantize_plan(const Model& model, const QuantizeScheme& scheme);

// `t` (engine row order) as a tensor of ggml type `type` (a GgmlQuantType with a quantizer, or 1 = F16) that owns its
// bytes, rows in parallel on `threads` threads (0 = the hardware's).
HostTensor quantize_tensor(const HostTensor& t, uint32_t type, int threads = 0,
                           QuantSearch search = QuantSearch::kReference);

// "blk.0.ffn_down.weight (172 wide): Q4_K -> F16" for each target whose type is not the one wanted; empty if none.
std::vector<std::string> quantize_fallbacks(const std::vector<QuantizeTarget>& plan);

// Quantizes in place (quantize_plan, then quantize_tensor on each target); returns the plan.
std::vector<QuantizeTarget> quantize_model(Model& model, const QuantizeScheme& scheme, int threads = 0);

}  // namespace llm
