// GGUF parsing and validation (layout in gguf.h) and load_gguf: a llama GGUF as a Model, every tensor a view into
// the mapping (quantized ones as their GGML blocks, HostTensor::quant).
#include "models/gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "models/quant.h"
#include "models/model.h"

namespace llm {

std::string ggml_type_name(uint32_t type) {
  static const char* const names[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",   "Q4_2",   "Q4_3",   "Q5_0",   "Q5_1",   "Q8_0",  "Q8_1",  "Q2_K",
      "Q3_K",    "Q4_K",   "Q5_K",    "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
      "IQ3_S",   "IQ2_S",  "IQ4_XS",  "I8",     "I16",    "I32",    "I64",    "F64",    "IQ1_M", "BF16"};
  if (type < sizeof(names) / sizeof(names[0])) return names[type];
  return "type " + std::to_string(type);
}

namespace {

using namespace gguf_value;  // U8 .. F64
constexpr uint64_t kMaxDims = 4;      // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;     // nested arrays are legal but never deep in practice
constexpr uint64_t kMaxElements = uint64_t(1) << 40;

// Bounds-checked little-endian cursor over the mapping; every failure names the file and what was being read.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* p, size_t size) : path_(path), p_(p), size_(size) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  const uint8_t* take(uint64_t n, const std::string& what) {
    if (n > left())
      fail(path_, ": GGUF truncated reading ", what, ": need ", n, " bytes at offset ", pos_, ", file has ", size_);
    const uint8_t* p = p_ + pos_;
    pos_ += size_t(n);
    return p;
  }
  template <typename T>
  T scalar(const std::string& what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = scalar<uint64_t>(what + " length");
    if (n > left())
      fail(path_, ": GGUF ", what, ": string length ", n, " runs past the end of the file (", left(),
           " bytes left at offset ", pos_, ")");
    const uint8_t* s = take(n, what);
    return std::string(reinterpret_cast<const char*>(s), size_t(n));
  }

 private:
  const std::string& path_;
  const uint8_t* p_;
  size_t size_, pos_ = 0;
};

size_t scalar_size(uint32_t t) {
  switch (t) {
    case U8: case I8: case BOOL: return 1;
    case U16: case I16: return 2;
    case U32: case I32: case F32: return 4;
    case U64: case I64: case F64: return 8;
    default: return 0;
  }
}

void read_scalar(Reader& r, uint32_t t, GgufValue* v, const std::string& what) {
  switch (t) {
    case U8: v->u = r.scalar<uint8_t>(what); break;
    case BOOL: v->u = r.scalar<uint8_t>(what) != 0; break;
    case U16: v->u = r.scalar<uint16_t>(what); break;
    case U32: v->u = r.scalar<uint32_t>(what); break;
    case U64: v->u = r.scalar<uint64_t>(what); break;
    case I8: v->i = r.scalar<int8_t>(what); break;
    case I16: v->i = r.scalar<int16_t>(what); break;
    case I32: v->i = r.scalar<int32_t>(what); break;
    case I64: v->i = r.scalar<int64_t>(what); break;
    case F32: v->f = r.scalar<float>(what); break;
    case F64: v->f = r.scalar<double>(what); break;
  }
  if (t == U8 || t == U16 || t == U32 || t == U64 || t == BOOL) v->i = v->u > uint64_t(INT64_MAX) ? -1 : int64_t(v->u);
  if (t == I8 || t == I16 || t == I32 || t == I64) v->u = v->i < 0 ? 0 : uint64_t(v->i);
}

