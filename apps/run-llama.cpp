// run-llama: the command line. Parses options, wires model -> backend -> decode loop, streams text to stdout and
// timings to stderr. No model or kernel logic lives here.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/engine_options.h"  // --model, --ctx-size, --device, --gemv, --kv-dtype, ...
#include "apps/shared_options.h"  // --prompt, --file, --prompt-ids
#include "chat/repl.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/perplexity.h"
#include "engine/prompt_input.h"  // --file, --prompt-ids [@FILE]
#include "models/model.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

struct Args {
  llm::cli::EngineOptions engine;          // --model, --ctx-size, --device, --gemv, ... (apps/engine_options.h)
  std::string dump_logits, perplexity, dump_ids;
  int logits_prefill = 0;
  llm::cli::PromptOptions prompt;          // --prompt, --file, --prompt-ids: one at most
  bool have_prompt = false;                // one of them, or --perplexity, was given
  int n_predict = 256;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  unsigned long long seed = 42;
  bool ignore_eos = false;
  bool chat = false;                       // --chat: the REPL (chat/repl.h) instead of one prompt
  std::string chat_template, system;
  llm::cli::SpecArgs spec;                 // --spec, --draft-max, --draft-min, --model-draft
};

const char* kUsage =
    "usage: run-llama [--model PATH] --prompt TEXT [options]\n"
    "       run-llama [--model PATH] --chat [options]\n";

using llm::cli::Lower;
using llm::cli::usage_error;

void general_options(llm::cli::Options& o, Args& a) {
  o.section("general");
  llm::cli::add_prompt_options(
      o, &a.prompt, "prompt to continue (BOS first where the vocabulary wants one; \"\" = BOS only)", "");
  o.text("--dump-logits", "FILE", &a.dump_logits,
         "teacher-forced: write the logits after each prompt token (float32 [tokens, vocab]) to FILE and exit (see "
         "tools/hf_compare.py)");
  o.integer("--logits-prefill", "N", &a.logits_prefill, 1, 16777216,
            "with --dump-logits: the first N ids through one prefill as a prompt, the rest one decode step each (a "
            "generation's own arithmetic); rows from the N-th id on (tools/spec_margin.py)");
  o.text("--dump-ids", "FILE", &a.dump_ids,
         "write the prompt's token ids and the generated ones to FILE, a line each (tools: spec-sim's traces)");
  o.text("--perplexity", "FILE", &a.perplexity,
         "score the text of FILE (teacher-forced, decode path) and print its perplexity");
  o.integer("-n, --n-predict", "N", &a.n_predict, 1, 1000000, "number of tokens to generate");
  o.flag("--ignore-eos", &a.ignore_eos, "keep generating past an end-of-sequence token (benchmarks)");
  o.section("chat");
  o.flag("--chat", &a.chat,
         "talk to the model: a terminal gets a line editor, history and /help; without a terminal each stdin line is "
         "a user turn and each reply one stdout record (chat/repl.h); -n bounds each reply");
  llm::cli::add_chat_template_option(o, &a.chat_template);
  o.text("--system", "TEXT", &a.system, "system prompt of the conversation");
}

void sampling_options(llm::cli::Options& o, Args& a) {
  o.section("sampling");
  o.real("--temp", "T", &a.temp, 0.0, 100.0, "temperature, 0 = greedy");
  o.integer("--top-k", "K", &a.top_k, 0, 1 << 24, "keep the K most likely tokens, 0 = all")
      .allowed("0 to 16777216, 0 = all");
  o.real("--top-p", "P", &a.top_p, 0.0, 1.0, "keep the smallest set of tokens with probability >= P", Lower::open);
  o.integer("-s, --seed", "S", &a.seed, 0, 1LL << 62, "sampling seed").allowed("0 to 2^62");
}

Args parse_args(int argc, char** argv) {
  Args a;
  llm::cli::Options o(kUsage);
  general_options(o, a);
  llm::cli::add_model_options(o, a.engine);
  sampling_options(o, a);
  llm::cli::add_spec_options(o, &a.spec);
  llm::cli::add_device_options(o, a.engine);
  llm::cli::add_gemv_epilogue(o);
  o.parse(argc, argv);
  a.have_prompt = o.given("--prompt") || o.given("--file") || o.given("--prompt-ids") || o.given("--perplexity");
  llm::cli::check_one_prompt(o);
  if (a.chat && a.have_prompt)
    usage_error("--chat reads the conversation from the terminal or stdin; it takes no --prompt, --file, "
                "--prompt-ids, --perplexity or --dump-logits");
  if ((!a.chat_template.empty() || !a.system.empty()) && !a.chat)
    usage_error("--chat-template and --system need --chat");
  if (!a.dump_ids.empty() && (a.chat || !a.perplexity.empty() || !a.dump_logits.empty()))
    usage_error("--dump-ids writes one generation's ids: it takes no --chat, --perplexity or --dump-logits");
  if (o.given("--logits-prefill") && a.dump_logits.empty())
    usage_error("--logits-prefill needs --dump-logits");
  if (!a.have_prompt && !a.chat) usage_error("--prompt is required (use --prompt \"\" to start from BOS alone)");
  llm::cli::resolve_device_and_check(a.engine);
  llm::cli::check_spec_args(a.spec);
  return a;
}

