// Tokenizer lookup for a loaded model, and the default model's location.
#include "engine/model_files.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"

namespace llm {

const char* const kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string default_model_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "models-cache" / kDefaultModelFile);
#ifdef LLM_SOURCE_DIR
  candidates.push_back(fs::path(LLM_SOURCE_DIR) / "models-cache" / kDefaultModelFile);
#endif
  for (const fs::path& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.string();
  fail("no --model given and the default model ", kDefaultModelFile,
       " is not in models-cache/: run scripts/setup.sh (or scripts/fetch-model.sh) to fetch it");
}

std::unique_ptr<Tokenizer> load_tokenizer(const Model& model, const std::string& override_path) {
  std::unique_ptr<Tokenizer> tok;
  std::string from;
  if (!override_path.empty()) {
    tok = Tokenizer::load(from = override_path);
  } else if (!model.tokenizer_path.empty()) {
    tok = Tokenizer::load(from = model.tokenizer_path);
  } else if (model.vocab) {
    tok = Tokenizer::from_vocab(*model.vocab);
    from = model.source + " (its vocabulary)";
  } else {
    return nullptr;
  }
  if (tok->vocab_size() > model.config.vocab_size)
    fail("tokenizer ", from, " has ", tok->vocab_size(), " pieces, more than the model's vocabulary of ",
         model.config.vocab_size);
  return tok;
}

}  // namespace llm