void read_value(Reader& r, const std::string& path, const std::string& key, uint32_t t, GgufValue* v, int depth) {
  v->type = t;
  const std::string shown = printable(key);  // the key as messages show it
  const std::string what = "value of key '" + shown + "'";
  if (scalar_size(t)) return read_scalar(r, t, v, what);
  if (t == STRING) {
    v->s = r.str(what);
    return;
  }
  if (t != ARRAY) fail(path, ": GGUF key '", shown, "': unknown value type ", t, " (expected 0..12)");
  if (depth >= kMaxArrayDepth) fail(path, ": GGUF key '", shown, "': arrays nested deeper than ", kMaxArrayDepth);
  v->array_type = r.scalar<uint32_t>(what + " array type");
  v->array_len = r.scalar<uint64_t>(what + " array length");
  // Every element takes at least one byte, so a longer array cannot fit in what is left.
  if (v->array_len > r.left())
    fail(path, ": GGUF key '", shown, "': array length ", v->array_len, " exceeds the ", r.left(),
         " bytes left in the file");
  if (size_t sz = scalar_size(v->array_type)) {
    if (v->array_len * sz > r.left())
      fail(path, ": GGUF key '", shown, "': array of ", v->array_len, " elements runs past the end of the file");
    const bool is_float = v->array_type == F32 || v->array_type == F64;
    (is_float ? v->floats.reserve(size_t(v->array_len)) : v->ints.reserve(size_t(v->array_len)));
    GgufValue elem;
    for (uint64_t k = 0; k < v->array_len; ++k) {
      read_scalar(r, v->array_type, &elem, what);
      if (is_float)
        v->floats.push_back(elem.f);
      else
        v->ints.push_back(elem.i);
    }
    return;
  }
  GgufValue elem;
  for (uint64_t k = 0; k < v->array_len; ++k) {
    read_value(r, path, key, v->array_type, &elem, depth + 1);
    if (v->array_type == STRING) v->strings.push_back(std::move(elem.s));
  }
}

// Bytes of a tensor of `type` with `numel` weights whose rows are `cols` long; 0 for types this reader rejects.
uint64_t tensor_bytes(const std::string& path, const GgufTensor& t, uint64_t numel) {
  switch (GgmlType(t.type)) {
    case GgmlType::F32: return numel * 4;
    case GgmlType::F16: case GgmlType::BF16: return numel * 2;
    default: break;
  }
  if (is_ggml_quant_type(t.type)) {
    const GgmlQuantType q = GgmlQuantType(t.type);
    const uint64_t bw = uint64_t(ggml_quant_block_weights(q));
    if (t.dims[0] % bw != 0)
      fail(path, ": tensor ", printable(t.name), ": row length ", t.dims[0], " is not a multiple of the ",
           ggml_type_name(t.type), " block size ", bw);
    return numel / bw * ggml_quant_block_bytes(q);
  }
  fail(path, ": tensor ", printable(t.name), ": unsupported tensor type ", ggml_type_name(t.type),
       " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
}

GgufTensor read_tensor_info(Reader& r, const std::string& path) {
  GgufTensor t;
  t.name = r.str("tensor name");
  const std::string shown = printable(t.name);
  const uint32_t n_dims = r.scalar<uint32_t>("dimension count of tensor " + shown);
  if (n_dims == 0 || n_dims > kMaxDims)
    fail(path, ": tensor ", shown, ": dimension count ", n_dims, " (expected 1..", kMaxDims, ")");
  for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.scalar<uint64_t>("dimensions of tensor " + shown));
  t.type = r.scalar<uint32_t>("type of tensor " + shown);
  t.offset = r.scalar<uint64_t>("data offset of tensor " + shown);
  return t;
}

// Places a tensor in the data section [data, data + data_size) after checking its size and alignment.
void place_tensor(GgufTensor& t, const GgufFile& f, const uint8_t* data, uint64_t data_size) {
  uint64_t numel = 1;
  for (uint64_t n : t.dims) {
    if (n == 0 || n > kMaxElements || numel > kMaxElements / n)
      fail(f.path, ": tensor ", printable(t.name), ": implausible dimension ", n);
    numel *= n;
  }
  const uint64_t bytes = tensor_bytes(f.path, t, numel);
  if (t.offset % f.alignment != 0)
    fail(f.path, ": tensor ", printable(t.name), ": data offset ", t.offset, " is not a multiple of the alignment ",
         f.alignment);
  if (t.offset > data_size || bytes > data_size - t.offset)
    fail(f.path, ": tensor ", printable(t.name), ": data [", t.offset, ", ", t.offset + bytes,
         ") runs past the end of the ", data_size, "-byte data section");
  t.data = data + t.offset;
  t.nbytes = size_t(bytes);
}

}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find_kv(key);
  if (!v) fail(path, ": GGUF metadata key '", key, "' is missing");
  if (v->type == F32 || v->type == F64 || v->type == STRING || v->type == ARRAY || v->type == BOOL)
    fail(path, ": GGUF metadata key '", key, "' must be an integer, found value type ", v->type);
  if ((v->type == U64 && v->u > uint64_t(INT64_MAX)))
    fail(path, ": GGUF metadata key '", key, "' = ", v->u, " is out of range");
  return v->i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find_kv(key);
  if (!v) fail(path, ": GGUF metadata key '", key, "' is missing");
  if (v->type == F32 || v->type == F64) return v->f;
  if (v->type == STRING || v->type == ARRAY || v->type == BOOL)
    fail(path, ": GGUF metadata key '", key, "' must be a number, found value type ", v->type);
  return double(get_int(key));
}

