// Errors: one exception type carrying a one-line, user-facing message (file, tensor, expected vs found).
// Apps catch it at the top, print "error: <what>" and exit non-zero.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

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
}  // namespace detail

// fail("tensor ", name, ": expected ", a, ", found ", b) throws llm::Error with the concatenation.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

}  // namespace llm
