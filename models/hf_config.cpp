// config.json / generation_config.json parsing for LlamaForCausalLM, and the checkpoint's tensor-name table.
// Defaults follow transformers' LlamaConfig where a key may be absent; the sizes are required.
#include "models/hf_config.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"
#include "models/synthetic_spec.h"

namespace llm {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path);
  try {
    json j = parse_json(in, path);
    if (!j.is_object()) fail(path, ": expected a JSON object, found ", j.type_name());
    return j;
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON (", printable(e.what(), 300), ")");
  }
}

// Typed access to one JSON object, every message naming the file and the (dotted) key.
struct Keys {
  const json& obj;
  std::string file;
  std::string prefix;  // "rope_scaling." for nested objects

  bool has(const char* key) const { return obj.contains(key) && !obj[key].is_null(); }
  [[noreturn]] void wrong_type(const char* key, const char* want) const {
    fail(file, ": key '", prefix, key, "' must be ", want, ", found ", obj[key].type_name(), " ",
         printable(obj[key].dump()));
  }
  const json& required(const char* key) const {
    if (!has(key)) fail(file, ": missing required key '", prefix, key, "'");
    return obj[key];
  }
  int to_int(const char* key, const json& v, const char* want) const {
    if (!v.is_number_integer()) wrong_type(key, want);
    bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT_MAX)
                                       : v.get<int64_t>() >= INT_MIN && v.get<int64_t>() <= INT_MAX;
    if (!fits) fail(file, ": key '", prefix, key, "' is out of range: ", printable(v.dump()));
    return int(v.get<int64_t>());
  }
  int get_int(const char* key) const { return to_int(key, required(key), "an integer"); }
  int get_int(const char* key, int dflt) const { return has(key) ? get_int(key) : dflt; }
  double get_number(const char* key) const {
    const json& v = required(key);
    if (!v.is_number()) wrong_type(key, "a number");
    return v.get<double>();
  }
  double get_number(const char* key, double dflt) const { return has(key) ? get_number(key) : dflt; }
  bool get_bool(const char* key, bool dflt) const {
    if (!has(key)) return dflt;
    if (!obj[key].is_boolean()) wrong_type(key, "true or false");
    return obj[key].get<bool>();
  }
  std::string get_string(const char* key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    if (!obj[key].is_string()) wrong_type(key, "a string");
    return obj[key].get<std::string>();
  }
  // eos_token_id: an integer or a list of integers.
  std::vector<int> get_id_list(const char* key) const {
    const json& v = required(key);
    const char* want = "an integer or a list of integers";
    if (!v.is_array()) return {to_int(key, v, want)};
    std::vector<int> out;
    for (const json& e : v) out.push_back(to_int(key, e, want));
    return out;
  }
};

void check_architecture(const Keys& k) {
  if (k.has("architectures")) {
    const json& a = k.obj["architectures"];
    if (!a.is_array()) k.wrong_type("architectures", "a list of strings");
    std::string first;
    for (const json& e : a) {
      if (!e.is_string()) k.wrong_type("architectures", "a list of strings");
      if (e.get<std::string>() == "LlamaForCausalLM") return;
      if (first.empty()) first = e.get<std::string>();
    }
    // A Llama body under another head (LlamaForSequenceClassification, LlamaModel) has no lm_head to decode with.
    if (!first.empty())
      fail(k.file, ": unsupported architecture '", printable(first), "' (supported: LlamaForCausalLM)");
  }
  std::string type = k.get_string("model_type", "");
  if (type != "llama")
    fail(k.file, ": unsupported architecture: model_type '", printable(type),
         "' with no LlamaForCausalLM in 'architectures' (supported: LlamaForCausalLM)");
}

// The rope type of a rope_scaling / rope_parameters object: "rope_type", or legacy "type".
void parse_rope_type(const Keys& k, RopeScaling* s) {
  std::string type = k.has("rope_type") ? k.get_string("rope_type", "") : k.get_string("type", "default");
  if (type == "default") return;
  if (type != "llama3")
    fail(k.file, ": unsupported rope type '", printable(type), "' in '", k.prefix.substr(0, k.prefix.size() - 1),
         "' (supported: default, llama3)");
  s->type = "llama3";
  s->factor = float(k.get_number("factor"));
  s->low_freq_factor = float(k.get_number("low_freq_factor"));
  s->high_freq_factor = float(k.get_number("high_freq_factor"));
  s->original_max_position_embeddings = k.get_int("original_max_position_embeddings");
}

