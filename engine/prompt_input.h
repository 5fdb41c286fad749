// Where a prompt comes from on a command line, read and checked in one place for every app (run-llama, llama-ab):
//   -f, --file FILE      the prompt text from FILE, as llama.cpp reads it (the whole file, one trailing newline
//                        removed);
//   --prompt-ids LIST    token ids, decimal, separated by commas and/or whitespace (spaces, tabs, newlines);
//   --prompt-ids @FILE   the same list read from FILE (a 32K-token prompt is longer than one argv string may be).
// Every failure is one llm::Error line naming the option and the file or value: a missing, unreadable or empty file,
// a directory, an item that is not a decimal id, an id outside the vocabulary, no ids at all.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace llm {

// A prompt or id file larger than this is refused (a 128K-token prompt is well under 1 MiB of text).
constexpr size_t kMaxPromptFileBytes = size_t(64) << 20;

// The whole of FILE, for option FLAG. Throws llm::Error "FLAG: cannot read FILE: REASON", "FLAG: FILE is a
// directory", "FLAG: FILE is larger than 67108864 bytes; not a prompt" or "FLAG: FILE is empty".
std::string read_input_file(const std::string& flag, const std::string& path);

// -f/--file: the prompt text of FILE with one trailing '\n' removed (as llama.cpp's -f); refused when nothing is left.
std::string read_prompt_file(const std::string& path, const std::string& flag = "--file");

// The value of --prompt-ids: "@FILE" = the list in FILE (read here), anything else = the list itself.
struct PromptIdsArg {
  std::string source;  // names the list in errors: "--prompt-ids" or "--prompt-ids @FILE"
  std::string text;    // the list
};
PromptIdsArg read_prompt_ids_arg(const std::string& value, const std::string& flag = "--prompt-ids");

// The ids of a list: decimal numbers separated by commas and/or whitespace; one trailing comma is allowed, an empty
// item (two commas in a row, or a comma first) is not. vocab_size > 0: every id must be in [0, vocab_size); 0: any
// id up to 2^31 - 1 (the vocabulary is checked later with check_token_ids). Errors name `source`, the item as written,
// its number in the list and, for a list of several lines, its line.
std::vector<int> parse_token_ids(const std::string& text, const std::string& source, int vocab_size);

// Throws llm::Error "SOURCE: 'ID' (item K) is not a token id in [0, VOCAB)" for the first id outside the vocabulary.
void check_token_ids(const std::vector<int>& ids, const std::string& source, int vocab_size);

// read_prompt_ids_arg + parse_token_ids.
std::vector<int> prompt_ids_from_arg(const std::string& value, int vocab_size);

}  // namespace llm
