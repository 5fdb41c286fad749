// Synthetic models: exact shapes of real checkpoints (and tiny test shapes) with counter-based weights, so the
// engine can be run and measured at full size without downloading anything. Fills: models/synthetic_spec.h.
#include <map>

#include "core/error.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/synthetic_spec.h"

namespace llm {

namespace {

ModelConfig llama_config(int layers, int dim, int heads, int kv_heads, int ffn, int vocab, float theta, bool tied,
                         int max_pos) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.n_layers = layers;
  c.dim = dim;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.hidden_dim = ffn;
  c.vocab_size = vocab;
  c.rope_theta = theta;
  c.tied_embeddings = tied;
  c.max_seq_len = max_pos;
  c.norm_eps = 1e-5f;
  c.bos_id = 1;
  c.eos_ids = {2};
  return c;
}

RopeScaling llama3_scaling(float factor, int original) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position_embeddings = original;
  return s;
}

const std::map<std::string, ModelConfig>& known_configs() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> m;
    ModelConfig c = llama_config(32, 4096, 32, 8, 14336, 128256, 500000.0f, false, 131072);
    c.rope_scaling = llama3_scaling(8.0f, 8192);
    c.bos_id = 128000;
    c.eos_ids = {128001, 128008, 128009};
    m["llama3.1-8b"] = c;
    // Llama 3.1 70B: 80 layers, 8,192 hidden, 64/8 heads, 28,672 FFN (141 GB in BF16; runs on one H200 quantized).
    c.n_layers = 80, c.dim = 8192, c.n_heads = 64, c.n_kv_heads = 8, c.head_dim = 128, c.hidden_dim = 28672;
    m["llama3.1-70b"] = c;
    m["llama2-7b"] = llama_config(32, 4096, 32, 32, 11008, 32000, 10000.0f, false, 4096);
    m["tinyllama-1.1b"] = llama_config(22, 2048, 32, 4, 5632, 32000, 10000.0f, false, 2048);
    m["smollm2-135m"] = llama_config(30, 576, 9, 3, 1536, 49152, 100000.0f, true, 8192);
    c = llama_config(2, 64, 4, 2, 160, 256, 10000.0f, false, 256);
    c.rope_scaling = llama3_scaling(8.0f, 64);
    m["tiny-gqa"] = c;
    c = llama_config(2, 48, 4, 1, 100, 300, 10000.0f, true, 128);
    c.head_dim = 24;  // q_dim 96 != dim 48: exercises every place that confuses the two
    m["tiny-hd"] = c;
    // Long context for the GPU's prefill-vs-decode test at 8K tokens: head_dim 64 (the tensor-core prefill path).
    m["tiny-long"] = llama_config(2, 256, 4, 2, 512, 512, 500000.0f, false, 16384);
    // Awkward shapes for the persistent decode kernel: an odd vocabulary, a hidden size that is no multiple of 8, a
    // GQA group of 5 (an odd number of query heads per pass), q_dim 160 != dim 200.
    c = llama_config(3, 200, 5, 1, 300, 1001, 10000.0f, false, 4096);
    c.head_dim = 32;
    m["tiny-odd"] = c;
    return m;
  }();
  return table;
}

SyntheticFill fill_for(const HfWeight& w, uint64_t seed) {
  SyntheticFill f;
  f.seed = seed;
  f.tensor_id = w.synthetic_id;
  switch (w.kind) {
    case WeightKind::Embedding: f.offset = synth::kEmbeddingOffset, f.scale = synth::kEmbeddingScale; break;
    case WeightKind::Norm: f.offset = synth::kNormOffset, f.scale = synth::kNormScale; break;
    case WeightKind::Linear: f.offset = 0.0f, f.scale = synth::linear_scale(w.cols); break;
  }
  return f;
}

}  // namespace

std::vector<std::string> synthetic_model_names() {
  std::vector<std::string> names;
  for (const auto& kv : known_configs()) names.push_back(kv.first);
  return names;
}

Model load_synthetic(const std::string& name, uint64_t seed) {
  auto it = known_configs().find(name);
  if (it == known_configs().end()) {
    std::string known;
    for (const auto& n : synthetic_model_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown synthetic model '", name, "' (known: ", known, ")");
  }
  Model m;
  m.source = "synthetic:" + name;
  m.format = "synthetic";
  m.config = it->second;
  m.config.validate(m.source);
  for (const HfWeight& w : hf_weight_table(m.config, m.weights)) {
    HostTensor& t = *w.slot;
    t.name = w.name;
    t.dtype = DType::BF16;
    t.rows = w.rows;
    t.cols = w.cols;
    t.synthetic = true;
    t.fill = fill_for(w, seed);
    t.rope_head_dim = w.rope_head_dim;
  }
  if (m.config.tied_embeddings) m.weights.head = m.weights.embedding;
  return m;
}

}  // namespace llm
