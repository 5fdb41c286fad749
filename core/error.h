// Errors: one exception type carrying a one-line, user-facing message (file, tensor, expected vs found).
// Apps catch it at the top, print "error: <what>" and exit non-zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace llm {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}

// Length of the well-formed UTF-8 character at s[i], or 0 when the bytes there are not one.
inline size_t utf8_char_len(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + len > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((at(i + k) & 0xC0) != 0x80) return 0;
  return len;
}
}  // namespace detail

// A string read from a file, made fit for a one-line message: control characters (C0, DEL, and the C1 range
// U+0080..U+009F) and bytes that are not UTF-8 are escaped (\n, \r, \t, \xHH), and at most `max` bytes are written,
// then "... (N bytes)" with the value's full size. fail(path, ": tensor ", printable(name), ...).
inline std::string printable(std::string_view s, size_t max = 200) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  std::string piece;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    piece.clear();
    const auto hex = [&](unsigned char b) { piece += "\\x"; piece += kHex[b >> 4]; piece += kHex[b & 15]; };
    if (c >= 0x20 && c < 0x7F) {
      piece += char(c);
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c < 0x80) {
      hex(c);
    } else if ((len = detail::utf8_char_len(s, i)) == 0) {
      len = 1;
      hex(c);
    } else if (c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1 control (0x9B is a CSI)
      hex(c);
      hex(static_cast<unsigned char>(s[i + 1]));
    } else {
      piece.assign(s.data() + i, len);
    }
    if (piece.size() > max - out.size()) break;
    out += piece;
    i += len;
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// A whole message for the terminal: control characters escaped, nothing cut (the values in it are already capped).
inline std::string printable_message(std::string_view s) { return printable(s, SIZE_MAX); }

// fail("tensor ", name, ": expected ", a, ", found ", b) throws llm::Error with the concatenation.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

}  // namespace llm
