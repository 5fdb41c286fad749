// The command-line helper every app shares (header-only: apps/*.cpp each build one program).
//
// One option table: each option is declared once, with its names, value name, help text, default and allowed range
// or choices; parsing, range checks and --help come from the table. For example:
//
//   Args parse_args(int argc, char** argv) {
//     Args a;                                              // the defaults are the fields' initial values
//     llm::cli::Options o("usage: prog --model PATH [options]\n\nWhat it does, in a sentence or two.\n");
//     o.text("-m, --model", "PATH", &a.model, "GGUF file or synthetic:NAME");
//     o.integer("-n, --n-predict", "N", &a.n, 1, 1000000, "tokens to generate");  // default shown: a.n
//     o.real("--top-p", "P", &a.top_p, 0.0, 1.0, "nucleus size", Lower::open);    // allowed: greater than 0, at most 1
//     o.choice("--device", "DEV", &a.device, {"cpu", "cuda", "auto"}, "where to run");
//     o.choice("--decode", "PATH", &a.decode, {"graph", "persistent"}, llm::parse_decode_path, "decode path")
//         .default_is("graph");                                                  // an enum, parsed once
//     o.integers("--sizes", "A,B", &a.sizes, 1, 4096, "comma-separated sizes");
//     o.flag("--json", &a.json, "JSON lines instead of the table");
//     o.parse(argc, argv);                                 // --help prints o.help() and exits 0
//     o.exclusive({"--prompt", "--file"}, "give the prompt once");  // "--file and --prompt exclude each other: ..."
//     if (o.given("--seed") && ...) usage_error(...);      // other cross-option rules stay in the app
//     return a;
//   }
//   int main(int argc, char** argv) { return llm::cli::run_main("prog", argc, argv, parse_args, run); }
//
// (Lower is llm::cli::Lower.) --help prints the usage text, each option as "  -n, --n-predict N   HELP (default: D;
// allowed: A)" under its section, wrapped at 118 columns, then the epilogue. `section` starts a group, `epilogue` adds
// text after the options (a list of mappings, ...), `custom` takes any other value form, `default_is` and `allowed`
// say in words what a field's initial value or the range do not.
//
// The table is the one way to read options: its value and number parsers are private to it. One vocabulary of bad
// usage, the same for every option of every table (and for parse_kv_dtype below):
//   unknown option:       unknown option 'X'
//   no value:             FLAG needs a value
//   a value out of range: FLAG: invalid value 'TEXT' (allowed: ALLOWED)          (FLAG as the user spelled it)
// `run_main` prints every failure the same way:
//   bad usage (UsageError, or any llm::Error while parsing):  error: MSG
//                                                             run 'PROG --help' for the options        exit 2
//   anything else (a bad model, file, device):                error: MSG                               exit 1
// Messages go through llm::printable_message (no raw control bytes reach the terminal).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

// --kv-dtype's value: f32, bf16 or fp8, or bad usage "FLAG: invalid value 'TEXT' (allowed: f32, bf16, fp8)". Which
// device takes which type is the engine's call (llm::kv_dtype_refusal, engine/backend.h).
inline KvDtype parse_kv_dtype(const std::string& flag, const std::string& text) {
  KvDtype t = KvDtype::Default;
  if (!kv_dtype_from_name(text, &t)) usage_error(flag, ": invalid value '", text, "' (allowed: ", kKvDtypeNames, ")");
  return t;
}

// "a,,b" -> {"a", "b"}: a comma-separated list as the list options take it (empty items skipped).
inline std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Whether a range's lower end belongs to it: [lo, hi] or (lo, hi].
enum class Lower { closed, open };

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

// ---- the option table ----

// One option of a table: made by an Options adder, which sets how its value is parsed and checked; the setters below
// adjust what --help shows (and, for `allowed`, what a bad value's message says).
class Option {
 public:
  // The default as --help states it, when the field's initial value does not say it ("the model's maximum").
  Option& default_is(std::string text) {
    default_ = std::move(text);
    return *this;
  }
  // What the option takes, in words ("0 to 2^62", "0 to 16777216, 0 = all"): shown by --help and said in the
  // "invalid value" message of a number or list option.
  Option& allowed(std::string text) {
    allowed_ = std::move(text);
    return *this;
  }