// Synthetic models may run without a tokenizer: the prompt is then a list of token ids (or empty).
std::vector<int> ids_from_text(const std::string& prompt, const llm::ModelConfig& c) {
  std::vector<int> ids{c.bos_id};
  std::istringstream in(prompt);
  std::string w;
  while (in >> w) {
    char* end = nullptr;
    long v = std::strtol(w.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= c.vocab_size)
      llm::fail("without a tokenizer the prompt must be token ids in [0, ", c.vocab_size, "), found '", w, "'");
    ids.push_back(int(v));
  }
  return ids;
}

int run_perplexity(const Args& a, llm::Backend& backend, const llm::Tokenizer* tok) {
  if (!tok) llm::fail("--perplexity needs a tokenizer");
  const std::string text = llm::read_input_file("--perplexity", a.perplexity);
  // BOS first where the vocabulary has one and wants it; without one the first token of the text is the context and
  // scoring starts at the second.
  const bool bos = tok->adds_bos() && tok->bos_id() >= 0;
  if (tok->bos_id() < 0)
    std::fprintf(stderr, "run-llama: the vocabulary has no BOS token: scoring from the text's second token on\n");
  const std::vector<int> ids = tok->encode(text, bos);
  if (ids.size() < 2)
    llm::fail("--perplexity: ", a.perplexity, " is too short to score: ", ids.size(),
              ids.size() == 1 ? " token" : " tokens", bos ? " with BOS" : "", "; scoring needs at least 2");
  const auto t0 = std::chrono::steady_clock::now();
  const llm::PerplexityResult r = llm::perplexity(backend, ids);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perplexity: %s: %d tokens scored, mean NLL %.4f nats, PPL %.3f (%.1f tokens/s on %s)\n",
              a.perplexity.c_str(), r.scored, r.mean_nll, r.ppl, r.scored / s, backend.name().c_str());
  return 0;
}

// --chat: the template (override, detected, or the fallback named on stderr), then the REPL.
int run_chat_mode(const Args& a, const llm::Model& model, llm::Backend& backend, const llm::Tokenizer* tok,
                  llm::Drafter* drafter) {
  if (!tok) llm::fail("--chat needs a tokenizer (", model.source, " has none; pass --tokenizer PATH)");
  std::string note;
  const llm::ChatTemplate tmpl = llm::pick_chat_template(a.chat_template, model.chat_template, *tok, &note);
  if (!note.empty()) std::fprintf(stderr, "run-llama: %s\n", note.c_str());
  llm::ChatOptions co;
  co.system = a.system;
  co.sampler = {a.temp, a.top_k, a.top_p, a.seed};
  co.max_reply_tokens = a.n_predict;
  co.ignore_eos = a.ignore_eos;
  co.terminal = isatty(0) && isatty(1);
  co.drafter = drafter;
  co.spec = llm::cli::spec_options(a.spec);
  return llm::run_chat(backend, *tok, model.config, tmpl, co);
}

// --dump-logits FILE: the logits after each prompt token (float32 [tokens, vocab]) to FILE, the ids to FILE.ids.
int dump_logits(const Args& a, llm::Backend& backend, const std::vector<int>& prompt, int vocab_size) {
  if (a.logits_prefill > int(prompt.size()))
    llm::fail("--logits-prefill ", a.logits_prefill, " exceeds the prompt's ", prompt.size(), " ids");
  std::vector<float> logits = llm::teacher_forced_logits(backend, prompt, a.logits_prefill);
  const size_t rows = prompt.size() - size_t(std::max(a.logits_prefill - 1, 0));
  std::FILE* f = std::fopen(a.dump_logits.c_str(), "wb");
  bool ok = f && std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (!ok) llm::fail("cannot write ", a.dump_logits, ": ", std::strerror(errno));
  // The ids beside them (FILE.ids, comma-separated), so a reference can run exactly these tokens.
  std::ofstream ids_out(a.dump_logits + ".ids");
  for (size_t i = 0; i < prompt.size(); ++i) ids_out << (i ? "," : "") << prompt[i];
  ids_out << "\n";
  if (!ids_out) llm::fail("cannot write ", a.dump_logits, ".ids");
  std::fprintf(stderr, "run-llama: wrote %zu x %d logits to %s (ids in %s.ids)\n", rows, vocab_size,
               a.dump_logits.c_str(), a.dump_logits.c_str());
  return 0;
}

