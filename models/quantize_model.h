// --quantize: a float checkpoint's (or a synthetic model's) projection and head weights quantized at load into GGML
// blocks (Q8_0, Q4_0 or Q4_K, models/quant.h), so they run through the quantized GEMVs exactly as a GGUF file of that
// type would. The embedding table is quantized only where it is also the (tied) head.
#pragma once
#include <string>

#include "models/model.h"
#include "models/quant.h"

namespace llm {

// "q8_0" -> Q8_0, "q4_0" -> Q4_0, "q4_k" -> Q4_K; anything else fails naming the allowed values.
GgmlQuantType parse_quantize_type(const std::string& name);

// Quantizes in place (rows in parallel on `threads` threads, 0 = the hardware's). Fails, naming the file's types,
// when a projection is already quantized (a GGUF file of quantized types), and naming the tensor when its row length
// is not a multiple of the type's block (32, or 256 for Q4_K).
void quantize_model(Model& model, GgmlQuantType type, int threads = 0);

}  // namespace llm