 private:
  friend class Options;
  std::vector<std::string> names_;  // as declared, e.g. {"-n", "--n-decode", "--n-predict"}
  std::string value_name_;          // "N"; "" = a flag, which takes no value
  std::string help_, default_, allowed_;
  // Parses `text`, the value given to `flag` (as spelled on the line), into the option's field.
  std::function<void(const Option& self, const std::string& flag, const std::string& text)> apply_;
};

class Options {
 public:
  // `usage`: the synopsis and a description, printed first by --help.
  explicit Options(std::string usage) : usage_(std::move(usage)) {}

  // A heading above the options declared after it: "----- TITLE -----".
  void section(const std::string& title) { entries_.push_back({title, {}}); }
  // Text printed after the options (e.g. the list of GEMV mappings).
  void epilogue(const std::string& text) { epilogue_ += text; }

  // `names`: "-n, --n-predict" (one short name at most, long names; the first long one names the option in messages
  // that are not about one spelling, and further long ones are aliases). `value`: the value's name in --help.

  Option& flag(const char* names, bool* target, std::string help) {
    return add(names, "", std::move(help), [target](const Option&, const std::string&, const std::string&) {
      *target = true;
    });
  }

  Option& text(const char* names, const char* value, std::string* target, std::string help) {
    Option& o = add(names, value, std::move(help),
                    [target](const Option&, const std::string&, const std::string& t) { *target = t; });
    o.default_ = *target;
    return o;
  }

  // A decimal integer in [lo, hi] (allowed "LO to HI" unless set).
  template <typename T>
  Option& integer(const char* names, const char* value, T* target, long long lo, long long hi, std::string help) {
    static_assert(std::is_integral_v<T>);
    Option& o = add(names, value, std::move(help),
                    [target, lo, hi](const Option& self, const std::string& flag, const std::string& t) {
                      *target = T(parse_int(flag, t, lo, hi, self.allowed_));
                    });
    o.default_ = std::to_string(*target);
    o.allowed_ = std::to_string(lo) + " to " + std::to_string(hi);
    return o;
  }

  // A finite number in [lo, hi], or (lo, hi] with Lower::open (allowed "LO to HI" or "greater than LO, at most HI").
  template <typename T>
  Option& real(const char* names, const char* value, T* target, double lo, double hi, std::string help,
               Lower lower = Lower::closed) {
    static_assert(std::is_floating_point_v<T>);
    Option& o = add(names, value, std::move(help),
                    [target, lo, hi, lower](const Option& self, const std::string& flag, const std::string& t) {
                      *target = T(parse_float(flag, t, lo, hi, self.allowed_, lower));
                    });
    o.default_ = number(double(*target));
    o.allowed_ = lower == Lower::open ? "greater than " + number(lo) + ", at most " + number(hi)
                                      : number(lo) + " to " + number(hi);
    return o;
  }

  // One of `allowed`, stored as given.
  Option& choice(const char* names, const char* value, std::string* target, std::vector<std::string> allowed,
                 std::string help) {
    return choice(names, value, target, std::move(allowed), [](const std::string& t) { return t; }, std::move(help))
        .default_is(*target);
  }

  // One of `allowed`, stored as convert(text): an enum parsed once, at the command line. The default is not shown
  // unless set with default_is (an enum has no name here).
  template <typename E, typename Convert>
  Option& choice(const char* names, const char* value, E* target, std::vector<std::string> allowed, Convert convert,
                 std::string help) {
    Option& o = add(names, value, std::move(help), [target, allowed, convert](const Option&, const std::string& flag,
                                                                               const std::string& t) {
      for (const std::string& a : allowed)
        if (t == a) {
          *target = convert(t);
          return;
        }
      usage_error(flag, ": invalid value '", t, "' (allowed: ", join(allowed), ")");
    });
    o.allowed_ = join(allowed);
    return o;
  }

