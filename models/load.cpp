// load_model: picks the loader from what the path is (synthetic:NAME, a directory, a GGUF file, or a llama2.c file).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/model.h"

namespace llm {

namespace {

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

Model load_model(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string synthetic = "synthetic:";
  if (path.compare(0, synthetic.size(), synthetic) == 0) return load_synthetic(path.substr(synthetic.size()));
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_hf_dir(path);
  if (fs::exists(path, ec)) {
    // A file of a Hugging Face directory (config.json, a .safetensors shard) stands for its directory.
    const fs::path p(path);
    if (p.filename() == "config.json" || p.extension() == ".safetensors")
      return load_hf_dir(p.has_parent_path() ? p.parent_path().string() : ".");
    if (starts_with_gguf_magic(path)) return load_gguf(path);
    return load_llama2c(path);
  }
  fail("model path not found: ", path);
}

}  // namespace llm
