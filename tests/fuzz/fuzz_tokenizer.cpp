// libFuzzer target: arbitrary bytes as a prompt (and as raw token ids) through tok512, stream-decoded; every
// push() must be well-formed UTF-8 and the stream must rebuild the library's decode(). Built with -DLLM_FUZZ=ON
// (tests/fuzz/CMakeLists.txt); LLM_TOKENIZER_MODEL=path overrides the model.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

#ifndef LLM_SHARED_DIR
#define LLM_SHARED_DIR "../shared"
#endif

namespace {

// Strict UTF-8: no truncation, overlong forms, surrogates or values above U+10FFFF.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_tokenizer: %s: %s\n", what, detail.c_str());
  std::abort();
}

const llm::Tokenizer& tokenizer() {
  static const auto tok = [] {
    const char* env = std::getenv("LLM_TOKENIZER_MODEL");
    return llm::Tokenizer::load(env ? env : LLM_SHARED_DIR "/models/stories260K/tok512.model");
  }();
  return *tok;
}

void check_stream(const llm::Tokenizer& tok, const std::vector<int>& ids) {
  llm::StreamDecoder dec(tok);
  std::string all;
  for (int id : ids) {
    const std::string out = dec.push(id);
    if (!valid_utf8(out)) die("malformed UTF-8 from push", out);
    all += out;
  }
  const std::string rest = dec.flush();
  if (!valid_utf8(rest)) die("malformed UTF-8 from flush", rest);
  all += rest;
  if (all != tok.decode(ids)) die("stream differs from decode", all + " vs " + tok.decode(ids));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const llm::Tokenizer& tok = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_stream(tok, tok.encode(text, true));
  // The same bytes as generated ids: sequences encode() never makes (split byte runs, stray control ids).
  std::vector<int> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | data[i + 1] << 8) % tok.vocab_size());
  check_stream(tok, ids);
  return 0;
}
