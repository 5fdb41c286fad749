// The pre-tokenizer split (tokenizer/bpe_split.h) over PCRE2: compile once per pattern, then HF's "Isolated" walk.
#include "tokenizer/bpe_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/error.h"  // llm::fail

namespace llm {

SplitRegex::SplitRegex(const std::string& pattern, const std::string& where) : where_(where) {
  int err = 0;
  PCRE2_SIZE at = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                        &at, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("tokenizer ", where, ": cannot compile the pre-tokenizer regex at offset ", at, " (",
         reinterpret_cast<char*>(msg), ")");
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // a speed-up only: matching falls back to the interpreter
}

SplitRegex::~SplitRegex() { pcre2_code_free(code_); }

void SplitRegex::split(std::string_view s, std::vector<std::string_view>* out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  // One match of a real pattern may scan a whole whitespace run twice (Llama 3's \s*[\r\n]+ backtracks through
  // it), so the step limit grows with the text; it is there so that a pathological pattern from a bad file fails
  // instead of hanging.
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
      pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  pcre2_set_match_limit(context.get(), uint32_t(std::min<size_t>(10000000 + 16 * s.size(), UINT32_MAX)));
  size_t prev = 0, start = 0;
  while (start <= s.size()) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, PCRE2_NO_UTF_CHECK,
                               md.get(), context.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("tokenizer ", where_, ": the pre-tokenizer regex failed on the text (", reinterpret_cast<char*>(msg), ")");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (b > prev) out->push_back(s.substr(prev, b - prev));
    if (e > b) out->push_back(s.substr(b, e - b));
    prev = std::max(prev, e);
    if (e > b) {
      start = e;
    } else {  // step over one character after an empty match
      if (e >= s.size()) break;
      size_t len = 1;
      while (e + len < s.size() && (static_cast<unsigned char>(s[e + len]) & 0xC0) == 0x80) ++len;
      start = e + len;
    }
  }
  if (prev < s.size()) out->push_back(s.substr(prev));
}

}  // namespace llm
