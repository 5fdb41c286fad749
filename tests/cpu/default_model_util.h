// The fetched default model (SmolLM2-135M-Instruct, scripts/fetch-model.sh) for tests: its path, or a skip with the
// reason; when LLM_REQUIRE_MODELS=1 (scripts/test.sh, CI) a missing model is a failure instead.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "models/default_model.h"  // kDefaultModelFile

namespace llm_test {

inline std::string smollm2_path() {
  return std::string(LLM_SOURCE_DIR) + "/models-cache/" + llm::kDefaultModelFile;
}

inline bool models_required() {
  const char* v = std::getenv("LLM_REQUIRE_MODELS");
  return v && std::string(v) == "1";
}

}  // namespace llm_test

// Use at the top of a test: returns from it (skipped, or failed under LLM_REQUIRE_MODELS=1) without the model.
#define LLM_REQUIRE_SMOLLM2()                                                                            \
  do {                                                                                                   \
    if (!std::filesystem::is_regular_file(llm_test::smollm2_path())) {                                   \
      if (llm_test::models_required()) FAIL() << llm_test::smollm2_path() << " missing (LLM_REQUIRE_MODELS=1)"; \
      GTEST_SKIP() << "run scripts/setup.sh to fetch SmolLM2 (" << llm_test::smollm2_path() << ")";     \
    }                                                                                                    \
  } while (0)
