// The one UTF-8 scanner of the tokenizers: well-formed characters exactly as the Unicode standard (and both the
// sentencepiece library and Hugging Face's decoders) define them: no overlong forms, surrogates or values above
// U+10FFFF.
#pragma once
#include <cstddef>
#include <string>

namespace llm {

// One step of a lossy UTF-8 scan as Rust's String::from_utf8_lossy (HF decode) does it, at s[i]:
//   kChar:      a well-formed character of `len` bytes;
//   kTruncated: the `len` bytes up to the end of s are a proper prefix of a well-formed character (more bytes may
//               complete it; if none come, they become one U+FFFD);
//   kInvalid:   the `len` >= 1 bytes at i are a maximal ill-formed subsequence: one U+FFFD.
enum class Utf8Step { kChar, kTruncated, kInvalid };
Utf8Step utf8_step(const std::string& s, size_t i, size_t* len);

}  // namespace llm
