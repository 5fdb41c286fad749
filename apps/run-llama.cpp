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
#include "chat/repl.h"
#include "core/error.h"
#include "core/gemv_table.h"
#include "engine/backend.h"
#include "engine/gemv_choice.h"  // gemv_refusal, quant_summary
#include "models/quantize_model.h"  // --quantize
#include "engine/generate.h"
#include "engine/perplexity.h"
#include "engine/prompt_input.h"  // --file, --prompt-ids [@FILE]
#include "models/default_model.h"
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
  std::string model, prompt, tokenizer, device = "auto", gemv, dtype, dump_logits, prompt_ids, perplexity;
  std::string prompt_file;                 // -f/--file: the prompt text from a file (engine/prompt_input.h)
  std::vector<std::string> prompt_sources; // the prompt options given (--prompt, --file, --prompt-ids): one at most
  bool have_prompt = false;
  int n_predict = 256;
  int ctx_size = 0;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  unsigned long long seed = 42;
  bool ignore_eos = false;
  bool dequantize = false;                 // --dequantize: GGUF quantized weights as BF16 on the GPU
  std::string decode = "graph";            // --decode graph|persistent (CUDA)
  llm::KvDtype kv_dtype = llm::KvDtype::Default;  // --kv-dtype f32|bf16|fp8 (Default: f32 on cpu, bf16 on cuda)
  std::string quantize;                    // --quantize q8_0|q4_0|q4_k|q6_k|q4_k_m: quantize a float model at load
  bool chat = false;                       // --chat: the REPL (chat/repl.h) instead of one prompt
  std::string chat_template, system;
};

