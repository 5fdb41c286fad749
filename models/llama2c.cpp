// llama2.c checkpoint loader (.bin): a 7-int32 header, then FP32 weights grouped by kind across layers, memory-mapped.
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "models/mapped_file.h"
#include "models/model.h"

namespace llm {

namespace {

// Header of run.c's Config, in file order.
struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// Rejects values that cannot describe a model (or would overflow size arithmetic), naming the field.
void check_header(const std::string& path, const Header& h) {
  struct Field {
    const char* name;
    int64_t value, max;
  };
  const int64_t vocab = h.vocab_size < 0 ? -int64_t(h.vocab_size) : h.vocab_size;  // negative = untied
  const Field fields[] = {{"dim", h.dim, 1 << 20},
                          {"hidden_dim", h.hidden_dim, 1 << 22},
                          {"n_layers", h.n_layers, 4096},
                          {"n_heads", h.n_heads, 4096},
                          {"n_kv_heads", h.n_kv_heads, 4096},
                          {"vocab_size", vocab, 1 << 24},
                          {"seq_len", h.seq_len, 1 << 24}};
  for (const Field& f : fields)
    if (f.value <= 0 || f.value > f.max)
      fail(path, ": implausible llama2.c header: ", f.name, " = ", f.value, " (expected 1..", f.max, ")");
  if (h.dim % h.n_heads != 0)
    fail(path, ": llama2.c header: dim (", h.dim, ") is not a multiple of n_heads (", h.n_heads, ")");
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0)
    fail(path, ": llama2.c header: n_heads (", h.n_heads, ") is not a multiple of n_kv_heads (", h.n_kv_heads, ")");
}

// The header's own field names, for ModelConfig::validate's messages (head_dim and the rest are not in the file).
const ConfigKeys kLlama2cConfigKeys = [] {
  ConfigKeys k;
  k.dim = "dim";
  k.hidden_dim = "hidden_dim";
  k.n_layers = "n_layers";
  k.n_heads = "n_heads";
  k.n_kv_heads = "n_kv_heads";
  k.head_dim = "the head size (dim / n_heads)";
  k.vocab_size = "vocab_size";
  k.max_seq_len = "seq_len";
  return k;
}();

ModelConfig config_from(const Header& h) {
  ModelConfig c;
  c.architecture = "llama (llama2.c)";
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  c.max_seq_len = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tied_embeddings = h.vocab_size > 0;  // run.c: a negative vocab_size means an untied classifier
  c.bos_id = 1;
  c.eos_ids = {2};
  return c;
}

// Walks the weight section in file order, handing out F32 views of [rows, cols].
class Cursor {
 public:
  Cursor(std::shared_ptr<const MappedFile> m, size_t offset) : m_(std::move(m)), offset_(offset) {}
  HostTensor take(const std::string& name, int64_t rows, int64_t cols) {
    HostTensor t;
    t.name = name;
    t.dtype = DType::F32;
    t.rows = rows;
    t.cols = cols;
    t.data = m_->data() + offset_;
    t.owner = m_;
    offset_ += size_t(rows * cols) * 4;
    return t;
  }
  void skip(int64_t floats) { offset_ += size_t(floats) * 4; }
  size_t offset() const { return offset_; }

 private:
  std::shared_ptr<const MappedFile> m_;
  size_t offset_;
};

int64_t expected_file_bytes(const ModelConfig& c) {
  const int64_t d = c.dim, hd = c.head_dim, L = c.n_layers, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  int64_t floats = int64_t(c.vocab_size) * d            // embedding
                   + L * d * 2                          // attention and ffn norms
                   + L * (q * d + 2 * kv * d + d * q)  // wq, wk, wv, wo
                   + L * 3 * h * d                      // w1, w2, w3
                   + d                                  // final norm
                   + int64_t(c.max_seq_len) * hd;       // the two RoPE tables, seq_len * head_dim / 2 each
  if (!c.tied_embeddings) floats += int64_t(c.vocab_size) * d;
  return int64_t(sizeof(Header)) + floats * 4;
}

std::string tokenizer_beside(const std::string& path, int vocab) {
  auto slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  // llama2.c ships custom vocabularies as tok<vocab>.{bin,model} beside the checkpoint.
  for (std::string name : {std::string("tokenizer.model"), "tok" + std::to_string(vocab) + ".model"}) {
    struct stat st {};
    if (::stat((dir + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) return dir + name;
  }
  return "";
}

}  // namespace

Model load_llama2c(const std::string& path) {
  auto map = MappedFile::open(path);
  if (map->size() < sizeof(Header))
    fail(path, ": file too small for a llama2.c header: expected at least ", sizeof(Header), " bytes, found ",
         map->size());
  Header h;
  std::memcpy(&h, map->data(), sizeof(Header));
  check_header(path, h);

  Model m;
  m.source = path;
  m.format = "llama2c";
  m.config = config_from(h);
  m.config.validate(path, kLlama2cConfigKeys);
  const ModelConfig& c = m.config;

  const int64_t want = expected_file_bytes(c);
  if (int64_t(map->size()) != want)
    fail(path, ": llama2.c checkpoint size mismatch: expected ", want, " bytes for the header's shapes (dim ", c.dim,
         ", hidden_dim ", c.hidden_dim, ", n_layers ", c.n_layers, ", vocab ", c.vocab_size, ", seq_len ",
         c.max_seq_len, ", ", c.tied_embeddings ? "tied" : "untied", " classifier), found ", map->size());

  const int64_t d = c.dim, L = c.n_layers, q = c.q_dim(), kv = c.kv_dim(), hid = c.hidden_dim;
  Cursor cur(map, sizeof(Header));
  ModelWeights& w = m.weights;
  w.layers.resize(size_t(L));
  auto per_layer = [&](const char* name, HostTensor LayerWeights::*field, int64_t rows, int64_t cols) {
    for (int64_t l = 0; l < L; ++l)
      w.layers[size_t(l)].*field = cur.take("layers." + std::to_string(l) + "." + name, rows, cols);
  };
  w.embedding = cur.take("token_embedding_table", c.vocab_size, d);
  per_layer("rms_att_weight", &LayerWeights::attn_norm, 1, d);
  per_layer("wq", &LayerWeights::wq, q, d);
  per_layer("wk", &LayerWeights::wk, kv, d);
  per_layer("wv", &LayerWeights::wv, kv, d);
  per_layer("wo", &LayerWeights::wo, d, q);
  per_layer("rms_ffn_weight", &LayerWeights::ffn_norm, 1, d);
  per_layer("w1", &LayerWeights::w_gate, hid, d);
  per_layer("w2", &LayerWeights::w_down, d, hid);
  per_layer("w3", &LayerWeights::w_up, hid, d);
  w.final_norm = cur.take("rms_final_weight", 1, d);
  cur.skip(int64_t(c.max_seq_len) * c.head_dim);  // freq_cis_real and freq_cis_imag: recomputed by the engine
  w.head = c.tied_embeddings ? w.embedding : cur.take("wcls", c.vocab_size, d);

  m.tokenizer_path = tokenizer_beside(path, c.vocab_size);
  return m;
}

}  // namespace llm
