// Hugging Face writer: config.json, safetensors (single or sharded with an index), tokenizer copy.
#include "models/hf_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/error.h"
#include "models/hf_config.h"

namespace llm {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// The shortest decimal that reads back as the same float, so config.json says 1e-05, not 9.999999747378752e-06.
double float_as_decimal(float f) {
  char buf[32];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

const char* torch_dtype(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

ojson rope_object(const ModelConfig& c, bool with_theta) {
  ojson r = ojson::object();
  r["rope_type"] = c.rope_scaling.type == "llama3" ? "llama3" : "default";
  if (with_theta) r["rope_theta"] = float_as_decimal(c.rope_theta);
  if (c.rope_scaling.type == "llama3") {
    r["factor"] = float_as_decimal(c.rope_scaling.factor);
    r["low_freq_factor"] = float_as_decimal(c.rope_scaling.low_freq_factor);
    r["high_freq_factor"] = float_as_decimal(c.rope_scaling.high_freq_factor);
    r["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  }
  return r;
}

// Engine row whose data goes to file row `fr`: the inverse of HostTensor::file_row. Engine rows are interleaved
// whatever the source, and HF files are rotate-half, so q/k always take this path.
int64_t engine_row(int64_t fr, int rope_head_dim) {
  if (!rope_head_dim) return fr;
  int64_t hd = rope_head_dim, h = fr / hd, i = fr % hd, half = hd / 2;
  return h * hd + 2 * (i % half) + i / half;
}

void encode(const float* src, int64_t n, DType dt, uint8_t* dst) {
  for (int64_t i = 0; i < n; ++i) {
    switch (dt) {
      case DType::F32: std::memcpy(dst + 4 * i, &src[i], 4); break;
      case DType::F16: {
        uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
        break;
      }
      case DType::BF16: {
        uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
        break;
      }
    }
  }
}

// Rows [r0, r0 + n) as FP32, split over the machine's cores: generating an 8B synthetic model is CPU-bound.
void read_rows_parallel(const HostTensor& t, int64_t r0, int64_t n, float* out) {
  const int64_t threads = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1 || n * t.cols < (int64_t(1) << 16)) return t.read_rows_f32(r0, n, out);
  std::vector<std::thread> pool;
  for (int64_t k = 0; k < threads; ++k) {
    const int64_t b = n * k / threads, e = n * (k + 1) / threads;
    pool.emplace_back([&t, r0, b, e, out] { t.read_rows_f32(r0 + b, e - b, out + b * t.cols); });
  }
  for (auto& th : pool) th.join();
}

// Streams one tensor in file row order, a block of whole heads at a time.
void write_tensor(std::ofstream& out, const HfWeight& w, DType dt) {
  const HostTensor& t = *w.slot;
  const int64_t align = w.rope_head_dim ? w.rope_head_dim : 1;
  int64_t block = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, t.cols));
  block = std::max(align, std::min(block, t.rows) / align * align);
  std::vector<float> engine(size_t(block * t.cols));
  std::vector<uint8_t> bytes(size_t(block * t.cols) * dtype_size(dt));
  for (int64_t r0 = 0; r0 < t.rows; r0 += block) {
    const int64_t n = std::min(block, t.rows - r0);
    read_rows_parallel(t, r0, n, engine.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = engine_row(r0 + i, w.rope_head_dim) - r0;  // head-aligned blocks: stays in the block
      encode(engine.data() + src * t.cols, t.cols, dt, bytes.data() + size_t(i * t.cols) * dtype_size(dt));
    }
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(size_t(n * t.cols) * dtype_size(dt)));
  }
}

uint64_t tensor_bytes(const HfWeight& w, DType dt) { return uint64_t(w.rows * w.cols) * dtype_size(dt); }

// Contiguous groups of roughly equal bytes, none empty.
std::vector<int> assign_shards(const std::vector<HfWeight>& table, int shards, DType dt) {
  uint64_t total = 0;
  for (const auto& w : table) total += tensor_bytes(w, dt);
  std::vector<int> shard_of(table.size());
  int s = 0, in_shard = 0;
  uint64_t cum = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const int64_t left = int64_t(table.size() - i);
    if (in_shard > 0 && s < shards - 1 && (cum >= total / uint64_t(shards) * uint64_t(s + 1) || left == shards - 1 - s))
      ++s, in_shard = 0;
    shard_of[i] = s;
    ++in_shard;
    cum += tensor_bytes(table[i], dt);
  }
  return shard_of;
}