  // Comma-separated integers, each in [lo, hi] (empty items are skipped); the list replaces the default. A bad item
  // is named alone: "--sizes: invalid value 'x' (allowed: 1 to 4096)".
  template <typename T>
  Option& integers(const char* names, const char* value, std::vector<T>* target, long long lo, long long hi,
                   std::string help) {
    Option& o = add(names, value, std::move(help),
                    [target, lo, hi](const Option& self, const std::string& flag, const std::string& t) {
                      target->clear();
                      for (const std::string& item : split_commas(t))
                        target->push_back(T(parse_int(flag, item, lo, hi, self.allowed_)));
                    });
    for (const T& v : *target) o.default_ += (o.default_.empty() ? "" : ",") + std::to_string(v);
    o.allowed_ = std::to_string(lo) + " to " + std::to_string(hi);
    return o;
  }

  // Any other value form: apply(flag, text) parses, checks (throwing UsageError or llm::Error, both bad usage) and
  // stores. Set what --help shows with default_is and allowed.
  Option& custom(const char* names, const char* value,
                 std::function<void(const std::string& flag, const std::string& text)> apply, std::string help) {
    return add(names, value, std::move(help),
               [apply = std::move(apply)](const Option&, const std::string& flag, const std::string& t) {
                 apply(flag, t);
               });
  }