GgufFile open_gguf(const std::string& path) {
  GgufFile f;
  f.path = path;
  f.mapping = MappedFile::open(path);
  Reader r(path, f.mapping->data(), f.mapping->size());
  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) fail(path, ": not a GGUF file (the first 4 bytes are not \"GGUF\")");
  f.version = r.scalar<uint32_t>("version");
  if (f.version != 3) fail(path, ": unsupported GGUF version ", f.version, " (supported: 3)");
  const uint64_t n_tensors = r.scalar<uint64_t>("tensor count");
  const uint64_t n_kv = r.scalar<uint64_t>("key-value count");
  // A tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes and a key-value at least 8 + 4 + 1.
  if (n_tensors > r.left() / 32) fail(path, ": GGUF tensor count ", n_tensors, " cannot fit in the file");
  if (n_kv > r.left() / 13) fail(path, ": GGUF key-value count ", n_kv, " cannot fit in the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = r.str("metadata key");
    const uint32_t type = r.scalar<uint32_t>("value type of key '" + printable(key) + "'");
    GgufValue v;
    read_value(r, path, key, type, &v, 0);
    if (!f.kv.emplace(key, v).second) fail(path, ": GGUF metadata key '", printable(key), "' appears twice");
  }
  if (f.find_kv("general.alignment")) {
    const int64_t al = f.get_int("general.alignment");
    if (al <= 0 || al > (1 << 16) || (al & (al - 1)) != 0)
      fail(path, ": general.alignment ", al, " must be a power of two up to 65536");
    f.alignment = uint64_t(al);
  }
  std::vector<GgufTensor> infos;
  for (uint64_t k = 0; k < n_tensors; ++k) infos.push_back(read_tensor_info(r, path));

  const uint64_t data_start = (r.pos() + f.alignment - 1) / f.alignment * f.alignment;
  const uint64_t size = f.mapping->size();
  const uint64_t data_size = data_start > size ? 0 : size - data_start;
  for (GgufTensor& t : infos) {
    place_tensor(t, f, f.mapping->data() + (data_start > size ? size : data_start), data_size);
    const std::string name = t.name;
    if (!f.tensors.emplace(name, std::move(t)).second) fail(path, ": tensor ", printable(name), " appears twice");
  }
  return f;
}

