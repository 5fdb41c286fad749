// The command-line helper every app shares (header-only: apps/*.cpp each build one program). One vocabulary of bad
// usage: `value` takes an option's argument, `parse_int` / `parse_float` check a number against its range,
// `parse_kv_dtype` names a KV-cache type, and
// `run_main` prints every failure the same way:
//   bad usage (UsageError, or any llm::Error while parsing):  error: MSG
//                                                             run 'PROG --help' for the options        exit 2
//   anything else (a bad model, file, device):                error: MSG                               exit 1
// Messages go through llm::printable_message (no raw control bytes reach the terminal).
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/kv_dtype.h"  // --kv-dtype

namespace llm::cli {

// Bad usage: the command line itself is wrong (exit 2, with the --help hint).
struct UsageError : Error {
  using Error::Error;
};

// usage_error("--ab: empty list") throws UsageError with the concatenation (as llm::fail does for llm::Error).
template <typename... Args>
[[noreturn]] void usage_error(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw UsageError(os.str());
}

// Runs f(); an llm::Error it throws is bad usage (for checks shared with non-command-line code, e.g. a mapping name).
template <typename F>
decltype(auto) as_usage(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

// The argument after argv[i] (i moves to it), or bad usage "FLAG needs a value".
inline std::string value(int argc, char** argv, int& i, const std::string& flag) {
  if (i + 1 >= argc) usage_error(flag, " needs a value");
  return argv[++i];
}

// A decimal integer in [lo, hi], the whole text, or bad usage "FLAG: invalid value 'TEXT' (allowed: ALLOWED)";
// `allowed` "" = "LO to HI".
inline long long parse_int(const std::string& flag, const std::string& text, long long lo, long long hi,
                           const std::string& allowed = "") {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    usage_error(flag, ": invalid value '", text, "' (allowed: ",
                allowed.empty() ? std::to_string(lo) + " to " + std::to_string(hi) : allowed, ")");
  return v;
}

// --kv-dtype's value: f32, bf16 or fp8, or bad usage "FLAG: invalid value 'TEXT' (allowed: f32, bf16, fp8)". Which
// device takes which type is the engine's call (llm::kv_dtype_refusal, engine/backend.h).
inline KvDtype parse_kv_dtype(const std::string& flag, const std::string& text) {
  KvDtype t = KvDtype::Default;
  if (!kv_dtype_from_name(text, &t)) usage_error(flag, ": invalid value '", text, "' (allowed: ", kKvDtypeNames, ")");
  return t;
}

// Whether a range's lower end belongs to it: [lo, hi] or (lo, hi].
enum class Lower { closed, open };

// A finite number in [lo, hi] (or (lo, hi] with Lower::open), the whole text, or bad usage
// "FLAG: invalid value 'TEXT' (allowed: ALLOWED)"; `allowed` says the range in words ("greater than 0, at most 1").
inline double parse_float(const std::string& flag, const std::string& text, double lo, double hi,
                          const std::string& allowed, Lower lower = Lower::closed) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool ok = !text.empty() && *end == '\0' && errno != ERANGE && v == v && v <= hi &&
                  (lower == Lower::open ? v > lo : v >= lo);
  if (!ok) usage_error(flag, ": invalid value '", text, "' (allowed: ", allowed, ")");
  return v;
}

// Prints a failure as the header says and returns the exit status: 2 for UsageError, 1 for anything else.
inline int report(const char* prog, const std::exception& e) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", printable_message(e.what()).c_str());
  if (dynamic_cast<const UsageError*>(&e)) {
    std::fprintf(stderr, "run '%s --help' for the options\n", prog);
    return 2;
  }
  return 1;
}

// main() of every app: options = parse(argc, argv) (any llm::Error there is bad usage), then run(options); failures
// are printed by report(). --help prints and exits 0 inside parse.
template <typename Parse, typename Run>
int run_main(const char* prog, int argc, char** argv, Parse&& parse, Run&& run) {
  try {
    const auto options = as_usage([&] { return parse(argc, argv); });
    return run(options);
  } catch (const std::exception& e) {
    return report(prog, e);
  }
}

}  // namespace llm::cli
