// The chat REPL behind run-llama --chat: a ChatSession driven by a terminal (GNU readline, history, streamed replies,
// a dim stats note after each) or by lines on stdin, with the commands /help /reset /system /stats /gemv /quit.
//
// Without a terminal (stdin or stdout not a tty) the line protocol is, exactly:
//   stdin:  one user turn per line (empty lines are skipped); a line starting with "/" is a command ("//x" sends
//           the turn "/x"); end of input quits.
//   stdout: for each user turn its reply text (possibly empty, possibly several lines), then one "\n". Nothing else.
//   stderr: everything else, one line each: the banner, after each reply a note "[N tokens, R tokens/s]" ("1 token";
//           or "[interrupted: ...]", "[length: ...]"), context-full messages ("context full: ..."), command output.
//           The terminal's key hints (Ctrl-C, Ctrl-D) and its ANSI dim style are left out.
#pragma once
#include <string>

#include "chat/session.h"
#include "chat/template.h"
#include "engine/backend.h"
#include "engine/speculative.h"

namespace llm {

struct ChatOptions {
  std::string system;          // system prompt; "" = none
  SamplerParams sampler;
  int max_reply_tokens = 256;  // each reply stops after this many tokens
  bool terminal = false;       // readline + ANSI notes (run-llama: isatty(0) && isatty(1)); else the line protocol
  bool ignore_eos = false;     // stop tokens do not end a reply (tests, benchmarks)
  Drafter* drafter = nullptr;  // speculative replies (engine/speculative.h); /stats gives the acceptance
  SpecOptions spec;
};

// Runs the conversation until /quit, end of input, or Ctrl-C at the prompt; Ctrl-C during a reply stops that reply.
// Returns the process exit status (0).
int run_chat(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
             const ChatOptions& opt);

// The template for a model: `name` when given (ChatTemplate::from_name; throws listing the names), else the family
// detected in the model's Jinja template, else the fallback: chatml when the vocabulary has <|im_start|> and
// <|im_end|>, zephyr otherwise (it needs only </s>). For the fallback, *note gets a one-line explanation (else "").
ChatTemplate pick_chat_template(const std::string& name, const std::string& jinja, const Tokenizer& tok,
                                std::string* note);

}  // namespace llm
