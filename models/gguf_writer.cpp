// write_gguf (see models/gguf_writer.h): metadata and tensor table first (every size is known from the types), then
// the tensors one at a time, each quantized or converted just before it is written.
#include "models/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "models/gguf.h"  // gguf_value::Type, GgufValue, GgmlType, kGgufDefaultAlignment, ggml_type_name
#include "models/quant.h"

namespace llm {

namespace {

using namespace gguf_value;  // U8 .. F64

constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION: the block layouts of today's ggml
// tokenizer.ggml.token_type values (llama.cpp's, = sentencepiece's piece types).
constexpr int32_t kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUnused = 5, kTokByte = 6;

// ---- metadata ----------------------------------------------------------------------------------------------------

using Kv = std::pair<std::string, GgufValue>;

GgufValue u32_value(uint64_t v) {
  GgufValue x;
  x.type = U32;
  x.u = v;
  return x;
}
GgufValue f32_value(float v) {
  GgufValue x;
  x.type = F32;
  x.f = v;
  return x;
}
GgufValue bool_value(bool v) {
  GgufValue x;
  x.type = BOOL;
  x.u = v ? 1 : 0;
  return x;
}
GgufValue string_value(const std::string& v) {
  GgufValue x;
  x.type = STRING;
  x.s = v;
  return x;
}
GgufValue array_value(uint32_t elem_type, size_t n) {
  GgufValue x;
  x.type = ARRAY;
  x.array_type = elem_type;
  x.array_len = n;
  return x;
}

// llama.cpp's llama_ftype for general.file_type (informational: llama.cpp prints it, loads regardless).
uint32_t file_type_of(const std::optional<QuantizeScheme>& scheme, const std::map<uint32_t, int>& matrix_types) {
  if (scheme) {
    if (scheme->q4_k_m) return 15;  // MOSTLY_Q4_K_M
    switch (scheme->type) {
      case GgmlQuantType::Q8_0: return 7;
      case GgmlQuantType::Q4_0: return 2;
      case GgmlQuantType::Q4_K: return 14;  // MOSTLY_Q4_K_S: the nearest "mostly Q4_K"
      case GgmlQuantType::Q6_K: return 18;
      default: break;
    }
  }
  uint32_t most = 0;
  int count = -1;
  for (const auto& [type, n] : matrix_types)
    if (n > count) most = type, count = n;
  switch (most) {
    case 0: return 0;     // ALL_F32
    case 1: return 1;     // MOSTLY_F16
    case 30: return 32;   // MOSTLY_BF16
    case 2: return 2;     // Q4_0
    case 3: return 3;     // Q4_1
    case 8: return 7;     // Q8_0
    case 6: return 8;     // Q5_0
    case 7: return 9;     // Q5_1
    case 12: return matrix_types.count(14) ? 15 : 14;  // Q4_K_M when Q6_K is mixed in, else Q4_K_S
    case 14: return 18;   // Q6_K
    default: return 0;
  }
}

// The vocabulary as written: padded to vocab_size with "[PADn]" (unused), the model's own BOS/EOS.
EmbeddedVocab padded_vocab(const EmbeddedVocab& in, const ModelConfig& c, const std::string& path) {
  EmbeddedVocab v = in;
  if (v.model != "llama" && v.model != "gpt2")
    fail(path, ": vocabulary of ", v.source, ": tokenizer model '", printable(v.model),
         "' cannot be written (expected llama or gpt2)");
  if (v.tokens.empty()) fail(path, ": vocabulary of ", v.source, " has no tokens");
  if (v.tokens.size() > size_t(c.vocab_size))
    fail(path, ": vocabulary of ", v.source, " has ", v.tokens.size(), " tokens, more than the model's ",
         c.vocab_size, " embedding rows");
  const size_t n = v.tokens.size();
  if (!v.scores.empty() && v.scores.size() != n)
    fail(path, ": vocabulary of ", v.source, ": ", v.scores.size(), " scores for ", n, " tokens");
  if (!v.token_types.empty() && v.token_types.size() != n)
    fail(path, ": vocabulary of ", v.source, ": ", v.token_types.size(), " token types for ", n, " tokens");
  if (v.token_types.empty()) v.token_types.assign(n, kTokNormal);
  if (v.model == "llama" && v.scores.empty()) v.scores.assign(n, 0.0f);
  for (size_t i = n; i < size_t(c.vocab_size); ++i) {
    v.tokens.push_back("[PAD" + std::to_string(i - n + 1) + "]");
    v.token_types.push_back(kTokUnused);
    if (!v.scores.empty()) v.scores.push_back(-1000.0f);
  }
  if (c.bos_id >= 0) v.bos_id = c.bos_id;
  if (!c.eos_ids.empty()) v.eos_id = c.eos_ids[0];
  return v;
}

void add_vocab(std::vector<Kv>& kv, const EmbeddedVocab& v, const std::string& chat_template) {
  kv.emplace_back("tokenizer.ggml.model", string_value(v.model));
  if (!v.pre.empty()) kv.emplace_back("tokenizer.ggml.pre", string_value(v.pre));
  GgufValue tokens = array_value(STRING, v.tokens.size());
  tokens.strings = v.tokens;
  kv.emplace_back("tokenizer.ggml.tokens", std::move(tokens));
  if (!v.scores.empty()) {
    GgufValue scores = array_value(F32, v.scores.size());
    scores.floats.assign(v.scores.begin(), v.scores.end());
    kv.emplace_back("tokenizer.ggml.scores", std::move(scores));
  }
  GgufValue types = array_value(I32, v.token_types.size());
  types.ints.assign(v.token_types.begin(), v.token_types.end());
  kv.emplace_back("tokenizer.ggml.token_type", std::move(types));
  if (!v.merges.empty()) {
    GgufValue merges = array_value(STRING, v.merges.size());
    merges.strings = v.merges;
    kv.emplace_back("tokenizer.ggml.merges", std::move(merges));
  }
  const std::pair<const char*, int> ids[] = {{"tokenizer.ggml.bos_token_id", v.bos_id},
                                             {"tokenizer.ggml.eos_token_id", v.eos_id},
                                             {"tokenizer.ggml.unknown_token_id", v.unk_id},
                                             {"tokenizer.ggml.padding_token_id", v.pad_id},
                                             {"tokenizer.ggml.eot_token_id", v.eot_id}};
  for (const auto& [key, id] : ids)
    if (id >= 0 && size_t(id) < v.tokens.size()) kv.emplace_back(key, u32_value(uint64_t(id)));
  kv.emplace_back("tokenizer.ggml.add_bos_token", bool_value(v.add_bos));
  if (v.model == "llama") kv.emplace_back("tokenizer.ggml.add_space_prefix", bool_value(v.add_space_prefix));
  if (!chat_template.empty()) kv.emplace_back("tokenizer.chat_template", string_value(chat_template));
}

// Llama 3 scaling as llama.cpp's converter ships it: one divisor per rotary pair (rope_freqs.weight), the scaled
// frequency being the plain one divided by it. Computed from rope_inv_freq itself, so our loader's frequencies (plain
// / factor) differ from the in-memory model's by the float rounding of the factor alone.
std::vector<float> rope_factors_of(const ModelConfig& c) {
  if (c.rope_scaling.type == "none") return c.rope_freq_factors;
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling();
  plain.rope_freq_factors.clear();
  const std::vector<float> scaled = rope_inv_freq(c), base = rope_inv_freq(plain);
  std::vector<float> f(scaled.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(double(base[i]) / double(scaled[i]));
  return f;
}

// ---- the tensor table ----------------------------------------------------------------------------------------------

struct Entry {
  std::string name;                  // GGUF name
  const HostTensor* src = nullptr;   // null for rope_freqs
  std::vector<float> values;         // rope_freqs
  bool one_d = false;                // written with one dimension (norms, rope_freqs)
  uint32_t type = 0;                 // ggml type id on disk
  bool quantize = false;             // produced by quantize_tensor(src, type)
  int64_t rows = 1, cols = 0;
  uint64_t nbytes = 0, offset = 0;
};

uint32_t float_type_id(DType d) {
  const GgmlType t = d == DType::F32 ? GgmlType::F32 : d == DType::F16 ? GgmlType::F16 : GgmlType::BF16;
  return uint32_t(t);
}

uint64_t bytes_of(uint32_t type, int64_t rows, int64_t cols) {
  if (is_ggml_quant_type(type)) return uint64_t(rows) * ggml_quant_row_bytes(GgmlQuantType(type), cols);
  return uint64_t(rows) * uint64_t(cols) * (type == uint32_t(GgmlType::F32) ? 4 : 2);
}

std::string type_label(uint32_t type) {
  return is_ggml_quant_type(type) ? ggml_quant_name(GgmlQuantType(type)) : ggml_type_name(type);
}

std::vector<Entry> tensor_table(const Model& m, const std::vector<QuantizeTarget>& plan) {
  std::unordered_map<const HostTensor*, uint32_t> planned;
  for (const QuantizeTarget& q : plan) planned[q.tensor] = q.type;
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const bool tied = c.tied_embeddings || w.head.empty();
  std::vector<Entry> out;
  auto matrix = [&](const std::string& name, const HostTensor& t, int64_t rows, int64_t cols) {
    if (t.rows != rows || t.cols != cols)
      fail(m.source, ": tensor ", t.name, " is [", t.rows, ", ", t.cols, "], the config says [", rows, ", ", cols, "]");
    Entry e;
    e.name = name;
    e.src = &t;
    e.rows = rows;
    e.cols = cols;
    const auto it = planned.find(&t);
    e.quantize = it != planned.end();
    e.type = e.quantize ? it->second : t.quant ? t.quant : float_type_id(t.dtype);
    out.push_back(std::move(e));
  };
  auto vector = [&](const std::string& name, const HostTensor& t, int64_t n) {
    if (t.numel() != n) fail(m.source, ": tensor ", t.name, " has ", t.numel(), " elements, the config says ", n);
    if (t.quant) fail(m.source, ": tensor ", t.name, " is quantized; a 1-D weight must be a float type");
    Entry e;
    e.name = name;
    e.src = &t;
    e.one_d = true;
    e.cols = n;
    e.type = uint32_t(GgmlType::F32);
    out.push_back(std::move(e));
  };
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), hid = c.hidden_dim;
  matrix("token_embd.weight", w.embedding, c.vocab_size, d);
  const std::vector<float> factors = rope_factors_of(c);
  if (!factors.empty()) {
    Entry e;
    e.name = "rope_freqs.weight";
    e.values = factors;
    e.one_d = true;
    e.cols = int64_t(factors.size());
    e.type = uint32_t(GgmlType::F32);
    out.push_back(std::move(e));
  }
  if (w.layers.size() != size_t(c.n_layers))
    fail(m.source, ": ", w.layers.size(), " layers of weights, the config says ", c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& lw = w.layers[size_t(l)];
    vector(p + "attn_norm.weight", lw.attn_norm, d);
    matrix(p + "attn_q.weight", lw.wq, q, d);
    matrix(p + "attn_k.weight", lw.wk, kv, d);
    matrix(p + "attn_v.weight", lw.wv, kv, d);
    matrix(p + "attn_output.weight", lw.wo, d, q);
    vector(p + "ffn_norm.weight", lw.ffn_norm, d);
    matrix(p + "ffn_gate.weight", lw.w_gate, hid, d);
    matrix(p + "ffn_up.weight", lw.w_up, hid, d);
    matrix(p + "ffn_down.weight", lw.w_down, d, hid);
  }
  vector("output_norm.weight", w.final_norm, d);
  if (!tied) matrix("output.weight", w.head, c.vocab_size, d);
  uint64_t at = 0;
  for (Entry& e : out) {
    e.nbytes = bytes_of(e.type, e.rows, e.cols);
    e.offset = at;
    at = (at + e.nbytes + kGgufDefaultAlignment - 1) / kGgufDefaultAlignment * kGgufDefaultAlignment;
  }
  return out;
}

// ---- bytes -------------------------------------------------------------------------------------------------------

class Out {
 public:
  explicit Out(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) fail("cannot write ", path, ": ", std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, size_t(8) << 20);
  }
  ~Out() {
    if (f_) std::fclose(f_);
    if (!done_) std::remove(path_.c_str());
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;

  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("cannot write ", path_, ": ", std::strerror(errno));
    pos_ += n;
  }
  template <typename T>
  void scalar(T v) {
    bytes(&v, sizeof(T));  // little-endian hosts only, like the reader
  }
  void str(const std::string& s) {
    scalar<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[64] = {};
    while (pos_ % alignment) bytes(zeros, size_t(std::min<uint64_t>(sizeof zeros, alignment - pos_ % alignment)));
  }
  uint64_t pos() const { return pos_; }
  void finish() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("cannot write ", path_, ": ", std::strerror(errno));
    done_ = true;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t pos_ = 0;
  bool done_ = false;
};

void write_value(Out& o, const GgufValue& v) {
  switch (v.type) {
    case U32: o.scalar<uint32_t>(uint32_t(v.u)); return;
    case F32: o.scalar<float>(float(v.f)); return;
    case BOOL: o.scalar<uint8_t>(v.u ? 1 : 0); return;
    case STRING: o.str(v.s); return;
    case ARRAY:
      o.scalar<uint32_t>(v.array_type);
      o.scalar<uint64_t>(v.array_len);
      if (v.array_type == STRING)
        for (const std::string& s : v.strings) o.str(s);
      else if (v.array_type == I32)
        for (int64_t x : v.ints) o.scalar<int32_t>(int32_t(x));
      else if (v.array_type == F32)
        for (double x : v.floats) o.scalar<float>(float(x));
      else
        fail("GGUF writer: array element type ", v.array_type, " not supported");
      return;
    default: fail("GGUF writer: value type ", v.type, " not supported");
  }
}

// Runs fn(r0, r1) over [0, rows) split across `threads`.
template <typename F>
void parallel_rows(int64_t rows, int threads, F fn) {
  const int n = std::max(1, std::min<int>(threads, int((rows + 15) / 16)));
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(fn, rows * i / n, rows * (i + 1) / n);
  fn(int64_t(0), rows / n);
  for (auto& t : pool) t.join();
}

// One tensor's data in file row order = engine row order.
void write_tensor(Out& o, const Entry& e, int threads, QuantSearch search) {
  if (!e.src) {  // rope_freqs
    o.bytes(e.values.data(), e.values.size() * 4);
    return;
  }
  const HostTensor& t = *e.src;
  if (e.one_d) {
    const std::vector<float> v = t.to_f32();
    o.bytes(v.data(), v.size() * 4);
    return;
  }
  if (e.quantize) {
    const HostTensor q = quantize_tensor(t, e.type, threads, search);
    o.bytes(q.data, q.nbytes());
    return;
  }
  if (!t.synthetic) {  // stored bytes as they are (quantized blocks or floats), rows through file_row
    const size_t rb = t.row_bytes();
    const uint8_t* base = static_cast<const uint8_t*>(t.data);
    if (!t.rope_head_dim) return o.bytes(base, rb * size_t(t.rows));
    for (int64_t r = 0; r < t.rows; ++r) o.bytes(base + size_t(t.file_row(r)) * rb, rb);
    return;
  }
  // Synthetic: generated as BF16 (what the fill is exactly), in chunks of rows, in parallel.
  const int64_t chunk = std::max<int64_t>(1, (int64_t(32) << 20) / (2 * t.cols));
  std::vector<uint16_t> buf;
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, t.rows - r0);
    buf.resize(size_t(n * t.cols));
    parallel_rows(n, threads, [&](int64_t a, int64_t b) {
      if (b > a) t.read_rows_bf16(r0 + a, b - a, buf.data() + a * t.cols);
    });
    o.bytes(buf.data(), buf.size() * 2);
  }
}

}  // namespace