namespace {

// What this file calls each field ModelConfig::validate checks, so that a refusal names the GGUF key and its value.
ConfigKeys gguf_config_keys(const GgufFile& f) {
  ConfigKeys k;
  k.dim = "llama.embedding_length";
  k.hidden_dim = "llama.feed_forward_length";
  k.n_layers = "llama.block_count";
  k.n_heads = "llama.attention.head_count";
  // Absent, head_count_kv is head_count, and head_dim is derived: named by what the value came from.
  k.n_kv_heads = f.find_kv("llama.attention.head_count_kv") ? "llama.attention.head_count_kv"
                                                            : "llama.attention.head_count";
  k.head_dim = f.find_kv("llama.attention.key_length")
                   ? "llama.attention.key_length"
                   : "the head size (llama.embedding_length / llama.attention.head_count)";
  k.vocab_size = "the vocabulary (the rows of token_embd.weight)";
  k.max_seq_len = "llama.context_length";
  k.norm_eps = "llama.attention.layer_norm_rms_epsilon";
  k.rope_theta = "llama.rope.freq_base";
  k.bos_id = "tokenizer.ggml.bos_token_id";
  k.eos_id = "tokenizer.ggml.eos_token_id";
  return k;
}

// llama.* metadata -> ModelConfig; shapes the config implies are checked against the tensors later.
ModelConfig config_from(const GgufFile& f) {
  const std::string arch = f.find_kv("general.architecture") ? f.find_kv("general.architecture")->s : "";
  if (arch != "llama")
    fail(f.path, ": general.architecture is '", printable(arch),
         "', expected 'llama' (the only GGUF architecture supported)");
  auto geti = [&](const std::string& key) {
    const int64_t v = f.get_int(key);
    if (v <= 0 || v > (int64_t(1) << 30)) fail(f.path, ": GGUF metadata key '", key, "' = ", v, " is implausible");
    return int(v);
  };
  ModelConfig c;
  c.architecture = "llama (gguf)";
  c.dim = geti("llama.embedding_length");
  c.n_layers = geti("llama.block_count");
  c.n_heads = geti("llama.attention.head_count");
  c.n_kv_heads = f.find_kv("llama.attention.head_count_kv") ? geti("llama.attention.head_count_kv") : c.n_heads;
  c.hidden_dim = geti("llama.feed_forward_length");
  c.max_seq_len = geti("llama.context_length");
  if (f.find_kv("llama.attention.key_length")) {
    c.head_dim = geti("llama.attention.key_length");
  } else {
    if (c.dim % c.n_heads != 0)
      fail(f.path, ": llama.embedding_length ", c.dim, " is not a multiple of llama.attention.head_count ", c.n_heads,
           " and llama.attention.key_length is not given");
    c.head_dim = c.dim / c.n_heads;
  }
  if (f.find_kv("llama.rope.dimension_count") && geti("llama.rope.dimension_count") != c.head_dim)
    fail(f.path, ": llama.rope.dimension_count ", geti("llama.rope.dimension_count"),
         " differs from the head size ", c.head_dim, " (partial rotary embeddings are not supported)");
  // Checked as read (a float32 or float64 in the file), before the config's float: a denormal theta is refused here.
  if (f.find_kv("llama.rope.freq_base"))
    c.rope_theta = checked_rope_theta(f.get_float("llama.rope.freq_base"), f.path, "llama.rope.freq_base");
  c.norm_eps = checked_norm_eps(f.get_float("llama.attention.layer_norm_rms_epsilon"), f.path,
                                "llama.attention.layer_norm_rms_epsilon");
  const GgufTensor* embd = f.find("token_embd.weight");
  if (!embd) fail(f.path, ": tensor token_embd.weight not found");
  if (embd->dims.size() != 2) fail(f.path, ": tensor token_embd.weight must be 2-D");
  // Checked here on the file's 64-bit count: narrowed to int first, a huge one would be reported as another number.
  if (embd->dims[1] > uint64_t(kMaxVocabSize))
    fail(f.path, ": ", gguf_config_keys(f).vocab_size, " must be between 1 and ", kMaxVocabSize, ", found ",
         embd->dims[1]);
  c.vocab_size = int(embd->dims[1]);
  auto token_id = [&](const std::string& key) {
    const int64_t v = f.get_int(key);
    if (v < 0 || v >= c.vocab_size) fail(f.path, ": ", key, " ", v, " is outside the vocabulary of ", c.vocab_size);
    return int(v);
  };
  if (f.find_kv("tokenizer.ggml.bos_token_id")) c.bos_id = token_id("tokenizer.ggml.bos_token_id");
  if (f.find_kv("tokenizer.ggml.eos_token_id")) c.eos_ids = {token_id("tokenizer.ggml.eos_token_id")};
  c.tied_embeddings = f.find("output.weight") == nullptr;
  return c;
}

// Binds a GGUF tensor as a [rows, cols] HostTensor (a 1-D one has rows = 1): a view into the mapping, quantized types
// as their blocks (HostTensor::quant).
HostTensor bind(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensor* t = f.find(name);
  if (!t) fail(f.path, ": tensor ", name, " not found");
  std::vector<uint64_t> want{uint64_t(cols)};
  if (rows != 1 || t->dims.size() == 2) want.push_back(uint64_t(rows));
  if (t->dims != want) {
    std::string found, expected;
    for (uint64_t d : t->dims) found += (found.empty() ? "" : ", ") + std::to_string(d);
    for (uint64_t d : want) expected += (expected.empty() ? "" : ", ") + std::to_string(d);
    fail(f.path, ": tensor ", name, ": expected dims [", expected, "] (innermost first) from the metadata, found [",
         found, "]");
  }
  HostTensor h;
  h.name = name;
  h.rows = rows;
  h.cols = cols;
  if (t->type == uint32_t(GgmlType::F32) || t->type == uint32_t(GgmlType::F16) ||
      t->type == uint32_t(GgmlType::BF16)) {
    h.dtype = t->type == uint32_t(GgmlType::F32) ? DType::F32 : t->type == uint32_t(GgmlType::F16) ? DType::F16
                                                                                                   : DType::BF16;
    h.data = t->data;
    h.owner = std::shared_ptr<const void>(f.mapping, t->data);  // aliasing: keeps the mapping alive
    return h;
  }
  // Quantized: the blocks stay as stored (a view into the mapping); reads dequantize exactly, and the CUDA engine
  // prepacks them for its quantized GEMVs (models/quant.h).
  h.quant = t->type;
  h.dtype = DType::F32;
  h.data = t->data;
  h.owner = std::shared_ptr<const void>(f.mapping, t->data);
  return h;
}

// Llama 3.1 ships its long-context scaling as per-pair divisors of the rotary frequencies.
std::vector<float> rope_factors(const GgufFile& f, const ModelConfig& c) {
  if (!f.find("rope_freqs.weight")) return {};
  HostTensor t = bind(f, "rope_freqs.weight", 1, c.head_dim / 2);
  std::vector<float> v = t.to_f32();
  for (float x : v)
    if (!(x > 0.0f) || !std::isfinite(x)) fail(f.path, ": tensor rope_freqs.weight holds ", x, ", expected > 0");
  return v;
}

void check_no_extra_layers(const GgufFile& f, const ModelConfig& c) {
  for (const auto& kv : f.tensors) {
    if (kv.first.compare(0, 4, "blk.") != 0) continue;
    const long layer = std::strtol(kv.first.c_str() + 4, nullptr, 10);
    if (layer < 0 || layer >= c.n_layers)
      fail(f.path, ": tensor ", printable(kv.first), " belongs to layer ", layer, " but llama.block_count is ",
           c.n_layers);
  }
}

// The tokenizer.ggml.* keys as an EmbeddedVocab (null when the file carries no vocabulary). Only shapes and ranges
// are checked here; what the tokens mean is tokenizer/'s business.
std::shared_ptr<const EmbeddedVocab> vocab_from(const GgufFile& f, const ModelConfig& c) {
  const GgufValue* model = f.find_kv("tokenizer.ggml.model");
  if (!model) return nullptr;
  auto array_of = [&](const std::string& key, uint32_t want, const char* kind) -> const GgufValue* {
    const GgufValue* v = f.find_kv(key);
    if (!v) return nullptr;
    const bool ok = v->type == ARRAY &&
                    (want == STRING ? v->array_type == STRING
                     : want == F32  ? (v->array_type == F32 || v->array_type == F64)
                                    : (scalar_size(v->array_type) && v->array_type != F32 && v->array_type != F64));
    if (!ok) fail(f.path, ": GGUF metadata key '", key, "' must be an array of ", kind);
    return v;
  };
  auto string_of = [&](const std::string& key) -> std::string {
    const GgufValue* v = f.find_kv(key);
    if (!v) return "";
    if (v->type != STRING) fail(f.path, ": GGUF metadata key '", key, "' must be a string");
    return v->s;
  };
  auto vocab = std::make_shared<EmbeddedVocab>();
  EmbeddedVocab& v = *vocab;
  v.source = f.path;
  v.model = string_of("tokenizer.ggml.model");
  v.pre = string_of("tokenizer.ggml.pre");
  const GgufValue* tokens = array_of("tokenizer.ggml.tokens", STRING, "strings");
  if (!tokens || tokens->strings.empty()) fail(f.path, ": GGUF tokenizer.ggml.tokens is missing or empty");
  if (tokens->strings.size() > size_t(c.vocab_size))
    fail(f.path, ": GGUF tokenizer.ggml.tokens has ", tokens->strings.size(), " tokens, more than the ",
         c.vocab_size, " rows of token_embd.weight");
  v.tokens = tokens->strings;
  const size_t n = v.tokens.size();
  if (const GgufValue* s = array_of("tokenizer.ggml.scores", F32, "floats")) {
    if (s->floats.size() != n) fail(f.path, ": GGUF tokenizer.ggml.scores has ", s->floats.size(), " entries for ", n, " tokens");
    v.scores.assign(s->floats.begin(), s->floats.end());
  }
  if (const GgufValue* t = array_of("tokenizer.ggml.token_type", I32, "integers")) {
    if (t->ints.size() != n)
      fail(f.path, ": GGUF tokenizer.ggml.token_type has ", t->ints.size(), " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t x = t->ints[i];
      // Narrowed only when it fits: a clamped value would be reported as a number the file does not hold.
      if (x < INT32_MIN || x > INT32_MAX)
        fail(f.path, ": GGUF tokenizer.ggml.token_type of token ", i, " is ", x, ", expected 1..6");
      v.token_types.push_back(int32_t(x));
    }
  }
  if (const GgufValue* m = array_of("tokenizer.ggml.merges", STRING, "strings")) v.merges = m->strings;
  auto id_of = [&](const std::string& key) {
    if (!f.find_kv(key)) return -1;
    const int64_t id = f.get_int(key);
    if (id < 0 || uint64_t(id) >= n) fail(f.path, ": GGUF ", key, " ", id, " is outside the ", n, " tokens");
    return int(id);
  };
  v.bos_id = id_of("tokenizer.ggml.bos_token_id");
  v.eos_id = id_of("tokenizer.ggml.eos_token_id");
  v.unk_id = id_of("tokenizer.ggml.unknown_token_id");
  v.pad_id = id_of("tokenizer.ggml.padding_token_id");
  v.eot_id = id_of("tokenizer.ggml.eot_token_id");
  auto flag = [&](const std::string& key, bool dflt) {
    const GgufValue* x = f.find_kv(key);
    if (!x) return dflt;
    if (x->type != BOOL) fail(f.path, ": GGUF metadata key '", key, "' must be a bool");
    return x->u != 0;
  };
  v.add_bos = flag("tokenizer.ggml.add_bos_token", v.model == "llama");
  v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
  return vocab;
}

std::string chat_template_of(const GgufFile& f) {
  const GgufValue* t = f.find_kv("tokenizer.chat_template");
  if (!t) return "";
  if (t->type != STRING) fail(f.path, ": GGUF metadata key 'tokenizer.chat_template' must be a string");
  return t->s;
}

}  // namespace

