// Hugging Face Llama conventions: config.json (+ generation_config.json) -> ModelConfig, and the table of
// checkpoint tensor names with the shape each must have and where it goes in ModelWeights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/model.h"

namespace llm {

// Parses a LlamaForCausalLM config.json; reads generation_config.json in the same directory where present (its
// bos/eos override the config's, as transformers' generate() does). Calls ModelConfig::validate.
// Throws llm::Error naming the file and key.
ModelConfig load_hf_config(const std::string& config_path);

enum class WeightKind { Embedding, Norm, Linear };

struct HfWeight {
  std::string name;        // checkpoint name, e.g. model.layers.3.self_attn.q_proj.weight
  HostTensor* slot;        // destination in ModelWeights
  WeightKind kind;
  int64_t rows, cols;      // engine shape [rows, cols]; norms are 1-D on disk: [cols], rows = 1
  int rope_head_dim;       // q_proj/k_proj: head_dim (rotate-half rows on disk); else 0
  uint64_t synthetic_id;   // tensor id of its synthetic fill (models/synthetic_spec.h)

  std::vector<int64_t> file_shape() const {
    return kind == WeightKind::Norm ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
  }
};

// Every weight of a Llama checkpoint for `c`, in file-writing order (embedding, layers, final norm, head);
// lm_head.weight only when the head is untied. `w.layers` is resized to c.n_layers.
std::vector<HfWeight> hf_weight_table(const ModelConfig& c, ModelWeights& w);

}  // namespace llm
