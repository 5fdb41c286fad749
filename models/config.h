// ModelConfig: the hyper-parameters of a Llama-style decoder, whatever file format they came from.
#pragma once
#include <string>
#include <vector>

namespace llm {

struct RopeScaling {
  std::string type = "none";  // "none" or "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// What a file format calls each checked field of ModelConfig, so that a refusal names the file's own key beside the
// file's own value (a GGUF llama.block_count of 2^30 is reported as llama.block_count, not num_hidden_layers). The
// defaults are Hugging Face's config.json names; loaders of other formats pass theirs (models/gguf.cpp,
// models/llama2c.cpp).
struct ConfigKeys {
  const char* dim = "hidden_size";
  const char* hidden_dim = "intermediate_size";
  const char* n_layers = "num_hidden_layers";
  const char* n_heads = "num_attention_heads";
  const char* n_kv_heads = "num_key_value_heads";
  const char* head_dim = "head_dim";
  const char* vocab_size = "vocab_size";
  const char* max_seq_len = "max_position_embeddings";
  const char* norm_eps = "rms_norm_eps";
  const char* rope_theta = "rope_theta";
  const char* bos_id = "bos_token_id";
  const char* eos_id = "eos_token_id";
};

struct ModelConfig {
  std::string architecture = "llama";  // for messages
  int dim = 0;           // hidden_size
  int hidden_dim = 0;    // intermediate_size (SwiGLU width)
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;      // q/k/v head size; dim need not equal n_heads * head_dim
  int vocab_size = 0;
  int max_seq_len = 0;   // max_position_embeddings / llama2.c seq_len
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // Per-pair divisors of the rotary frequencies (GGUF's rope_freqs.weight, how llama.cpp ships Llama 3.1's
  // scaling); empty = none. When set, it has head_dim / 2 entries, all positive.
  std::vector<float> rope_freq_factors;
  bool tied_embeddings = true;
  int bos_id = 1;
  std::vector<int> eos_ids{2};

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Checks the sizes against the engine's ranges and internal consistency (heads divisible by kv heads, even
  // head_dim); throws llm::Error naming each field by `keys`, the names of the file the config came from.
  void validate(const std::string& where, const ConfigKeys& keys) const;
  void validate(const std::string& where) const;  // with Hugging Face's names (config.json)
};


// The ranges the engine supports, stated once (validate() and the loaders' messages use them).
constexpr double kMinRopeTheta = 1.0, kMaxRopeTheta = 1e12;
constexpr double kMinNormEps = 1e-12, kMaxNormEps = 1.0;
constexpr int kMaxDim = 1 << 20, kMaxHiddenDim = 1 << 22, kMaxLayers = 4096, kMaxHeads = 4096, kMaxHeadDim = 4096,
              kMaxVocabSize = 1 << 24, kMaxPositions = 1 << 24;

// A number as the shortest %g text that reads back as the same value (as a float when the value is exactly a
// float, so a GGUF float32 1e-40 prints "1e-40", not its 17-digit double expansion): 1e-50, 1e+300, 10000.5.
std::string format_number(double v);

// rope theta / RMSNorm epsilon read from a file, checked as doubles (the file's own type) against the stated ranges
// before they become the config's floats; the message names `where`, `key` and the value as read.
float checked_rope_theta(double v, const std::string& where, const std::string& key);
float checked_norm_eps(double v, const std::string& where, const std::string& key);

// The head_dim/2 rotary inverse frequencies, pair i using theta^(-2i/head_dim), with llama3 scaling
// applied and each divided by rope_freq_factors[i] when those are given.
std::vector<float> rope_inv_freq(const ModelConfig& c);

}  // namespace llm