EmbeddedVocab stand_in_vocab(int vocab_size, int bos_id, int eos_id) {
  if (vocab_size < 4) fail("a stand-in vocabulary needs at least 4 tokens, the model has ", vocab_size);
  EmbeddedVocab v;
  v.source = "stand-in vocabulary";
  v.model = "llama";
  const size_t n = size_t(vocab_size);
  v.tokens.assign(n, "");
  v.token_types.assign(n, kTokNormal);
  v.scores.assign(n, 0.0f);
  if (bos_id < 0 || bos_id >= vocab_size) bos_id = 1;
  if (eos_id < 0 || eos_id >= vocab_size || eos_id == bos_id) eos_id = bos_id == 2 ? 1 : 2;
  v.tokens[size_t(bos_id)] = "<s>";
  v.token_types[size_t(bos_id)] = kTokControl;
  v.tokens[size_t(eos_id)] = "</s>";
  v.token_types[size_t(eos_id)] = kTokControl;
  size_t next = 0;
  auto free_id = [&]() {
    while (next < n && !v.tokens[next].empty()) ++next;
    return next;
  };
  const size_t unk = free_id();
  v.tokens[unk] = "<unk>";
  v.token_types[unk] = kTokUnknown;
  const size_t n_bytes = std::min<size_t>(256, n - 3);
  for (size_t b = 0; b < n_bytes; ++b) {
    const size_t id = free_id();
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", unsigned(b));
    v.tokens[id] = piece;
    v.token_types[id] = kTokByte;
  }
  for (size_t id = 0; id < n; ++id)
    if (v.tokens[id].empty()) {
      v.tokens[id] = "\xE2\x96\x81t" + std::to_string(id);  // "▁tN": a word piece, unique
      v.scores[id] = -float(id);
    }
  v.bos_id = bos_id;
  v.eos_id = eos_id;
  v.unk_id = int(unk);
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

GgufWriteSummary write_gguf(const Model& model, const EmbeddedVocab* vocab, const std::string& path,
                            const GgufWriteOptions& opt) {
  const ModelConfig& c = model.config;
  c.validate(model.source);
  const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  GgufWriteSummary summary;
  std::vector<QuantizeTarget> plan;
  if (opt.quantize) {
    plan = quantize_plan(model, *opt.quantize);
    summary.fallbacks = quantize_fallbacks(plan);
  }
  const std::vector<Entry> table = tensor_table(model, plan);

  const EmbeddedVocab stand_in = vocab ? EmbeddedVocab() :
      stand_in_vocab(c.vocab_size, c.bos_id, c.eos_ids.empty() ? -1 : c.eos_ids[0]);
  const EmbeddedVocab v = padded_vocab(vocab ? *vocab : stand_in, c, path);
  summary.vocab = std::string(vocab ? "" : "stand-in ") + v.model + " (" + std::to_string(v.tokens.size()) + " tokens)";

  std::map<uint32_t, int> matrix_types;
  bool any_quant = false;
  for (const Entry& e : table) {
    summary.tensors_by_type[type_label(e.type)]++;
    if (!e.one_d) matrix_types[e.type]++;
    any_quant |= is_ggml_quant_type(e.type);
  }

  std::vector<Kv> kv;
  kv.emplace_back("general.architecture", string_value("llama"));
  kv.emplace_back("general.name", string_value(opt.name.empty() ? model.source : opt.name));
  kv.emplace_back("general.alignment", u32_value(kGgufDefaultAlignment));
  kv.emplace_back("general.file_type", u32_value(file_type_of(opt.quantize, matrix_types)));
  if (any_quant) kv.emplace_back("general.quantization_version", u32_value(kQuantizationVersion));
  kv.emplace_back("llama.context_length", u32_value(uint64_t(c.max_seq_len)));
  kv.emplace_back("llama.embedding_length", u32_value(uint64_t(c.dim)));
  kv.emplace_back("llama.block_count", u32_value(uint64_t(c.n_layers)));
  kv.emplace_back("llama.feed_forward_length", u32_value(uint64_t(c.hidden_dim)));
  kv.emplace_back("llama.attention.head_count", u32_value(uint64_t(c.n_heads)));
  kv.emplace_back("llama.attention.head_count_kv", u32_value(uint64_t(c.n_kv_heads)));
  if (c.dim % c.n_heads != 0 || c.head_dim != c.dim / c.n_heads) {
    kv.emplace_back("llama.attention.key_length", u32_value(uint64_t(c.head_dim)));
    kv.emplace_back("llama.attention.value_length", u32_value(uint64_t(c.head_dim)));
  }
  kv.emplace_back("llama.attention.layer_norm_rms_epsilon", f32_value(c.norm_eps));
  kv.emplace_back("llama.rope.freq_base", f32_value(c.rope_theta));
  kv.emplace_back("llama.rope.dimension_count", u32_value(uint64_t(c.head_dim)));
  kv.emplace_back("llama.vocab_size", u32_value(uint64_t(c.vocab_size)));
  add_vocab(kv, v, model.chat_template);

  Out o(path);
  o.bytes("GGUF", 4);
  o.scalar<uint32_t>(kGgufVersion);
  o.scalar<uint64_t>(table.size());
  o.scalar<uint64_t>(kv.size());
  for (const Kv& x : kv) {
    o.str(x.first);
    o.scalar<uint32_t>(x.second.type);
    write_value(o, x.second);
  }
  for (const Entry& e : table) {
    o.str(e.name);
    o.scalar<uint32_t>(e.one_d ? 1 : 2);
    o.scalar<uint64_t>(uint64_t(e.cols));  // innermost first
    if (!e.one_d) o.scalar<uint64_t>(uint64_t(e.rows));
    o.scalar<uint32_t>(e.type);
    o.scalar<uint64_t>(e.offset);
  }
  o.pad_to(kGgufDefaultAlignment);
  const uint64_t data_start = o.pos();
  const uint64_t total = table.empty() ? 0 : table.back().offset + table.back().nbytes;
  for (const Entry& e : table) {
    o.pad_to(kGgufDefaultAlignment);
    if (o.pos() - data_start != e.offset) fail("GGUF writer: ", e.name, " landed at the wrong offset");
    const uint64_t before = o.pos();
    write_tensor(o, e, threads, opt.quantize ? opt.quantize->search : QuantSearch::kReference);
    if (o.pos() - before != e.nbytes)
      fail("GGUF writer: ", e.name, " wrote ", o.pos() - before, " bytes, expected ", e.nbytes);
    if (opt.progress) opt.progress(e.name, e.offset + e.nbytes, total);
  }
  summary.file_bytes = o.pos();
  o.finish();
  return summary;
}

}  // namespace llm