const char* kUsage =
    "usage: run-llama [--model PATH] --prompt TEXT [options]\n"
    "       run-llama [--model PATH] --chat [options]\n"
    "\n"
    "----- general -----\n"
    "  -h,    --help                print this help and exit\n"
    "  -p,    --prompt TEXT         prompt to continue (BOS first where the vocabulary wants one; \"\" = BOS only)\n"
    "  -f,    --file FILE           read the prompt text from FILE (as llama.cpp: one trailing newline removed)\n"
    "         --prompt-ids A,B,C    the prompt as token ids, used as given (no BOS added); separated by commas\n"
    "                               and/or whitespace; --prompt-ids @FILE reads them from FILE (any length)\n"
    "         --dump-logits FILE    teacher-forced: write the logits after each prompt token (float32\n"
    "                               [tokens, vocab]) to FILE and exit (see tools/hf_compare.py)\n"
    "         --perplexity FILE     score the text of FILE (teacher-forced, decode path) and print its perplexity\n"
    "  -n,    --n-predict N         number of tokens to generate (default: 256; 1 to 1000000)\n"
    "         --ignore-eos          keep generating past an end-of-sequence token (benchmarks)\n"
    "\n"
    "----- chat -----\n"
    "         --chat                talk to the model: a terminal gets a line editor, history and /help; without a\n"
    "                               terminal each stdin line is a user turn and each reply one stdout record\n"
    "                               (chat/repl.h); -n bounds each reply\n"
    "         --chat-template NAME  chatml, llama2, llama3 or zephyr (default: detected from the model's template;\n"
    "                               without one, chatml when the vocabulary has <|im_start|>, else zephyr)\n"
    "         --system TEXT         system prompt of the conversation\n"
    "\n"
    "----- model -----\n"
    "  -m,    --model PATH          GGUF file, Hugging Face directory, llama2.c .bin, or synthetic:NAME\n"
    "                               (default: SmolLM2-135M-Instruct, fetched into models-cache/ by scripts/setup.sh)\n"
    "         --tokenizer PATH      tokenizer.model (sentencepiece) or tokenizer.json (byte-level BPE)\n"
    "                               (default: the one beside the model, or the vocabulary inside a GGUF)\n"
    "  -c,    --ctx-size N          context size in positions, 1 up to the model's maximum (default: the smaller of\n"
    "                               the model's maximum and 8192, said on stderr when it caps; less if the KV cache\n"
    "                               would not fit in memory)\n"
    "\n"
    "----- sampling -----\n"
    "         --temp T              temperature, 0 = greedy (default: 0.8; 0 to 100)\n"
    "         --top-k K             keep the K most likely tokens, 0 = all (default: 40)\n"
    "         --top-p P             keep the smallest set of tokens with probability >= P (default: 0.95; (0, 1])\n"
    "  -s,    --seed S              sampling seed (default: 42)\n"
    "\n"
    "----- device -----\n"
    "         --device DEV          cpu, cuda or auto (default: auto = cuda when a device is present)\n"
    "         --gemv NAME           CUDA GEMV mapping, one of those below (default: warp-r2; warp when the model\n"
    "                               has quantized weights); --device cuda only\n"
    "         --decode PATH         graph (default): one CUDA graph of kernels per token; persistent: one kernel\n"
    "                               per token whose resident blocks walk the whole step, synchronised by counters\n"
    "                               (BF16 weights on warp-r2/warp/warp-few, quantized ones on warp or warp-dp4a,\n"
    "                               one type per fused q|k|v and gate|up, BF16 KV); --device cuda only\n"
    "         --dequantize          run a GGUF file's quantized weights as BF16 (the comparison path) instead of\n"
    "                               keeping them quantized for the quantized GEMVs\n"
    "         --quantize TYPE       q8_0, q4_0, q4_k, q6_k or q4_k_m (llama.cpp's Q4_K_M mix): quantize a float\n"
    "                               checkpoint's (or a synthetic model's) projection and head weights at load, as\n"
    "                               llama-quantize would; rows a type cannot hold fall back as llama-quantize does\n"
    "                               (named on stderr); refused for a file that is already quantized\n"
    "         --dtype f32|bf16      CPU weight precision: bf16 rounds the weights as the CUDA engine stores them\n"
    "                               (default: f32 on cpu, bf16 on cuda)\n"
    "         --kv-dtype T          KV-cache precision: f32 (CPU only), bf16 (as the CUDA engine stores it) or fp8\n"
    "                               (E4M3, one FP32 scale per KV head and block of 32 positions: half of bf16's\n"
    "                               bytes; on the CUDA engine for head_dim 64 and 128) (default: f32 on cpu, bf16\n"
    "                               on cuda)\n"
    "\n"
    "----- GEMV mappings (--gemv NAME, --device cuda; the CPU reference has none) -----\n";

static_assert(llm::kDefaultCtxCap == 8192, "the --ctx-size help above states the default cap");
static_assert(llm::kKvFp8Block == 32, "the --kv-dtype help above states the FP8 block");

using llm::cli::parse_float;
using llm::cli::parse_int;
using llm::cli::usage_error;

// --gemv on every path: an unknown name, or on the CPU path (--device cpu, or auto without a CUDA device) any mapping
// but the default, is bad usage.
void check_gemv(const Args& a) {
  if (a.gemv.empty()) return;
  try {
    llm::check_gemv_for_device("--gemv", a.gemv, llm::resolve_device(a.device));
  } catch (const llm::Error& e) {
    usage_error(e.what());
  }
}

// --kv-dtype f32 or fp8 where the run would be on the CUDA engine (--device cuda, or auto with a device) is bad usage,
// said before the model loads and before the GPU is asked for anything.
void check_kv_dtype(const Args& a) {
  if (a.kv_dtype == llm::KvDtype::Default || a.kv_dtype == llm::KvDtype::BF16) return;  // every engine runs these
  if (const std::string why = llm::kv_dtype_refusal(a.kv_dtype, llm::resolve_device(a.device)); !why.empty())
    usage_error(why);
}

