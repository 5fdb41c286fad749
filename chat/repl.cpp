// The chat REPL (see chat/repl.h): input (readline or stdin lines), commands, streamed replies and their notes.
#include "chat/repl.h"

#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <readline/history.h>
#include <readline/readline.h>

#include "core/error.h"
#include "core/gemv_table.h"

#if LLM_HAVE_CUDA
#include "engine/cuda_backend.h"  // CudaBackend: the mapping switch and the profile (names: core/gemv_table.h)
#include "measure/step_profiler.h"  // install_step_profiler: the profiled pass of /stats
#endif

namespace llm {

namespace {

volatile std::sig_atomic_t g_interrupt = 0;

void on_sigint(int) { g_interrupt = 1; }

// SIGINT sets the flag for the duration of the chat. No SA_RESTART: a Ctrl-C at the prompt wakes the blocked read.
class SigintScope {
 public:
  SigintScope() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintScope() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

// Readline's callback interface, so our select() loop sees Ctrl-C (EINTR) and readline never handles signals.
std::string g_line;
bool g_line_done = false, g_eof = false;

void on_readline(char* line) {
  g_eof = line == nullptr;
  if (line) {
    g_line = line;
    std::free(line);
  }
  g_line_done = true;
  rl_callback_handler_remove();
}

enum class Input { kLine, kEof, kInterrupt };

Input read_terminal_line(std::string* out) {
  g_line_done = false;
  g_interrupt = 0;
  rl_callback_handler_install("> ", on_readline);
  while (!g_line_done) {
    fd_set fds;
    FD_ZERO(&fds);
    FD_SET(fileno(rl_instream), &fds);
    int r = select(fileno(rl_instream) + 1, &fds, nullptr, nullptr, nullptr);
    if (r < 0 && errno == EINTR && !g_interrupt) continue;  // another signal (SIGWINCH, ...)
    if (r < 0) {  // Ctrl-C at the prompt (or a broken input): leave the line and restore the terminal
      rl_replace_line("", 0);
      rl_callback_handler_remove();
      std::fputs("\n", stdout);
      return g_interrupt ? Input::kInterrupt : Input::kEof;
    }
    rl_callback_read_char();
  }
  if (g_eof) {
    std::fputs("\n", stdout);
    return Input::kEof;
  }
  *out = g_line;
  if (!g_line.empty()) add_history(g_line.c_str());
  return Input::kLine;
}

Input read_plain_line(std::string* out) {
  g_interrupt = 0;
  if (std::getline(std::cin, *out)) return Input::kLine;
  return g_interrupt ? Input::kInterrupt : Input::kEof;
}

std::string fmt(const char* f, double a, double b = 0.0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// "1 token", "2 tokens".
std::string plural(long n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

const char* kHelp =
    "commands:\n"
    "  /help          this list\n"
    "  /reset         forget the conversation (the system prompt stays)\n"
    "  /system [TEXT] show the system prompt, or set it (starts a new conversation)\n"
    "  /stats         prompt and reply rates of the last reply (CUDA: GEMV share of decode, profiled)\n"
    "  /gemv [NAME]   CUDA: list the GEMV mappings, or switch decode to NAME\n"
    "  /decode [PATH] CUDA: show the decode path, or switch it: graph (a CUDA graph of kernels per token) or\n"
    "                 persistent (one kernel per token)\n";
// The terminal's keys; without a terminal the input simply ends.
const char* kHelpTerminal =
    "  /quit          leave (also Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C during a reply stops it; the partial reply stays in the conversation.\n";
const char* kHelpPiped = "  /quit          leave (the end of the input also ends the chat)\n";

class Repl {
 public:
  Repl(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
       const ChatOptions& opt)
      : session_(backend, tok, config, tmpl, session_options(opt)), opt_(opt), tty_(opt.terminal) {}

  int run();

 private:
  static ChatSessionOptions session_options(const ChatOptions& o) {
    ChatSessionOptions s;
    s.system = o.system;
    s.sampler = o.sampler;
    s.ignore_eos = o.ignore_eos;
    s.drafter = o.drafter;
    s.spec = o.spec;
    return s;
  }
  // Informational output: stdout on a terminal (the dim style), stderr in the line protocol.
  void info(const std::string& text, bool dim = false);
  bool command(const std::string& line);  // false: quit
  void reply(const std::string& user);
  void stats();
  void gemv(const std::string& name);
  void decode_path(const std::string& name);

  ChatSession session_;
  ChatOptions opt_;
  bool tty_;
};

void Repl::info(const std::string& text, bool dim) {
  std::string s = text;
  if (!s.empty() && s.back() != '\n') s += '\n';
  if (tty_) {
    std::fputs(dim ? ("\033[2m" + s.substr(0, s.size() - 1) + "\033[0m\n").c_str() : s.c_str(), stdout);
    std::fflush(stdout);
  } else {
    std::fputs(s.c_str(), stderr);
  }
}

int Repl::run() {
  SigintScope sigint;
  if (tty_) rl_catch_signals = 0;  // our handler, not readline's, sees SIGINT
  info("chat: template " + session_.chat_template().name() + ", context " + std::to_string(session_.ctx_size()) +
           " positions, replies up to " + plural(opt_.max_reply_tokens, "token") +
           "; /help lists the commands" + (tty_ ? ", Ctrl-D quits" : ""),
       true);
  for (;;) {
    std::string line;
    Input in = tty_ ? read_terminal_line(&line) : read_plain_line(&line);
    if (in != Input::kLine) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line[0] == '/' && line.compare(0, 2, "//") != 0) {
      if (!command(line)) break;
      continue;
    }
    reply(line[0] == '/' ? line.substr(1) : line);
  }
  return 0;
}

void Repl::reply(const std::string& user) {
  g_interrupt = 0;
  ChatReply r;
  try {
    r = session_.send(user, opt_.max_reply_tokens, [](const std::string& s) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }, &g_interrupt);
  } catch (const NonFiniteLogits&) {
    throw;  // the model itself is broken: no later turn can succeed, so the program ends with the error (exit 1)
  } catch (const Error& e) {
    if (!tty_) std::fputs("\n", stdout);
    info("error: " + printable_message(e.what()));
    return;
  }
  // The line protocol ends every reply with one newline; a terminal only needs the cursor back at a line start.
  if (!tty_ || (!r.text.empty() && r.text.back() != '\n')) std::fputs("\n", stdout);
  std::fflush(stdout);
  g_interrupt = 0;
  if (!r.message.empty()) {
    info(r.message);
    if (r.tokens.empty()) return;
  }
  const ChatStats& st = r.stats;
  std::string what = r.stop_reason == "interrupted" ? "interrupted: "
                     : r.stop_reason == "length"    ? "length: "
                                                    : "";
  info("[" + what + plural(st.reply_tokens, "token") + ", " + fmt("%.1f", st.reply_tokens_per_s()) + " tokens/s]",
       true);
}

bool Repl::command(const std::string& line) {
  const size_t sp = line.find(' ');
  const std::string cmd = line.substr(0, sp);
  std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  arg.erase(0, std::min(arg.size(), arg.find_first_not_of(' ')));
  try {
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/help") {
      info(std::string(kHelp) + (tty_ ? kHelpTerminal : kHelpPiped));
    } else if (cmd == "/reset") {
      session_.reset();
      info("conversation cleared (the system prompt stays)");
    } else if (cmd == "/system") {
      if (arg.empty()) {
        info(session_.system().empty() ? "no system prompt" : "system prompt: " + session_.system());
      } else {
        session_.set_system(arg);
        info("system prompt set; new conversation");
      }
    } else if (cmd == "/stats") {
      stats();
    } else if (cmd == "/gemv") {
      gemv(arg);
    } else if (cmd == "/decode") {
      decode_path(arg);
    } else {
      info("unknown command " + cmd + "; /help lists the commands");
    }
  } catch (const Error& e) {
    info("error: " + printable_message(e.what()));
  }
  return true;
}

#if LLM_HAVE_CUDA
// The GEMV share of decode from a profiled pass of a few steps at the free positions after the conversation: their
// cache entries are overwritten by the next turn, which also prefills before anything is sampled again.
void profile_gemv(CudaBackend& cuda, const ChatSession& session, const std::function<void(const std::string&)>& say) {
  const int pos0 = int(session.ids().size());
  const int steps = std::min(32, cuda.ctx_size() - pos0);
  if (steps < 1) {
    say("GEMV share: no free positions for a profiled pass (the context is full; /reset)");
    return;
  }
  const int token = session.ids().empty() ? 0 : session.ids().back();
  install_step_profiler(cuda);
  cuda.reset_profile();
  cuda.set_profiling(true);
  try {
    for (int i = 0; i < steps; ++i) cuda.decode(token, pos0 + i);
  } catch (...) {
    // A profiled step that fails (no CUPTI kernel timeline here, since the graph path lost its event fallback) must
    // not leave profiling on: every later turn's decode would fail the same way.
    cuda.set_profiling(false);
    throw;
  }
  cuda.set_profiling(false);
  const DecodeProfile p = cuda.profile();
  const double per = p.steps > 0 ? 1.0 / double(p.steps) : 0.0;
  say("GEMV share of decode: " + fmt("%.1f%%", p.total_ms > 0 ? 100.0 * p.gemv_ms() / p.total_ms : 0.0) + " (" +
      fmt("%.3f of %.3f ms per token", p.gemv_ms() * per, p.total_ms * per) + ", mapping " + cuda.gemv() +
      ", profiled over " + std::to_string(p.steps) + (cuda.persistent() ? " persistent steps)" : " graph replays)"));
}
#endif

void Repl::stats() {
  auto say = [this](const std::string& s) { info(s); };
  say("context: " + std::to_string(session_.ids().size()) + " of " + std::to_string(session_.ctx_size()) +
      " positions in use, " + plural(session_.turns(), "turn"));
  if (!session_.has_last()) {
    say("no reply yet");
  } else {
    const ChatStats& st = session_.last_stats();
    say("last reply: prompt " + plural(st.prompt_tokens, "token") + " in " + fmt("%.1f ms (%.1f tokens/s)",
        st.prompt_ms, st.prompt_tokens_per_s()) + ", reply " + plural(st.reply_tokens, "token") + " in " +
        fmt("%.1f ms (%.1f tokens/s)", st.reply_ms, st.reply_tokens_per_s()));
  }
  if (opt_.drafter) {
    const SpecStats& sp = session_.spec_stats();
    say("draft (" + opt_.drafter->name() + "): n_drafted = " + std::to_string(sp.drafted) + ", n_accept = " +
        std::to_string(sp.accepted) + fmt(", accept = %.3f%%", 100.0 * sp.accept_rate()));
  }
#if LLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&session_.backend())) profile_gemv(*cuda, session_, say);
#endif
}

void Repl::decode_path(const std::string& name) {
  if (!name.empty() && name != "graph" && name != "persistent") {
    info("error: /decode: unknown decode path '" + printable(name) + "' (graph or persistent)");
    return;
  }
#if LLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&session_.backend())) {
    if (!name.empty()) {
      try {
        cuda->set_persistent(name == "persistent");  // refuses by name what the persistent path cannot run
      } catch (const Error& e) {
        info(std::string("error: ") + e.what());
      }
    }
    info(std::string("decode path: ") + (cuda->persistent() ? "persistent (one kernel per token)"
                                                              : "graph (a CUDA graph of kernels per token)"));
    return;
  }
#endif
  info("decode paths apply to --device cuda; this chat runs on the CPU reference, which decodes op by op");
}

void Repl::gemv(const std::string& name) {
  // One check of the name wherever it is typed (core/gemv_table.h): an unknown name is refused on every backend.
  try {
    check_gemv_mapping("/gemv", name, /*on_cpu=*/false);
  } catch (const Error& e) {
    info(std::string("error: ") + e.what());
    return;
  }
#if LLM_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&session_.backend())) {
    auto list = [&] {
      std::string s = "GEMV mappings (current: " + cuda->gemv() + "):";
      for (const GemvRow& r : kGemvTable)
        if (r.has_bf16()) s += std::string("\n  ") + r.name + "  " + r.why;
      info(s);
    };
    if (name.empty()) return list();
    try {
      cuda->set_gemv(name);
    } catch (const Error& e) {
      info(std::string("error: ") + e.what());
      return list();
    }
    const std::string now = cuda->gemv();
    info("GEMV mapping now " + now + ": " + gemv_mapping_what(now));
    return;
  }
#endif
  // The CPU reference: no mappings to switch. A mapping other than the default is an error, as --gemv is.
  const std::string where = "this chat runs on the CPU reference";
  if (!name.empty() && name != kGemvDefaultMapping) {
    info("error: /gemv " + name + ": GEMV mappings apply to --device cuda; " + where +
         ", which has none (restart with --device cuda to compare them)");
    return;
  }
  std::string lines = gemv_mapping_lines("  ");
  if (!lines.empty() && lines.back() == '\n') lines.pop_back();
  info("GEMV mappings apply to --device cuda; " + where + ", which has none. The CUDA engine's mappings:\n" + lines);
}

}  // namespace

int run_chat(Backend& backend, const Tokenizer& tok, const ModelConfig& config, const ChatTemplate& tmpl,
             const ChatOptions& opt) {
  Repl repl(backend, tok, config, tmpl, opt);
  return repl.run();
}

ChatTemplate pick_chat_template(const std::string& name, const std::string& jinja, const Tokenizer& tok,
                                std::string* note) {
  if (note) note->clear();
  if (!name.empty()) return ChatTemplate(ChatTemplate::from_name(name));
  if (auto f = ChatTemplate::detect(jinja)) return ChatTemplate(*f);
  const bool chatml = tok.token_id("<|im_start|>") >= 0 && tok.token_id("<|im_end|>") >= 0;
  ChatTemplate t(chatml ? ChatFormat::kChatML : ChatFormat::kZephyr);
  if (note)
    *note = std::string(jinja.empty() ? "the model has no chat template" : "the model's chat template is not one of "
                                                                           "chatml, llama2, llama3, zephyr") +
            "; using " + t.name() +
            (chatml ? " (its vocabulary has <|im_start|>)" : " (the vocabulary has no <|im_start|>)") +
            "; choose with --chat-template NAME";
  return t;
}

}  // namespace llm