// --dump-ids FILE: the prompt's ids on the first line, the generated ids on the second, space-separated. The file is
// opened before the model loads (a bad path costs no run) and written at the end.
void write_ids(std::ofstream& out, const std::string& path, const std::vector<int>& prompt,
               const std::vector<int>& generated) {
  for (const std::vector<int>* ids : {&prompt, &generated}) {
    for (size_t i = 0; i < ids->size(); ++i) out << (i ? " " : "") << (*ids)[i];
    out << '\n';
  }
  if (!out.flush()) llm::fail("cannot write ", path, ": ", std::strerror(errno));
}

int run(const Args& a) {
  using Clock = std::chrono::steady_clock;
  // Before the model loads: the one line every CUDA program prints without a device.
  if (a.engine.device.device == "cuda") llm::require_cuda_device();
  // The prompt's files before the model: a mistyped name costs no model load. Ids are checked once the vocabulary is
  // known.
  const std::string prompt_text = a.prompt.file.empty() ? a.prompt.text : llm::read_prompt_file(a.prompt.file);
  const llm::PromptIdsArg ids_arg =
      a.prompt.ids.empty() ? llm::PromptIdsArg{} : llm::read_prompt_ids_arg(a.prompt.ids);
  std::ofstream ids_out;
  if (!a.dump_ids.empty()) {
    ids_out.open(a.dump_ids);
    if (!ids_out) llm::fail("cannot write ", a.dump_ids, ": ", std::strerror(errno));
  }
  const auto t_load = Clock::now();
  llm::Model model = llm::cli::load_engine_model(a.engine);
  std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.engine.tokenizer);
  if (!tok && model.format != "synthetic" && a.prompt.ids.empty())
    llm::fail("no tokenizer found beside ", model.source, "; pass --tokenizer PATH/tokenizer.model");

  auto backend = llm::cli::make_engine_backend(a.engine, model, tok ? tok->vocab_size() : 0, "run-llama");
  llm::cli::print_engine_line("run-llama", model, *backend);
  const llm::ModelConfig& c = model.config;

  // The draft model and the verify passes the loop will run (each length's first use) are load time, as the decode
  // step's graph is: the first prompt's clock starts on a ready engine.
  const auto spec = llm::cli::make_speculation(a.spec, a.engine, model, tok.get(), backend->ctx_size(), "run-llama");
  if (spec) backend->prepare_verify(a.spec.draft_max + 1);
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load).count();
  llm::Drafter* drafter = spec ? spec->drafter.get() : nullptr;
  if (a.chat) return run_chat_mode(a, model, *backend, tok.get(), drafter);
  if (!a.perplexity.empty()) return run_perplexity(a, *backend, tok.get());
  std::vector<int> prompt = !a.prompt.ids.empty() ? llm::parse_token_ids(ids_arg.text, ids_arg.source, c.vocab_size)
                            : tok                    ? llm::encode_prompt(*tok, prompt_text)
                                                     : ids_from_text(prompt_text, c);
  if (!a.dump_logits.empty()) return dump_logits(a, *backend, prompt, c.vocab_size);

  llm::GenerateOptions go;
  go.n_predict = a.n_predict;
  go.sampler.temperature = a.temp;
  go.sampler.top_k = a.top_k;
  go.sampler.top_p = a.top_p;
  go.sampler.seed = a.seed;
  go.ignore_eos = a.ignore_eos;
  go.interrupt = &g_interrupted;
  go.drafter = drafter;
  go.spec = llm::cli::spec_options(a.spec);

  std::unique_ptr<llm::StreamDecoder> dec;
  if (tok) dec = std::make_unique<llm::StreamDecoder>(*tok, /*strip_leading_space=*/prompt_text.empty());
  // The prompt is echoed once generation has started, so a rejected prompt leaves stdout empty.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (!echoed && tok) std::fputs(prompt_text.c_str(), stdout);
    echoed = true;
  };
  std::vector<int> generated;  // --dump-ids
  auto emit = [&](int id) {
    generated.push_back(id);
    echo_prompt();
    if (dec)
      std::fputs(dec->push(id).c_str(), stdout);
    else
      std::printf("%d ", id);
    std::fflush(stdout);
  };

  std::signal(SIGINT, on_sigint);
  llm::GenerateResult r = llm::generate(*backend, c, prompt, go, emit, load_ms);
  std::signal(SIGINT, SIG_DFL);
  echo_prompt();
  if (dec) std::fputs(dec->flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);

  if (!a.dump_ids.empty()) write_ids(ids_out, a.dump_ids, prompt, generated);
  if (r.stop_reason == "context")
    std::fprintf(stderr, "run-llama: stopped at the end of the context (%d positions)\n", backend->ctx_size());
  std::fputs("\n", stderr);
  if (drafter) llm::print_spec_stats(r.spec);
  llm::print_timings(r.timings);
  if (r.stop_reason == "interrupted") {
    std::fprintf(stderr, "run-llama: interrupted\n");
    return 130;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("run-llama", argc, argv, parse_args, run); }