  // Walks argv: -h/--help prints help() to stdout and exits 0; an unknown option, a missing value or a bad one is
  // bad usage (UsageError). Options apply in the order given; a repeated one keeps its last value.
  void parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "-h" || flag == "--help") {
        std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      Option* o = find(flag);
      if (!o) usage_error("unknown option '", flag, "'");
      o->apply_(*o, flag, o->value_name_.empty() ? std::string() : value(argc, argv, i, flag));
      const std::string name = canonical(*o);
      bool seen = false;
      for (const std::string& g : given_) seen = seen || g == name;
      if (!seen) given_.push_back(name);
    }
  }

  // Whether the option named `name` (any of its names) was given.
  bool given(const std::string& name) const {
    const Option* o = find(name);
    if (!o) return false;
    for (const std::string& g : given_)
      if (g == canonical(*o)) return true;
    return false;
  }

  // Options that exclude each other: when two of `names` were given, bad usage naming the first two given, in
  // that order: "--prompt and --file exclude each other: WHY".
  void exclusive(std::initializer_list<const char*> names, const std::string& why) const {
    std::vector<std::string> hit;
    for (const std::string& g : given_)
      for (const char* n : names)
        if (const Option* o = find(n); o && canonical(*o) == g) hit.push_back(g);
    if (hit.size() > 1) usage_error(hit[0], " and ", hit[1], " exclude each other: ", why);
  }

  // The --help text: usage, every option under its section with "(default: D; allowed: A)", then the epilogue.
  std::string help() const {
    size_t col = 20;  // the help text's column after the short names: the longest "--name VALUE" and two spaces
    for (const Entry& e : entries_)
      if (e.section.empty()) col = std::max(col, label(e.option).size() + 2);
    std::string out = usage_;
    if (!out.empty() && out.back() != '\n') out += '\n';
    for (const Entry& e : entries_) {
      if (!e.section.empty()) {
        out += "\n----- " + e.section + " -----\n";
        continue;
      }
      const Option& o = e.option;
      std::string text = o.help_;
      for (size_t i = 1; i < o.names_.size(); ++i)
        if (o.names_[i].rfind("--", 0) == 0 && o.names_[i] != canonical(o)) text += " (also " + o.names_[i] + ")";
      std::string notes;
      if (!o.default_.empty()) notes += "default: " + o.default_;
      if (!o.allowed_.empty()) notes += (notes.empty() ? "" : "; ") + std::string("allowed: ") + o.allowed_;
      if (!notes.empty()) text += " (" + notes + ")";
      out += line(short_name(o), label(o), text, col);
    }
    out += line("-h", "--help", "print this help and exit", col);
    if (!epilogue_.empty()) out += "\n" + epilogue_;
    return out;
  }

 private:
  struct Entry {
    std::string section;  // a heading; "" = an option
    Option option;
  };
  static constexpr size_t kWidth = 118;  // the tree's line width, less two

  // The argument after argv[i] (i moves to it), or bad usage "FLAG needs a value".
  static std::string value(int argc, char** argv, int& i, const std::string& flag) {
    if (i + 1 >= argc) usage_error(flag, " needs a value");
    return argv[++i];
  }

  // A decimal integer in [lo, hi], the whole text, or bad usage "FLAG: invalid value 'TEXT' (allowed: ALLOWED)".
  static long long parse_int(const std::string& flag, const std::string& text, long long lo, long long hi,
                             const std::string& allowed) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
      usage_error(flag, ": invalid value '", text, "' (allowed: ", allowed, ")");
    return v;
  }

  // A finite number in [lo, hi] (or (lo, hi] with Lower::open), the whole text, or bad usage
  // "FLAG: invalid value 'TEXT' (allowed: ALLOWED)".
  static double parse_float(const std::string& flag, const std::string& text, double lo, double hi,
                            const std::string& allowed, Lower lower) {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    const bool ok = !text.empty() && *end == '\0' && errno != ERANGE && v == v && v <= hi &&
                    (lower == Lower::open ? v > lo : v >= lo);
    if (!ok) usage_error(flag, ": invalid value '", text, "' (allowed: ", allowed, ")");
    return v;
  }

  Option& add(const char* names, const char* value, std::string help,
              std::function<void(const Option&, const std::string&, const std::string&)> apply) {
    Option o;
    std::stringstream ss(names);
    for (std::string n; std::getline(ss, n, ',');) {
      n.erase(0, n.find_first_not_of(' '));
      if (!n.empty()) o.names_.push_back(n);
    }
    o.value_name_ = value;
    o.help_ = std::move(help);
    o.apply_ = std::move(apply);
    entries_.push_back({"", std::move(o)});
    return entries_.back().option;  // a deque: references stay valid as options are added
  }

  Option* find(const std::string& flag) {
    return const_cast<Option*>(static_cast<const Options*>(this)->find(flag));
  }
  const Option* find(const std::string& flag) const {
    for (const Entry& e : entries_)
      if (e.section.empty())
        for (const std::string& n : e.option.names_)
          if (n == flag) return &e.option;
    return nullptr;
  }

  // The first long name ("--n-predict"), or the only name.
  static std::string canonical(const Option& o) {
    for (const std::string& n : o.names_)
      if (n.rfind("--", 0) == 0) return n;
    return o.names_.front();
  }
  // The short name ("-n") beside a long one; "" when there is none (or it is the only name, shown as the label).
  static std::string short_name(const Option& o) {
    for (const std::string& n : o.names_)
      if (n.rfind("--", 0) != 0 && n != canonical(o)) return n;
    return "";
  }
  static std::string label(const Option& o) {
    return canonical(o) + (o.value_name_.empty() ? "" : " " + o.value_name_);
  }

  // "  -n, --n-predict N    TEXT", TEXT wrapped at kWidth with its continuation lines under its first.
  static std::string line(const std::string& short_name, const std::string& label, const std::string& text,
                          size_t col) {
    const std::string head = "  " + (short_name.empty() ? std::string("    ") : short_name + ", ") + label;
    const size_t indent = 6 + col;
    std::string out = head;
    if (head.size() + 2 > indent)
      out += "\n" + std::string(indent, ' ');
    else
      out.resize(indent, ' ');
    size_t at = indent;
    std::stringstream words(text);
    bool first = true;
    for (std::string w; words >> w; first = false) {
      if (!first && at + 1 + w.size() > kWidth) {
        out += "\n" + std::string(indent, ' ');
        at = indent;
      } else if (!first) {
        out += ' ';
        ++at;
      }
      out += w;
      at += w.size();
    }
    return out + "\n";
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  }
  // 0.8, 100, 1e-05: whole numbers as written, others the shortest %g that reads back as the float the field holds.
  static std::string number(double v) {
    char buf[32];
    if (v == double(int64_t(v)) && v > -1e15 && v < 1e15) {
      std::snprintf(buf, sizeof buf, "%lld", (long long)v);
      return buf;
    }
    for (int digits = 1; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtof(buf, nullptr) == float(v)) break;
    }
    return buf;
  }

  std::string usage_, epilogue_;
  std::deque<Entry> entries_;
  std::vector<std::string> given_;  // the canonical names of the options given, each once, in the order first given
};

}  // namespace llm::cli
