// Hugging Face directory loader: config.json + model.safetensors (or shards behind model.safetensors.index.json)
// -> Model whose tensors are views into the mapped files, checked against the config, q/k marked rotate-half.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_parse.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/safetensors.h"

namespace llm {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The checkpoint's tensors, wherever they live: tensor name -> file, and the opened files.
class WeightFiles {
 public:
  explicit WeightFiles(const fs::path& dir) : dir_(dir) {
    if (fs::is_regular_file(dir / "model.safetensors")) {
      open_file("model.safetensors");
      for (const auto& kv : files_.at("model.safetensors").tensors) where_[kv.first] = "model.safetensors";
    } else if (fs::is_regular_file(dir / "model.safetensors.index.json")) {
      read_index();
    } else {
      fail(dir.string(), ": no model.safetensors or model.safetensors.index.json in the directory");
    }
  }

  bool has(const std::string& name) const { return where_.count(name) != 0; }

  // The stored tensor, or an error naming where it should have been.
  const SafetensorsTensor& get(const std::string& name, std::string* file) const {
    auto it = where_.find(name);
    if (it == where_.end())
      fail(dir_.string(), ": tensor ", printable(name), " not found (",
           index_ ? "not listed in model.safetensors.index.json" : "not in model.safetensors", ")");
    const SafetensorsFile& f = files_.at(it->second);
    *file = f.path;
    const SafetensorsTensor* t = f.find(name);
    if (!t)
      fail(f.path, ": tensor ", printable(name),
           " is missing, though model.safetensors.index.json places it in this shard");
    return *t;
  }

  std::shared_ptr<const MappedFile> mapping(const std::string& name) const {
    return files_.at(where_.at(name)).mapping;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& kv : where_) out.push_back(kv.first);
    return out;
  }

 private:
  void open_file(const std::string& rel) {
    if (!files_.count(rel)) files_.emplace(rel, open_safetensors((dir_ / rel).string()));
  }

  void read_index() {
    index_ = true;
    const std::string path = (dir_ / "model.safetensors.index.json").string();
    std::ifstream in(path, std::ios::binary);
    json j;
    try {
      j = parse_json(in, path);
    } catch (const json::exception& e) {
      fail(path, ": not valid JSON (", printable(e.what(), 300), ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(path, ": expected an object with a 'weight_map' object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(path, ": weight_map entry for ", printable(it.key()), " must be a file name");
      const std::string shard = it.value().get<std::string>();
      // Shards are files beside the index: a path (or "..") could point anywhere on the machine.
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos)
        fail(path, ": shard name '", printable(shard), "' (listed for tensor ", printable(it.key()),
             ") is not a plain file name");
      std::error_code ec;  // a name longer than the file system allows is reported, not thrown
      if (!fs::is_regular_file(dir_ / shard, ec))
        fail(path, ": shard ", printable(shard), " (listed for tensor ", printable(it.key()), ") not found in ",
             dir_.string());
      where_[it.key()] = shard;
    }
    for (const auto& kv : where_) open_file(kv.second);
  }

  fs::path dir_;
  bool index_ = false;
  std::map<std::string, std::string> where_;        // tensor -> file name relative to dir_
  std::map<std::string, SafetensorsFile> files_;    // file name -> parsed file
};

// A config that says fewer layers than the checkpoint holds would silently drop layers.
void check_no_extra_layers(const WeightFiles& files, const ModelConfig& c, const std::string& dir) {
  const std::string prefix = "model.layers.";
  for (const std::string& name : files.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long layer = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (layer >= c.n_layers)
      fail(dir, ": tensor ", printable(name), " belongs to layer ", layer, " but config.json has num_hidden_layers ",
           c.n_layers);
  }
}

void bind(const HfWeight& w, const WeightFiles& files) {
  std::string file;
  const SafetensorsTensor& st = files.get(w.name, &file);
  if (st.shape != w.file_shape())
    fail(file, ": tensor ", w.name, ": expected shape ", shape_string(w.file_shape()), " from config.json, found ",
         shape_string(st.shape));
  HostTensor& t = *w.slot;
  t.name = w.name;
  t.dtype = st.dtype;
  t.rows = w.rows;
  t.cols = w.cols;
  t.data = st.data;
  t.rope_head_dim = w.rope_head_dim;
  t.owner = std::shared_ptr<const void>(files.mapping(w.name), st.data);  // aliasing: keeps the mapping alive
}


// tokenizer_config.json's chat_template: a string, or (older files) a list of {name, template} where "default" is
// the chat one. Missing file or key: "". A file that is not JSON is refused by name.
std::string chat_template_in(const fs::path& path) {
  if (!fs::is_regular_file(path)) return "";
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = parse_json(in, path.string());
  } catch (const nlohmann::json::exception&) {
    fail(path.string(), ": not a JSON object");
  }
  if (!j.is_object()) fail(path.string(), ": not a JSON object");
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
    return "";
  }
  fail(path.string(), ": chat_template must be a string or a list of {name, template}");
}

}  // namespace

Model load_hf_dir(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) fail(dir, ": not a directory");
  const fs::path config_path = d / "config.json";
  if (!fs::is_regular_file(config_path)) fail(dir, ": no config.json in the directory");

  Model m;
  m.source = dir;
  m.format = "hf";
  m.config = load_hf_config(config_path.string());
  WeightFiles files(d);
  // No lm_head.weight means the head is the embedding (transformers ties it the same way).
  if (!files.has("lm_head.weight")) m.config.tied_embeddings = true;
  check_no_extra_layers(files, m.config, dir);
  for (const HfWeight& w : hf_weight_table(m.config, m.weights)) bind(w, files);
  if (m.config.tied_embeddings) m.weights.head = m.weights.embedding;

  // sentencepiece's tokenizer.model when there is one (Llama 2 era), else the byte-level BPE tokenizer.json.
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    if (fs::is_regular_file(d / name)) {
      m.tokenizer_path = (d / name).string();
      break;
    }
  }
  m.chat_template = chat_template_in(d / "tokenizer_config.json");
  return m;
}

}  // namespace llm
