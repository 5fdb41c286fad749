// load_model: picks the loader from what the path is (synthetic:NAME, a directory, or a file).
#include <filesystem>

#include "core/error.h"
#include "models/model.h"

namespace llm {

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
    return load_llama2c(path);
  }
  fail("model path not found: ", path);
}

}  // namespace llm