std::string shard_name(int i, int n) {
  if (n == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) fail("cannot write ", p.string());
}

void prepare_dir(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) fail(dir.string(), ": exists and is not a directory");
  if (fs::is_directory(dir, ec) && !fs::is_empty(dir, ec)) {
    if (!overwrite) fail("output directory ", dir.string(), " is not empty (use --force to overwrite)");
    for (const auto& e : fs::directory_iterator(dir)) {  // stale weights would be mistaken for ours
      const std::string n = e.path().filename().string();
      if (n.rfind("model", 0) == 0 && (e.path().extension() == ".safetensors" || n == "model.safetensors.index.json"))
        fs::remove(e.path());
    }
  }
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create ", dir.string(), ": ", ec.message());
}

}  // namespace

std::string hf_config_json(const ModelConfig& c, DType dtype, bool rope_parameters) {
  ojson j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = float_as_decimal(c.norm_eps);
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = c.bos_id;
  if (c.eos_ids.size() == 1) j["eos_token_id"] = c.eos_ids[0];
  else j["eos_token_id"] = c.eos_ids;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = false;
  j["initializer_range"] = 0.02;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  j["torch_dtype"] = torch_dtype(dtype);
  if (rope_parameters) {
    j["dtype"] = torch_dtype(dtype);
    j["rope_parameters"] = rope_object(c, true);
  } else {
    j["rope_theta"] = float_as_decimal(c.rope_theta);
    j["rope_scaling"] = c.rope_scaling.type == "llama3" ? rope_object(c, false) : ojson(nullptr);
  }
  return j.dump(2) + "\n";
}

void write_hf_model(const Model& model, const std::string& out_dir, const HfWriteOptions& opt) {
  const DType dt = opt.dtype;
  ModelWeights weights = model.weights;  // the table points into this copy (tensors are views, copying is cheap)
  const std::vector<HfWeight> table = hf_weight_table(model.config, weights);
  for (const HfWeight& w : table)
    if (w.slot->rows != w.rows || w.slot->cols != w.cols)
      fail(model.source, ": tensor ", w.name, " is [", w.slot->rows, ", ", w.slot->cols, "], config implies [", w.rows,
           ", ", w.cols, "]");
  if (opt.shards < 1 || size_t(opt.shards) > table.size())
    fail("shard count ", opt.shards, " must be between 1 and the number of tensors (", table.size(), ")");
  if (!opt.tokenizer.empty() && !fs::is_regular_file(opt.tokenizer))
    fail("tokenizer not found: ", opt.tokenizer);

  const fs::path dir(out_dir);
  prepare_dir(dir, opt.overwrite);
  write_text(dir / "config.json", hf_config_json(model.config, dt, opt.rope_parameters));

  const std::vector<int> shard_of = assign_shards(table, opt.shards, dt);
  uint64_t total = 0, done = 0;
  for (const auto& w : table) total += tensor_bytes(w, dt);
  ojson weight_map = ojson::object();
  for (int s = 0; s < opt.shards; ++s) {
    const std::string name = shard_name(s, opt.shards);
    nlohmann::json header;  // sorted keys, as the safetensors library writes them
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (size_t i = 0; i < table.size(); ++i) {
      if (shard_of[i] != s) continue;
      const uint64_t n = tensor_bytes(table[i], dt);
      header[table[i].name] = {{"dtype", dtype_name(dt)},
                               {"shape", table[i].file_shape()},
                               {"data_offsets", {offset, offset + n}}};
      offset += n;
      weight_map[table[i].name] = name;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as safetensors pads it
    const fs::path path = dir / name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot create ", path.string());
    uint8_t len[8];
    for (int b = 0; b < 8; ++b) len[b] = uint8_t(uint64_t(text.size()) >> (8 * b));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (size_t i = 0; i < table.size(); ++i) {
      if (shard_of[i] != s) continue;
      write_tensor(out, table[i], dt);
      if (!out) fail("cannot write ", path.string(), " (disk full?)");
      done += tensor_bytes(table[i], dt);
      if (opt.progress) opt.progress(table[i].name, done, total);
    }
    out.close();
    if (!out) fail("cannot write ", path.string(), " (disk full?)");
  }
  if (opt.shards > 1) {
    ojson index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  if (!opt.tokenizer.empty())
    fs::copy_file(opt.tokenizer, dir / "tokenizer.model", fs::copy_options::overwrite_existing);
}

}  // namespace llm
