// The prompt options run-llama and llama-ab share, declared once: -p/--prompt, -f/--file and --prompt-ids, of which a
// run takes one (engine/prompt_input.h reads the file and the ids). Each app words --prompt's help for what it does
// with the text.
#pragma once
#include <string>

#include "apps/cli.h"

namespace llm::cli {

struct PromptOptions {
  std::string text;  // -p/--prompt
  std::string file;  // -f/--file: the prompt text from a file
  std::string ids;   // --prompt-ids A,B,C or @FILE
};

inline void add_prompt_options(Options& o, PromptOptions* p, const char* prompt_help, const char* ids_note) {
  o.text("-p, --prompt", "TEXT", &p->text, prompt_help);
  o.text("-f, --file", "FILE", &p->file, "read the prompt text from FILE (as llama.cpp: one trailing newline removed)");
  o.text("--prompt-ids", "A,B,C", &p->ids,
         std::string("the prompt as token ids, used as given (no BOS added); separated by commas and/or whitespace; "
                     "--prompt-ids @FILE reads them from FILE (any length)") +
             ids_note);
}

// Two prompt options given: bad usage naming the first two in the order given.
inline void check_one_prompt(const Options& o) {
  o.exclusive({"--prompt", "--file", "--prompt-ids"}, "give the prompt once");
}

}  // namespace llm::cli
