// serve-llama: the command line of the OpenAI-compatible server (server/). Parses options, loads the model on the
// engine run-llama would use (the same engine options, apps/engine_options.h), and serves until SIGINT or SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "apps/cli.h"
#include "apps/engine_options.h"
#include "chat/repl.h"  // pick_chat_template
#include "core/error.h"
#include "engine/gemv_choice.h"
#include "server/generator.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/load.h"

namespace {

struct Args {
  llm::cli::EngineOptions engine;
  llm::cli::SpecArgs spec;  // --spec, --draft-max, --draft-min, --model-draft
  llm::server::HttpOptions http;
  int queue = 8;
  int max_body_kib = 1024;
  std::string chat_template, name;
};

const char* kUsage =
    "usage: serve-llama [--model PATH] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (stream: true as server-sent\n"
    "events), GET /v1/models, /health and /metrics (Prometheus). One generation at a time; the KV cache is reused for\n"
    "the longest common prefix with the previous request. --spec lookup|draft runs every generation speculatively\n"
    "(greedy text unchanged, on a GPU up to near ties; /metrics counts the drafts).\n";

using llm::cli::usage_error;

void server_options(llm::cli::Options& o, Args& a) {
  o.section("server");
  o.text("--host", "ADDR", &a.http.host, "address to listen on; any but a loopback address needs --api-key");
  o.integer("--port", "N", &a.http.port, 0, 65535, "TCP port (0 = any free port, printed on stderr)");
  o.text("--api-key", "KEY", &a.http.api_key,
         "require 'Authorization: Bearer KEY' on every route but /health")
      .default_is("none: loopback addresses only");
  o.integer("--queue", "N", &a.queue, 1, 4096,
            "requests that may wait while one generates; one more is answered 503 with Retry-After");
  o.integer("--max-body", "KIB", &a.max_body_kib, 1, 1 << 20, "largest request body in KiB (larger: 413)");
  o.integer("--http-threads", "N", &a.http.threads, 2, 1024,
            "connections served at once (each request waiting for the engine holds one)");
  llm::cli::add_chat_template_option(o, &a.chat_template);
  o.text("--name", "NAME", &a.name, "the model name /v1/models lists and responses carry (requests may name any)")
      .default_is("the model file's name");
}

Args parse_args(int argc, char** argv) {
  Args a;
  llm::cli::Options o(kUsage);
  server_options(o, a);
  llm::cli::add_model_options(o, a.engine);
  llm::cli::add_device_options(o, a.engine);
  llm::cli::add_spec_options(o, &a.spec);
  llm::cli::add_gemv_epilogue(o);
  o.parse(argc, argv);
  llm::cli::check_spec_args(a.spec);
  if (!llm::server::is_loopback_host(a.http.host) && a.http.api_key.empty())
    usage_error("--host ", a.http.host, " is not a loopback address: serving it needs --api-key KEY");
  a.http.max_body = size_t(a.max_body_kib) << 10;
  llm::cli::resolve_device_and_check(a.engine);
  return a;
}

// "models-cache/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1".
std::string served_name(const std::string& source) {
  std::string s = source;
  while (!s.empty() && s.back() == '/') s.pop_back();
  s = s.substr(s.find_last_of('/') + 1);
  for (const char* ext : {".gguf", ".bin"})
    if (s.size() > std::string(ext).size() && s.compare(s.size() - std::string(ext).size(), std::string::npos, ext) == 0)
      s.resize(s.size() - std::string(ext).size());
  return s.empty() ? "model" : s;
}

int run(const Args& a) {
  // SIGINT and SIGTERM go to the watcher thread below only: blocked here, before any thread starts, the CUDA
  // runtime's included (its threads inherit the mask; one started before it took SIGTERM's default and killed the
  // process mid-shutdown on the H200).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (a.engine.device.device == "cuda") llm::require_cuda_device();

  llm::Model model = llm::cli::load_engine_model(a.engine);
  std::unique_ptr<llm::Tokenizer> tok = llm::load_tokenizer(model, a.engine.tokenizer);
  if (!tok) llm::fail("serve-llama needs a tokenizer (", model.source, " has none; pass --tokenizer PATH)");
  auto backend = llm::cli::make_engine_backend(a.engine, model, tok->vocab_size(), "serve-llama");
  llm::cli::print_engine_line("serve-llama", model, *backend);
  std::string note;
  const llm::ChatTemplate tmpl = llm::pick_chat_template(a.chat_template, model.chat_template, *tok, &note);
  if (!note.empty()) std::fprintf(stderr, "serve-llama: %s\n", note.c_str());

  llm::server::ServerInfo info;
  info.model = a.name.empty() ? served_name(model.source) : a.name;
  info.device = backend->name();
  if (a.engine.device.device == "cuda") {
    info.mapping = a.engine.gemv.empty() ? llm::default_gemv_name(model, a.engine.dequantize) : a.engine.gemv;
    info.decode = llm::decode_path_name(a.engine.decode);
  }
  info.kv_dtype = a.engine.kv_dtype == llm::KvDtype::Default
                      ? (a.engine.device.device == "cuda" ? "bf16" : "f32")
                      : llm::kv_dtype_name(a.engine.kv_dtype);
  info.ctx_size = backend->ctx_size();

  const auto spec = llm::cli::make_speculation(a.spec, a.engine, model, tok.get(), backend->ctx_size(), "serve-llama");
  if (spec) backend->prepare_verify(a.spec.draft_max + 1);  // before the first request, as run-llama at load

  llm::server::Metrics metrics;
  llm::server::GeneratorOptions go;
  go.drafter = spec ? spec->drafter.get() : nullptr;
  go.spec = llm::cli::spec_options(a.spec);
  go.queue_limit = a.queue;
  go.reuse_align = a.engine.kv_dtype == llm::KvDtype::FP8 ? llm::kKvFp8Block : 1;
  go.seed_base = std::random_device{}();
  llm::server::Generator gen(*backend, *tok, model.config, tmpl, metrics, go);
  llm::server::HttpServer http(gen, metrics, info, a.http);
  const int port = http.bind();
  std::fprintf(stderr, "serve-llama: %s (chat template %s) listening on http://%s:%d/v1%s\n", info.model.c_str(),
               tmpl.name().c_str(), a.http.host.find(':') != std::string::npos ? ("[" + a.http.host + "]").c_str()
                                                                                  : a.http.host.c_str(),
               port, a.http.api_key.empty() ? "" : " (API key required)");
  std::fflush(stderr);
  std::atomic<bool> ending{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (ending) return;  // woken by main to end
    std::fprintf(stderr, "serve-llama: stopping (signal %d)\n", sig);
    gen.shutdown();
    http.stop();
  });
  http.run();
  gen.shutdown();
  ending = true;
  pthread_kill(watcher.native_handle(), SIGTERM);  // the watcher, if still waiting, ends
  watcher.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return llm::cli::run_main("serve-llama", argc, argv, parse_args, run); }
