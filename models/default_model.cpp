// The default model's location: models-cache/ beside the build directory, then in the source tree.
#include "models/default_model.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

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

}  // namespace llm