// The prompt options given, each once, in the order first given (a repeated option keeps its last value).
void add_source(std::vector<std::string>& sources, const char* option) {
  for (const std::string& s : sources)
    if (s == option) return;
  sources.emplace_back(option);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto value = [&] { return llm::cli::value(argc, argv, i, o); };
    if (o == "-h" || o == "--help") {
      std::fputs(kUsage, stdout);
      std::fputs(llm::gemv_mapping_lines("  ").c_str(), stdout);
      std::exit(0);
    } else if (o == "-m" || o == "--model") {
      a.model = value();
    } else if (o == "-p" || o == "--prompt") {
      a.prompt = value();
      a.have_prompt = true;
      add_source(a.prompt_sources, "--prompt");
    } else if (o == "-f" || o == "--file") {
      a.prompt_file = value();
      a.have_prompt = true;
      add_source(a.prompt_sources, "--file");
    } else if (o == "-n" || o == "--n-predict") {
      a.n_predict = int(parse_int(o, value(), 1, 1000000, "1 to 1000000"));
    } else if (o == "-c" || o == "--ctx-size") {
      a.ctx_size = int(parse_int(o, value(), 1, 1 << 24, "1 to 16777216"));
    } else if (o == "--temp") {
      a.temp = float(parse_float(o, value(), 0.0, 100.0, "0 to 100"));
    } else if (o == "--top-k") {
      a.top_k = int(parse_int(o, value(), 0, 1 << 24, "0 to 16777216, 0 = all"));
    } else if (o == "--top-p") {
      a.top_p = float(parse_float(o, value(), 0.0, 1.0, "greater than 0, at most 1", llm::cli::Lower::open));
    } else if (o == "-s" || o == "--seed") {
      a.seed = (unsigned long long)parse_int(o, value(), 0, (1LL << 62), "0 to 2^62");
    } else if (o == "--tokenizer") {
      a.tokenizer = value();
    } else if (o == "--device") {
      a.device = value();
      if (a.device != "cpu" && a.device != "cuda" && a.device != "auto")
        usage_error("--device: invalid value '" + a.device + "' (allowed: cpu, cuda, auto)");
    } else if (o == "--gemv") {
      a.gemv = value();
    } else if (o == "--decode") {
      a.decode = value();
      if (a.decode != "graph" && a.decode != "persistent")
        usage_error("--decode: invalid value '" + a.decode + "' (allowed: graph, persistent)");
    } else if (o == "--dtype") {
      a.dtype = value();
      if (a.dtype != "f32" && a.dtype != "bf16")
        usage_error("--dtype: invalid value '" + a.dtype + "' (allowed: f32, bf16)");
    } else if (o == "--kv-dtype") {
      a.kv_dtype = llm::cli::parse_kv_dtype(o, value());
    } else if (o == "--prompt-ids") {
      a.prompt_ids = value();
      a.have_prompt = true;
      add_source(a.prompt_sources, "--prompt-ids");
    } else if (o == "--dump-logits") {
      a.dump_logits = value();
    } else if (o == "--perplexity") {
      a.perplexity = value();
      a.have_prompt = true;
    } else if (o == "--ignore-eos") {
      a.ignore_eos = true;
    } else if (o == "--dequantize") {
      a.dequantize = true;
    } else if (o == "--quantize") {
      a.quantize = value();
      llm::parse_quantize_type(a.quantize);
    } else if (o == "--chat") {
      a.chat = true;
    } else if (o == "--chat-template") {
      a.chat_template = value();
    } else if (o == "--system") {
      a.system = value();
    } else {
      usage_error("unknown option '" + o + "'");
    }
  }
  if (a.prompt_sources.size() > 1)
    usage_error(a.prompt_sources[0], " and ", a.prompt_sources[1], " exclude each other: give the prompt once");
  if (a.chat && a.have_prompt)
    usage_error("--chat reads the conversation from the terminal or stdin; it takes no --prompt, --file, "
                "--prompt-ids, --perplexity or --dump-logits");
  if ((!a.chat_template.empty() || !a.system.empty()) && !a.chat)
    usage_error("--chat-template and --system need --chat");
  if (!a.have_prompt && !a.chat) usage_error("--prompt is required (use --prompt \"\" to start from BOS alone)");
  check_gemv(a);
  check_kv_dtype(a);
  if (a.decode == "persistent") {
    const llm::ResolvedDevice d = llm::resolve_device(a.device);
    if (d.device != "cuda")
      usage_error("--decode persistent runs on the CUDA engine, not on the CPU reference" +
                  (d.why.empty() ? std::string() : "; " + d.why));
  }
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