// Classic form: top-level rope_theta + rope_scaling (may be null). transformers 5: rope_parameters {rope_type,
// rope_theta, factor, ...}.
void parse_rope(const Keys& k, ModelConfig* c) {
  const double top_theta = k.get_number("rope_theta", 10000.0);
  if (k.has("rope_parameters")) {
    const json& rp = k.obj["rope_parameters"];
    if (!rp.is_object()) k.wrong_type("rope_parameters", "an object");
    Keys sub{rp, k.file, "rope_parameters."};
    c->rope_theta = checked_rope_theta(sub.get_number("rope_theta", top_theta), k.file,
                                       sub.has("rope_theta") ? "rope_parameters.rope_theta" : "rope_theta");
    parse_rope_type(sub, &c->rope_scaling);
    return;
  }
  c->rope_theta = checked_rope_theta(top_theta, k.file, "rope_theta");
  if (k.has("rope_scaling")) {
    const json& rs = k.obj["rope_scaling"];
    if (!rs.is_object()) k.wrong_type("rope_scaling", "an object or null");
    parse_rope_type(Keys{rs, k.file, "rope_scaling."}, &c->rope_scaling);
  }
}

void refuse_unsupported(const Keys& k) {
  if (k.get_bool("attention_bias", false))
    fail(k.file, ": attention_bias: true is not supported (Llama projections without bias only)");
  if (k.get_bool("mlp_bias", false)) fail(k.file, ": mlp_bias: true is not supported (Llama MLP without bias only)");
  std::string act = k.get_string("hidden_act", "silu");
  if (act != "silu") fail(k.file, ": hidden_act '", printable(act), "' is not supported (supported: silu)");
}

void apply_generation_config(const std::string& path, ModelConfig* c) {
  json g = read_json_file(path);
  Keys k{g, path, ""};
  if (k.has("bos_token_id")) c->bos_id = k.get_int("bos_token_id");
  if (k.has("eos_token_id")) c->eos_ids = k.get_id_list("eos_token_id");
}

}  // namespace

ModelConfig load_hf_config(const std::string& config_path) {
  json j = read_json_file(config_path);
  Keys k{j, config_path, ""};
  check_architecture(k);
  refuse_unsupported(k);

  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.dim = k.get_int("hidden_size");
  c.hidden_dim = k.get_int("intermediate_size");
  c.n_layers = k.get_int("num_hidden_layers");
  c.n_heads = k.get_int("num_attention_heads");
  c.n_kv_heads = k.get_int("num_key_value_heads", c.n_heads);
  if (k.has("head_dim")) {
    c.head_dim = k.get_int("head_dim");
  } else {
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0)
      fail(config_path, ": hidden_size ", c.dim, " is not a multiple of num_attention_heads ", c.n_heads,
           " and head_dim is not given");
    c.head_dim = c.dim / c.n_heads;
  }
  c.vocab_size = k.get_int("vocab_size");
  c.max_seq_len = k.get_int("max_position_embeddings");
  c.norm_eps = checked_norm_eps(k.get_number("rms_norm_eps", 1e-6), config_path, "rms_norm_eps");
  c.tied_embeddings = k.get_bool("tie_word_embeddings", false);
  c.bos_id = k.get_int("bos_token_id", 1);
  c.eos_ids = k.has("eos_token_id") ? k.get_id_list("eos_token_id") : std::vector<int>{2};
  parse_rope(k, &c);

  fs::path gen = fs::path(config_path).parent_path() / "generation_config.json";
  if (fs::is_regular_file(gen)) apply_generation_config(gen.string(), &c);
  c.validate(config_path);
  return c;
}

std::vector<HfWeight> hf_weight_table(const ModelConfig& c, ModelWeights& w) {
  using namespace synth;
  const int64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), ffn = c.hidden_dim, hd = c.head_dim;
  std::vector<HfWeight> t;
  t.push_back({"model.embed_tokens.weight", &w.embedding, WeightKind::Embedding, c.vocab_size, dim, 0, kEmbeddingId});
  w.layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](const char* name, HostTensor* slot, WeightKind kind, int64_t rows, int64_t cols, int rope,
                   int role) { t.push_back({p + name, slot, kind, rows, cols, rope, layer_tensor_id(l, role)}); };
    add("input_layernorm.weight", &L.attn_norm, WeightKind::Norm, 1, dim, 0, kAttnNorm);
    add("self_attn.q_proj.weight", &L.wq, WeightKind::Linear, q, dim, int(hd), kWq);
    add("self_attn.k_proj.weight", &L.wk, WeightKind::Linear, kv, dim, int(hd), kWk);
    add("self_attn.v_proj.weight", &L.wv, WeightKind::Linear, kv, dim, 0, kWv);
    add("self_attn.o_proj.weight", &L.wo, WeightKind::Linear, dim, q, 0, kWo);
    add("post_attention_layernorm.weight", &L.ffn_norm, WeightKind::Norm, 1, dim, 0, kFfnNorm);
    add("mlp.gate_proj.weight", &L.w_gate, WeightKind::Linear, ffn, dim, 0, kWGate);
    add("mlp.up_proj.weight", &L.w_up, WeightKind::Linear, ffn, dim, 0, kWUp);
    add("mlp.down_proj.weight", &L.w_down, WeightKind::Linear, dim, ffn, 0, kWDown);
  }
  t.push_back({"model.norm.weight", &w.final_norm, WeightKind::Norm, 1, dim, 0, kFinalNormId});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", &w.head, WeightKind::Linear, c.vocab_size, dim, 0, kHeadId});
  return t;
}

}  // namespace llm
