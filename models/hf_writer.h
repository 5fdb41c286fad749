// Writes a Model as a Hugging Face Llama directory (config.json, safetensors, optional tokenizer.model), tensor by
// tensor so that an 8B model never has to fit in memory. q/k rows go to disk in HF rotate-half order.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/dtype.h"
#include "models/model.h"

namespace llm {

struct HfWriteOptions {
  DType dtype = DType::BF16;     // on-disk element type; values are converted from FP32 (exactly, for F32/BF16)
  int shards = 1;                // 1: model.safetensors; N > 1: N shards + model.safetensors.index.json
  bool rope_parameters = false;  // transformers-5 "rope_parameters" instead of rope_theta + rope_scaling
  std::string tokenizer;         // tokenizer.model to copy beside the weights, or empty
  bool overwrite = false;        // allow a non-empty output directory (stale weight files are removed)
  // Called after each tensor: its name, bytes written so far and in total (all shards).
  std::function<void(const std::string& tensor, uint64_t done, uint64_t total)> progress;
};

void write_hf_model(const Model& model, const std::string& out_dir, const HfWriteOptions& opt = {});

// The config.json text for `c` (LlamaForCausalLM, every key load_hf_config reads).
std::string hf_config_json(const ModelConfig& c, DType dtype, bool rope_parameters);

}  // namespace llm
