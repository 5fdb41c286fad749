// Options several apps share, declared once: the prompt (-p/--prompt, -f/--file and --prompt-ids, of which a run
// takes one; engine/prompt_input.h reads the file and the ids) and --kv-dtype for run-llama and llama-ab, --quantize
// for those and write-gguf, --tp for the programs that run a model (apps/engine_options.h). Each app words the help
// for what it does with the value.
#pragma once
#include <string>

#include "apps/cli.h"
#include "engine/backend.h"       // EngineTuning
#include "models/quantize_model.h"  // parse_quantize_type

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

// --chat-template NAME (run-llama --chat, serve-llama); pick_chat_template (chat/repl.h) checks the name.
inline Option& add_chat_template_option(Options& o, std::string* name) {
  return o.text("--chat-template", "NAME", name, "chatml, llama2, llama3 or zephyr")
      .default_is("detected from the model's template; without one, chatml when the vocabulary has <|im_start|>, "
                  "else zephyr");
}

// --quantize TYPE, checked when given (parse_quantize_type names the value and the allowed types) and kept by name.
inline Option& add_quantize_option(Options& o, std::string* type, const std::string& help) {
  const auto check_and_keep = [type](const std::string&, const std::string& t) {
    parse_quantize_type(t);
    *type = t;
  };
  return o.custom("--quantize", "TYPE", check_and_keep, help).allowed("q8_0, q4_0, q4_k, q6_k, q4_k_m");
}

// --kv-dtype T: f32, bf16 or fp8 (parse_kv_dtype); which device takes which type is the app's check.
inline Option& add_kv_dtype_option(Options& o, KvDtype* kv, const std::string& help) {
  const auto parse = [kv](const std::string& flag, const std::string& t) { *kv = parse_kv_dtype(flag, t); };
  return o.custom("--kv-dtype", "T", parse, help).allowed(kKvDtypeNames);
}

// --tp N: tensor-parallel ranks (engine/tp_plan.h, BackendOptions::tp); 1 = the ordinary path. apps/engine_options.h
// checks where it can run (tp_device_refusal) and, once the model is loaded, whether it splits (tp_refusal).
inline Option& add_tp_option(Options& o, int* tp) {
  return o.integer("--tp", "N", tp, 1, 4096,
                   "tensor parallelism over N ranks: q/k/v/gate/up split by output rows (heads whole), o and down by "
                   "input columns, the head by vocabulary; with --device cpu the ranks are simulated on the CPU "
                   "reference (each holds only its shards; a host all-reduce after o and down); the CUDA engine "
                   "refuses N > 1 for now")
      .default_is("1");
}

// The CUDA engine's tuning and comparison knobs (EngineTuning), set from the command line only: nothing in engine/
// reads the environment. Developer options, under a section of their own at the end of --help.
inline void add_tuning_options(Options& o, EngineTuning* t) {
  o.section("developer (CUDA engine tuning)");
  o.choice("--run-ahead", "on|off", &t->run_ahead, {"on", "off"}, [](const std::string& v) { return v == "on"; },
           "the decode loop queues step t + 1 before it waits for step t's id; off: one host round trip per token "
           "(for comparison)")
      .default_is("on");
  o.integer("--grid-cap", "N", &t->persistent_max_blocks, 0, 1 << 20,
            "--decode persistent: cap its grid at N blocks (0 = as many as are resident)");
  o.integer("--wait-timeout", "MS", &t->persistent_timeout_ms, 0, 1LL << 40,
            "--decode persistent: a step whose wait lasts longer than MS fails with an error (0 = the kernel's "
            "default)");
  o.flag("--all-forms", &t->persistent_all_forms,
         "--decode persistent: run quantized weights on the kernel built with every quantized form (tests, tuning)");
}

}  // namespace llm::cli
