// libFuzzer target: arbitrary bytes as a prompt (and as raw token ids) through tok512, stream-decoded; every
// push() must be well-formed UTF-8 and the stream must rebuild the library's decode(). Built with -DLLM_FUZZ=ON
// (tests/fuzz/CMakeLists.txt); LLM_TOKENIZER_MODEL=path overrides the model.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

#ifndef LLM_TEST_MODELS
#define LLM_TEST_MODELS "tests/data/models"
#endif

namespace {

const llm::Tokenizer& tokenizer() {
  static const auto tok = [] {
    const char* env = std::getenv("LLM_TOKENIZER_MODEL");
    return llm::load_tokenizer_file(env ? env : LLM_TEST_MODELS "/stories260K/tok512.model");
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const llm::Tokenizer& tok = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  llm_fuzz::check_stream("fuzz_tokenizer", tok, tok.encode(text, true));
  // The same bytes as generated ids: sequences encode() never makes (split byte runs, stray control ids).
  std::vector<int> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | data[i + 1] << 8) % tok.vocab_size());
  llm_fuzz::check_stream("fuzz_tokenizer", tok, ids);
  return 0;
}
