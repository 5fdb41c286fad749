// What every app needs besides the weights: the tokenizer that goes with a model (an explicit file, the one beside
// the weights, or the vocabulary inside a GGUF) and where the default model lives once scripts/setup.sh fetched it.
#pragma once
#include <memory>
#include <string>

#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace llm {

// The default model's file name inside models-cache/ (scripts/fetch-model.sh).
extern const char* const kDefaultModelFile;

// Path of the fetched default model: models-cache/ beside the build directory of this executable, then in the
// source tree it was built from. Throws llm::Error saying how to fetch it when neither exists.
std::string default_model_path();

// override_path (tokenizer.model or tokenizer.json) when given, else the file found beside the weights, else the
// GGUF's own vocabulary; null when there is none (synthetic models). Checks the vocabulary fits the model.
std::unique_ptr<Tokenizer> load_tokenizer(const Model& model, const std::string& override_path);

}  // namespace llm
