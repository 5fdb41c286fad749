// The byte-level BPE pre-tokenizer: the split patterns the tokenizer knows (tokenizer.json's pre-tokenizers and
// GGUF's "pre" names map onto them) and one compiled pattern's split. Apart from tokenizer/bpe.cpp so that the PCRE2
// handling reads on its own; only bpe.cpp uses it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;  // PCRE2's compiled pattern (pcre2_code with PCRE2_CODE_UNIT_WIDTH 8)

namespace llm {

// ByteLevel's own split (GPT-2), and Llama 3's Split pattern (also llama.cpp's "llama-bpe").
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
    R"(\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kDigitPattern = R"(\p{N})";  // Digits(individual_digits=true): each digit alone
inline constexpr const char* kDigitsPattern = R"(\p{N}+)";

// A compiled pre-tokenizer split pattern; pieces are HF's "Isolated" split: every match and every gap between them.
class SplitRegex {
 public:
  // Compiles `pattern` (UTF, Unicode properties, JIT where available); a bad one fails naming `where` (the file).
  SplitRegex(const std::string& pattern, const std::string& where);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // s must be well-formed UTF-8 (checked by the caller: PCRE2_NO_UTF_CHECK on anything else is undefined).
  // An empty match produces no piece but ends the gap before it, as the onig find_iter HF uses does.
  void split(std::string_view s, std::vector<std::string_view>* out) const;

 private:
  std::string where_;
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace llm
