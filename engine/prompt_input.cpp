// Prompt files and id lists (see engine/prompt_input.h).
#include "engine/prompt_input.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace llm {

namespace {

bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// "item 3" or "item 3, line 2" (the line only where the list has several).
std::string where(size_t item, int line, bool multiline) {
  std::string s = "item " + std::to_string(item);
  if (multiline) s += ", line " + std::to_string(line);
  return s;
}

std::string range_text(int vocab_size) {
  return vocab_size > 0 ? " in [0, " + std::to_string(vocab_size) + ")"
                        : " (decimal ids separated by commas or whitespace)";
}

}  // namespace

std::string read_input_file(const std::string& flag, const std::string& path) {
  if (path.empty()) fail(flag, ": no file name given");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(flag, ": ", path, " is a directory");
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(flag, ": cannot read ", path, ": ", std::strerror(errno ? errno : ENOENT));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f.get());
    if (text.size() + n > kMaxPromptFileBytes)  // also ends reading a device that never ends (/dev/zero)
      fail(flag, ": ", path, " is larger than ", kMaxPromptFileBytes, " bytes; not a prompt");
    text.append(buf, n);
    if (n < sizeof buf) break;
  }
  if (std::ferror(f.get())) fail(flag, ": cannot read ", path, ": ", std::strerror(errno ? errno : EIO));
  if (text.empty()) fail(flag, ": ", path, " is empty");
  return text;
}

std::string read_prompt_file(const std::string& path, const std::string& flag) {
  std::string text = read_input_file(flag, path);
  if (text.back() == '\n') text.pop_back();  // as llama.cpp's -f: an editor's final newline is not part of the prompt
  if (text.empty()) fail(flag, ": ", path, " is empty (one newline, no text)");
  return text;
}

PromptIdsArg read_prompt_ids_arg(const std::string& value, const std::string& flag) {
  if (value.empty() || value[0] != '@') return {flag, value};
  const std::string path = value.substr(1);
  if (path.empty()) fail(flag, " @: no file name after '@' (use --prompt-ids @FILE)");
  return {flag + " @" + path, read_input_file(flag, path)};
}

std::vector<int> parse_token_ids(const std::string& text, const std::string& source, int vocab_size) {
  const bool multiline = text.find('\n') != std::string::npos && text.find('\n') + 1 < text.size();
  const int64_t limit = vocab_size > 0 ? vocab_size : int64_t(INT32_MAX) + 1;
  std::vector<int> ids;
  int line = 1;
  bool comma = false;  // a comma since the last id
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ',') {
      if (ids.empty()) fail(source, ": empty id before the first comma");
      if (comma) fail(source, ": empty id between two commas (after ", where(ids.size(), line, multiline), ")");
      comma = true;
      ++i;
      continue;
    }
    if (is_separator(c)) {
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    const size_t b = i;
    while (i < text.size() && !is_separator(text[i])) ++i;
    const std::string item = text.substr(b, i - b);
    int64_t v = 0;
    bool digits = true;
    for (char d : item) {
      if (d < '0' || d > '9') {
        digits = false;
        break;
      }
      v = v * 10 + (d - '0');
      if (v >= limit) v = limit;  // saturate: stays out of range, never overflows
    }
    if (!digits || v >= limit)
      fail(source, ": '", printable(item, 40), "' (", where(ids.size() + 1, line, multiline),
           ") is not a token id", range_text(vocab_size));
    ids.push_back(int(v));
    comma = false;
  }
  if (ids.empty()) fail(source, ": no ids given");
  return ids;
}

void check_token_ids(const std::vector<int>& ids, const std::string& source, int vocab_size) {
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids[k] < 0 || ids[k] >= vocab_size)
      fail(source, ": '", ids[k], "' (item ", k + 1, ") is not a token id in [0, ", vocab_size, ")");
}

std::vector<int> prompt_ids_from_arg(const std::string& value, int vocab_size) {
  const PromptIdsArg a = read_prompt_ids_arg(value);
  return parse_token_ids(a.text, a.source, vocab_size);
}

}  // namespace llm