// The prompt's ids: BOS first where the vocabulary wants one and has one, and always for an empty prompt (the model
// needs a token).
std::vector<int> encode_prompt(const llm::Tokenizer& tok, const std::string& prompt) {
  if (prompt.empty() && tok.bos_id() < 0)
    llm::fail("the prompt is empty and the vocabulary has no BOS token to start from");
  return tok.encode(prompt, prompt.empty() || (tok.adds_bos() && tok.bos_id() >= 0));
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
int run_chat_mode(const Args& a, const llm::Model& model, llm::Backend& backend, const llm::Tokenizer* tok) {
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
  return llm::run_chat(backend, *tok, model.config, tmpl, co);
}

int run(const Args& a) {
  using Clock = std::chrono::steady_clock;
  if (a.device == "cuda") llm::require_cuda_device();  // before the model loads: the one line every CUDA program prints
  // The prompt's files before the model: a mistyped name costs no model load. Ids are checked once the vocabulary is
  // known.
  const std::string prompt_text = a.prompt_file.empty() ? a.prompt : llm::read_prompt_file(a.prompt_file);
  const llm::PromptIdsArg ids_arg =
      a.prompt_ids.empty() ? llm::PromptIdsArg{} : llm::read_prompt_ids_arg(a.prompt_ids);
  const auto t_load = Clock::now();
  llm::Model model = llm::load_model(a.model.empty() ? llm::default_model_path() : a.model);
  if (!a.quantize.empty()) llm::quantize_model(model, llm::parse_quantize_type(a.quantize));

  std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.tokenizer);
  if (!tok && model.format != "synthetic" && a.prompt_ids.empty())
    llm::fail("no tokenizer found beside ", model.source, "; pass --tokenizer PATH/tokenizer.model");

  llm::BackendOptions bo;
  bo.device = llm::resolve_device(a.device).device;
  bo.ctx_size = a.ctx_size;
  // A tokenizer smaller than the (padded) embedding: ids it cannot decode are never sampled.
  bo.sample_vocab = llm::sampling_vocab(model.config, tok ? tok->vocab_size() : 0);
  bo.gemv = a.gemv;
  bo.dequantize = a.dequantize;
  bo.persistent = a.decode == "persistent";
  if (bo.device == "cuda") {
    // --gemv resolved once (checked against the table when parsed); every --gemv and weight-type pair runs or is
    // refused by name (bad usage, exit 2), before any GPU work.
    const llm::GemvPlan plan = llm::gemv_plan(a.gemv);
    if (const std::string why = llm::gemv_refusal(plan, model, a.dequantize); !why.empty()) usage_error(why);
    // --decode persistent runs what its kernel takes, or is refused by name (exit 2), before any GPU work.
    if (const std::string why = llm::decode_path_refusal(llm::parse_decode_path(a.decode), plan, model,
                                                         a.dequantize, a.kv_dtype == llm::KvDtype::FP8, true);
        !why.empty())
      usage_error(why);
    if (const std::string q = llm::quant_summary(model); !q.empty())
      std::fprintf(stderr, "run-llama: quantized weights %s: %s\n",
                   a.dequantize ? "dequantized to BF16 at load (--dequantize)" : "kept quantized", q.c_str());
  }
  if (bo.device == "cuda" && a.dtype == "f32")
    llm::fail("--dtype f32 is CPU-only: the CUDA engine stores weights in BF16 (use --device cpu)");
  bo.bf16_weights = a.dtype == "bf16";
  bo.kv_dtype = a.kv_dtype;
  if (a.kv_dtype == llm::KvDtype::FP8)
    std::fprintf(stderr, "run-llama: KV cache in fp8 (E4M3, one FP32 scale per KV head and %d positions)\n",
                 llm::kKvFp8Block);
  else if (a.kv_dtype != llm::KvDtype::Default)
    std::fprintf(stderr, "run-llama: KV cache in %s\n", llm::kv_dtype_name(a.kv_dtype));
  auto backend = llm::make_backend(model, bo);
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load).count();

  const llm::ModelConfig& c = model.config;
  std::fprintf(stderr, "run-llama: %s (%s, dim %d, %d layers, %d heads / %d kv, vocab %d) on %s, context %d\n",
               model.source.c_str(), model.format.c_str(), c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
               c.vocab_size, backend->name().c_str(), backend->ctx_size());

  if (a.chat) return run_chat_mode(a, model, *backend, tok.get());
  if (!a.perplexity.empty()) return run_perplexity(a, *backend, tok.get());
  std::vector<int> prompt = !a.prompt_ids.empty() ? llm::parse_token_ids(ids_arg.text, ids_arg.source, c.vocab_size)
                            : tok                    ? encode_prompt(*tok, prompt_text)
                                                     : ids_from_text(prompt_text, c);
  if (!a.dump_logits.empty()) {
    std::vector<float> logits = llm::teacher_forced_logits(*backend, prompt);
    std::FILE* f = std::fopen(a.dump_logits.c_str(), "wb");
    bool ok = f && std::fwrite(logits.data(), sizeof(float), logits.size(), f) == logits.size();
    if (f) ok = (std::fclose(f) == 0) && ok;
    if (!ok) llm::fail("cannot write ", a.dump_logits, ": ", std::strerror(errno));
    // The ids beside them (FILE.ids, comma-separated), so a reference can run exactly these tokens.
    std::ofstream ids_out(a.dump_logits + ".ids");
    for (size_t i = 0; i < prompt.size(); ++i) ids_out << (i ? "," : "") << prompt[i];
    ids_out << "\n";
    if (!ids_out) llm::fail("cannot write ", a.dump_logits, ".ids");
    std::fprintf(stderr, "run-llama: wrote %zu x %d logits to %s (ids in %s.ids)\n", prompt.size(), c.vocab_size,
                 a.dump_logits.c_str(), a.dump_logits.c_str());
    return 0;
  }

  llm::GenerateOptions go;
  go.n_predict = a.n_predict;
  go.sampler.temperature = a.temp;
  go.sampler.top_k = a.top_k;
  go.sampler.top_p = a.top_p;
  go.sampler.seed = a.seed;
  go.ignore_eos = a.ignore_eos;
  go.interrupt = &g_interrupted;

  std::unique_ptr<llm::StreamDecoder> dec;
  if (tok) dec = std::make_unique<llm::StreamDecoder>(*tok, /*strip_leading_space=*/prompt_text.empty());
  // The prompt is echoed once generation has started, so a rejected prompt leaves stdout empty.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (!echoed && tok) std::fputs(prompt_text.c_str(), stdout);
    echoed = true;
  };
  auto emit = [&](int id) {
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

  if (r.stop_reason == "context")
    std::fprintf(stderr, "run-llama: stopped at the end of the context (%d positions)\n", backend->ctx_size());
  std::fputs("\n", stderr);
  llm::print_timings(r.timings);
  if (r.stop_reason == "interrupted") {
    std::fprintf(stderr, "run-llama: interrupted\n");
    return 130;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("run-llama", argc, argv, parse_args, run); }
