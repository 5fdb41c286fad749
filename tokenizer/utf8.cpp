// UTF-8 scanning shared by the sentencepiece stream decoder and the byte-level BPE decoder.
#include "tokenizer/utf8.h"

namespace llm {

Utf8Step utf8_step(const std::string& s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (b0 < 0x80) return Utf8Step::kChar;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte; the lead byte narrows it
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong below U+10000
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return Utf8Step::kInvalid;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return Utf8Step::kTruncated;  // *len bytes so far, all a valid prefix
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return Utf8Step::kInvalid;
    *len = k + 1;
  }
  return Utf8Step::kChar;
}

}  // namespace llm
