// Where the default model lives once scripts/setup.sh (scripts/fetch-model.sh) fetched it. A path, nothing of text.
#pragma once
#include <string>

namespace llm {

// The default model's file name inside models-cache/ (scripts/fetch-model.sh).
extern const char* const kDefaultModelFile;

// Path of the fetched default model: models-cache/ beside the build directory of this executable, then in the
// source tree it was built from (LLM_SOURCE_DIR, set by CMake). Throws llm::Error saying how to fetch it when
// neither exists.
std::string default_model_path();

}  // namespace llm