Model load_gguf(const std::string& path) {
  const GgufFile f = open_gguf(path);
  Model m;
  m.source = path;
  m.format = "gguf";
  m.config = config_from(f);
  m.config.validate(path, gguf_config_keys(f));
  m.config.rope_freq_factors = rope_factors(f, m.config);
  m.config.validate(path, gguf_config_keys(f));
  check_no_extra_layers(f, m.config);

  const ModelConfig& c = m.config;
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), hid = c.hidden_dim;
  ModelWeights& w = m.weights;
  w.embedding = bind(f, "token_embd.weight", c.vocab_size, d);
  w.layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    // GGUF q/k rows are already interleaved (llama.cpp's converter permuted them): rope_head_dim stays 0.
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers[size_t(l)];
    lw.attn_norm = bind(f, p + "attn_norm.weight", 1, d);
    lw.wq = bind(f, p + "attn_q.weight", q, d);
    lw.wk = bind(f, p + "attn_k.weight", kv, d);
    lw.wv = bind(f, p + "attn_v.weight", kv, d);
    lw.wo = bind(f, p + "attn_output.weight", d, q);
    lw.ffn_norm = bind(f, p + "ffn_norm.weight", 1, d);
    lw.w_gate = bind(f, p + "ffn_gate.weight", hid, d);
    lw.w_up = bind(f, p + "ffn_up.weight", hid, d);
    lw.w_down = bind(f, p + "ffn_down.weight", d, hid);
  }
  w.final_norm = bind(f, "output_norm.weight", 1, d);
  w.head = c.tied_embeddings ? w.embedding : bind(f, "output.weight", c.vocab_size, d);
  m.vocab = vocab_from(f, c);
  // The end-of-turn token ends generation too (chat models stop on it rather than on EOS).
  if (m.vocab && m.vocab->eot_id >= 0 &&
      std::find(m.config.eos_ids.begin(), m.config.eos_ids.end(), m.vocab->eot_id) == m.config.eos_ids.end())
    m.config.eos_ids.push_back(m.vocab->eot_id);
  m.chat_template = chat_template_of(f);
  return m;
}

}  // namespace llm
