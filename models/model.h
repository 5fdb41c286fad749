// Model: a checkpoint opened from any supported format, as a config plus weights by role.
// models/ knows file formats and configs; nothing of GPUs or of text.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/tensor.h"
#include "models/vocab.h"

namespace llm {

struct LayerWeights {
  HostTensor attn_norm;  // [dim]
  HostTensor wq;         // [n_heads * head_dim, dim]     interleaved RoPE rows
  HostTensor wk;         // [n_kv_heads * head_dim, dim]  interleaved RoPE rows
  HostTensor wv;         // [n_kv_heads * head_dim, dim]
  HostTensor wo;         // [dim, n_heads * head_dim]
  HostTensor ffn_norm;   // [dim]
  HostTensor w_gate;     // [hidden_dim, dim]   (w1)
  HostTensor w_up;       // [hidden_dim, dim]   (w3)
  HostTensor w_down;     // [dim, hidden_dim]   (w2)
};

struct ModelWeights {
  HostTensor embedding;               // [vocab, dim]
  std::vector<LayerWeights> layers;   // n_layers
  HostTensor final_norm;              // [dim]
  HostTensor head;                    // [vocab, dim]; the embedding itself when tied
};

struct Model {
  std::string source;          // what was opened (path or synthetic:NAME), for messages
  std::string format;          // "hf", "llama2c", "gguf", "synthetic"
  ModelConfig config;
  ModelWeights weights;
  std::string tokenizer_path;  // tokenizer.model or tokenizer.json found beside the weights, or empty
  std::shared_ptr<const EmbeddedVocab> vocab;  // the vocabulary inside the checkpoint (GGUF), or null
  std::string chat_template;   // Jinja chat template from the checkpoint (GGUF tokenizer.chat_template or the
                               // directory's tokenizer_config.json), or empty
};

// Opens a Hugging Face directory, a GGUF file, a llama2.c .bin, or "synthetic:NAME".
// Throws llm::Error with a one-line message.
Model load_model(const std::string& path);

// llama2.c checkpoint (.bin). Exposed for tests.
Model load_llama2c(const std::string& path);
// Hugging Face directory with config.json and (sharded) safetensors. Exposed for tests.
Model load_hf_dir(const std::string& dir);
// GGUF version 3 llama file; quantized tensors stay GGML blocks (HostTensor::quant). Exposed for tests.
Model load_gguf(const std::string& path);
// Exact-shape model with counter-based weights (core/counter_rng.h); names listed by synthetic_model_names().
Model load_synthetic(const std::string& name, uint64_t seed = 0);
// The same counter-based weights for any config (checked by ModelConfig::validate), named `source` (tests of shapes
// no synthetic name has).
Model synthetic_model(const std::string& source, const ModelConfig& config, uint64_t seed = 0);
std::vector<std::string> synthetic_model_names();

}  // namespace llm
