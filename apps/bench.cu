// bench: the command line of the benchmark harness (measure/bench/): one program, one section per measurement. Each
// section's options are parsed here, in one function per section, and handed to its entry point
// (measure/bench/sections.h); no measurement code lives here.
//
//   bench gemv [--mappings a,b,c] [--shapes NxK,...] [--repeats R] [--csv] [--json FILE] [--quant q4_0,...]
//   bench probes [--section batch|tiny|all] [--batch-shapes NxK,...] [--tiny-n N] [--tiny-k k1,k2,...]
//                [--repeats R] [--json FILE]
//   bench attn [--heads 32] [--kv-heads 8] [--head-dim 128] [--layers N] [--contexts 8192,32768,131072]
//              [--prefill 512,8192] [--reps R] [--model-layers 32] [--json FILE]
//   bench dep [--stages N] [--repeats R] [--vector N] [--blocks b1,b2,...] [--weights-kb k1,k2,...]
//             [--clusters c1,c2,...]
//   bench profile-target [--mappings a,b] [--shapes NxK,...] [--warmup W] [--manifest FILE]
//   bench all          gemv, probes, attn and dep in turn, each with its defaults
// Bad usage says "run 'bench SECTION --help' for the options" (apps/cli.h).
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "apps/cli.h"                  // value, parse_int, usage_error, run_main
#include "core/error.h"                // llm::fail
#include "core/gemv_names.h"           // check_gemv_mapping, gemv_mapping_lines, gemv_mapping_list
#include "engine/backend.h"            // require_cuda_device
#include "kernels/gemv/gemv.h"         // gemv_find
#include "measure/bench/harness.h"     // split_commas, parse_shape
#include "measure/bench/sections.h"    // the options and entry points
#include "measure/probes/dep_probe.h"  // kDepProbeMaxVector
#include "models/config.h"             // kMaxHeads, kMaxHeadDim, kMaxPositions: the ranges the engine supports

namespace llm::bench {
namespace {

const char* kUsage =
    "usage: bench SECTION [options]; bench SECTION --help for a section's options\n"
    "  gemv            GB/s of each GEMV mapping (or quantized form) on the Llama 3.1 8B decode shapes\n"
    "  probes          batched GEMV (B = 1..8) against B separate GEMVs; tiny K: where 'warp' overtakes\n"
    "  attn            decode attention GB/s at long contexts beside the roofline, causal prefill TFLOP/s\n"
    "  dep             what one dependency between the resident blocks of a persistent kernel costs\n"
    "  profile-target  one launch per mapping and shape behind a marker kernel, for ncu (tools/ncu-gemv.sh)\n"
    "  all             gemv, probes, attn and dep in turn, each with its defaults\n";

const char* kGemvUsage =
    "usage: bench gemv [--mappings a,b,c] [--shapes NxK,...] [--repeats R] [--csv] [--json FILE]\n"
    "  GB/s of weight bytes per GEMV mapping and shape, beside a streaming-read roofline measured in the same run.\n"
    "  --mappings defaults to every mapping of the first list below, in its order.\n"
    "  --quant q4_0,q8_0,q4_k: random weights quantized (models/quant.h) and run through the quantized forms instead\n"
    "  (--mappings then names those: warp, thread, as-stored, warp-dp4a); GB/s of the bytes each form reads\n"
    "  (codes + scales; GGUF's blocks for as-stored).\n";

const char* kProbesUsage =
    "usage: bench probes [--section batch|tiny|all] [--batch-shapes NxK,...] [--tiny-n N] [--tiny-k k1,k2,...]\n"
    "                    [--repeats R] [--json FILE]\n"
    "  batch: batched GEMV (B = 1, 2, 4, 8 vectors, weights read once) vs B separate warp GEMVs.\n"
    "  tiny:  warp vs colmajor vs several-rows-per-warp for small K; where warp overtakes.\n";

const char* kAttnUsage =
    "usage: bench attn [options]\n"
    "  The attention kernels (kernels/ops/ops.h) on random BF16 caches. Decode: one query token at position L - 1 "
    "over L\n"
    "  cache rows; GB/s of the K and V bytes read (2 x L x kv_heads x head_dim x 2 B) beside a streaming-read\n"
    "  roofline measured in the same run. Prefill: N query tokens at positions 0 .. N - 1 over a fresh cache;\n"
    "  TFLOP/s of the causal FLOPs (4 x heads x head_dim x N (N + 1) / 2). Every call takes the next of several\n"
    "  caches whose bytes together exceed 4x L2.\n"
    "\n"
    "  --heads N          query heads (default 32)\n"
    "  --kv-heads N       KV heads, dividing --heads (default 8)\n"
    "  --head-dim N       even (default 128)\n"
    "  --contexts L,...   decode context lengths (default 8192,32768,131072; '' = no decode); each is timed with\n"
    "                     max_ctx = L and, below the largest, with max_ctx = the largest (the engine passes its cache\n"
    "                     size; the KV split follows the length on the device, so both rows should agree)\n"
    "  --prefill N,...    prefill token counts (default 512,8192; '' = no prefill)\n"
    "  --layers N         caches rotated through (default: per length, enough that their bytes exceed 4x L2, at\n"
    "                     least 2, fewer if memory is short)\n"
    "  --reps R           timed repeats, median reported (default 10)\n"
    "  --model-layers N   layers of the model the 'x layers' columns scale to (default 32, Llama 3.1 8B)\n"
    "  --json FILE        write every figure as JSON\n";

const char* kDepUsage =
    "usage: bench dep [--stages N] [--repeats R] [--vector N] [--blocks b1,b2,...] [--weights-kb k1,k2,...]\n"
    "                 [--clusters c1,c2,...]\n"
    "  The cost of one grid-wide dependency (counter, as the persistent decode kernel) and of one cluster barrier,\n"
    "  bare, with a vector of N floats staged after it (default 576, SmolLM2's width), and with KiB of weights per\n"
    "  block streamed after (or issued before) the wait. Weight sizes: up to 64, or a multiple of 64.\n";

const char* kProfileUsage =
    "usage: bench profile-target [--mappings a,b,c] [--shapes NxK,...] [--warmup W] [--manifest FILE]\n"
    "  One profiled GEMV launch per mapping and shape, each behind a marker kernel (grid size = id); run under\n"
    "  ncu --profile-from-start off. Writes the id -> mapping, shape manifest as CSV.\n"
    "  --mappings defaults to every mapping of the first list below, in its order:\n";

[[noreturn]] void help(const std::string& text) {
  std::cout << text;
  std::exit(0);
}

Shapes shapes_of(const std::string& flag, const std::string& text) {
  Shapes out;
  for (const std::string& s : split_commas(text)) out.push_back(parse_shape(s));
  if (out.empty()) fail(flag, ": no shape given");
  return out;
}

// Each item of a comma list an integer in [lo, hi]; "" -> none.
std::vector<int> ints_of(const std::string& flag, const std::string& text, int lo, int hi) {
  std::vector<int> out;
  for (const std::string& s : split_commas(text)) out.push_back(int(cli::parse_int(flag, s, lo, hi)));
  return out;
}

// Each section's parse: argv[0] is the section's name, its options start at argv[1].
GemvOptions parse_gemv(int argc, char** argv) {
  GemvOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--mappings") {
      o.mappings = split_commas(value());
      for (const std::string& m : o.mappings) check_gemv_mapping("--mappings", m, /*on_cpu=*/false);
    } else if (a == "--shapes") {
      o.shapes = shapes_of(a, value());
    } else if (a == "--quant") {
      o.quant = split_commas(value());
      for (const std::string& q : o.quant)
        if (q != "q4_0" && q != "q8_0" && q != "q4_k")
          fail("--quant: invalid value '", q, "' (allowed: q4_0, q8_0, q4_k)");
    } else if (a == "--repeats") {
      o.repeats = int(cli::parse_int(a, value(), 1, 1000));
    } else if (a == "--csv") {
      o.csv = true;
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "-h" || a == "--help") {
      help(kGemvUsage + gemv_mapping_lines("  "));
    } else {
      fail("unknown option '", a, "'");
    }
  }
  return o;
}

ProbesOptions parse_probes(int argc, char** argv) {
  ProbesOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--section") {
      o.part = value();
      if (o.part != "batch" && o.part != "tiny" && o.part != "all")
        fail("--section: invalid value '", o.part, "' (allowed: batch, tiny, all)");
    } else if (a == "--batch-shapes") {
      o.batch_shapes = shapes_of(a, value());
    } else if (a == "--tiny-n") {
      o.tiny_n = int(cli::parse_int(a, value(), 1, 1 << 24));
    } else if (a == "--tiny-k") {
      o.tiny_k = ints_of(a, value(), 1, 1 << 16);
      if (o.tiny_k.empty()) fail("--tiny-k: no K given");
      std::sort(o.tiny_k.begin(), o.tiny_k.end());
    } else if (a == "--repeats") {
      o.repeats = int(cli::parse_int(a, value(), 1, 1000));
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "-h" || a == "--help") {
      help(kProbesUsage);
    } else {
      fail("unknown option '", a, "'");
    }
  }
  return o;
}

AttnOptions parse_attn(int argc, char** argv) {
  AttnOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--heads") {
      o.heads = int(cli::parse_int(a, value(), 1, kMaxHeads));
    } else if (a == "--kv-heads") {
      o.kv_heads = int(cli::parse_int(a, value(), 1, kMaxHeads));
    } else if (a == "--head-dim") {
      o.head_dim = int(cli::parse_int(a, value(), 2, kMaxHeadDim));
      if (o.head_dim % 2 != 0)
        cli::usage_error("--head-dim: invalid value '", o.head_dim, "' (allowed: an even number)");
    } else if (a == "--layers") {
      o.layers = int(cli::parse_int(a, value(), 1, 4096));
    } else if (a == "--contexts") {
      o.contexts = ints_of(a, value(), 1, kMaxPositions);
    } else if (a == "--prefill") {
      o.prefill = ints_of(a, value(), 1, kMaxPositions);
    } else if (a == "--reps") {
      o.reps = int(cli::parse_int(a, value(), 1, 1000));
    } else if (a == "--model-layers") {
      o.model_layers = int(cli::parse_int(a, value(), 1, 4096));
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "-h" || a == "--help") {
      help(kAttnUsage);
    } else {
      cli::usage_error("unknown option '", a, "'");
    }
  }
  if (o.heads % o.kv_heads != 0) cli::usage_error("--kv-heads ", o.kv_heads, " must divide --heads ", o.heads);
  if (o.contexts.empty() && o.prefill.empty())
    cli::usage_error("--contexts and --prefill are both empty: nothing to time");
  return o;
}

DepOptions parse_dep(int argc, char** argv) {
  DepOptions o;
  auto list = [](const std::string& flag, const std::string& text, int lo, int hi) {
    std::vector<int> out = ints_of(flag, text, lo, hi);
    if (out.empty()) fail(flag, ": no value given");
    return out;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--stages") o.stages = int(cli::parse_int(a, value(), 1, 1000000));
    else if (a == "--repeats") o.repeats = int(cli::parse_int(a, value(), 2, 1000));
    else if (a == "--vector") o.vector = int(cli::parse_int(a, value(), 0, kDepProbeMaxVector));
    else if (a == "--blocks") o.blocks = list(a, value(), 1, 4096);
    else if (a == "--weights-kb") o.weights_kb = list(a, value(), 0, 1 << 16);
    else if (a == "--clusters") o.clusters = list(a, value(), 1, 16);
    else if (a == "-h" || a == "--help") help(kDepUsage);
    else fail("unknown option '", a, "'");
  }
  return o;
}

ProfileTargetOptions parse_profile_target(int argc, char** argv) {
  ProfileTargetOptions o;
  o.mappings = split_commas(gemv_mapping_list());  // every mapping, in registry order
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return cli::value(argc, argv, i, a); };
    if (a == "--mappings") {
      o.mappings = split_commas(value());
      if (o.mappings.empty()) fail("--mappings: no mapping given");
    } else if (a == "--shapes") {
      o.shapes = shapes_of(a, value());
    } else if (a == "--warmup") {
      o.warmup = int(cli::parse_int(a, value(), 1, 100));
    } else if (a == "--manifest") {
      o.manifest = value();
    } else if (a == "-h" || a == "--help") {
      help(kProfileUsage + gemv_mapping_lines("  "));
    } else {
      fail("unknown option '", a, "'");
    }
  }
  for (const std::string& m : o.mappings) {  // unknown names are bad usage, found before any GPU work
    check_gemv_mapping("--mappings", m, /*on_cpu=*/false);
    gemv_find(m);  // and the registry has it (not a form for quantized weights only)
  }
  return o;
}

// bench all: no options but --help; every section with its defaults, the worst exit status.
int parse_all(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help")
      help("usage: bench all\n  gemv, probes, attn and dep in turn, each with its defaults.\n");
    cli::usage_error("unknown option '", a, "'");
  }
  return 0;
}

int run_all(int) {
  require_cuda_device();  // the one line every CUDA program prints without a GPU, before any section's heading
  int rc = 0;
  const auto section = [&rc](const char* name, auto run) {
    std::cout << "\n# bench " << name << "\n\n" << std::flush;
    rc = std::max(rc, run());
  };
  section("gemv", [] { return run_gemv(GemvOptions{}); });
  section("probes", [] { return run_probes(ProbesOptions{}); });
  section("attn", [] { return run_attn(AttnOptions{}); });
  section("dep", [] { return run_dep(DepOptions{}); });
  return rc;
}

}  // namespace
}  // namespace llm::bench

int main(int argc, char** argv) {
  using namespace llm::bench;
  using llm::cli::run_main;
  const std::string section = argc > 1 ? argv[1] : "";
  const std::string prog = "bench " + section;
  const int n = argc - 1;  // the section's own argv: its name, then its options
  if (section == "gemv") return run_main(prog.c_str(), n, argv + 1, parse_gemv, run_gemv);
  if (section == "probes") return run_main(prog.c_str(), n, argv + 1, parse_probes, run_probes);
  if (section == "attn") return run_main(prog.c_str(), n, argv + 1, parse_attn, run_attn);
  if (section == "dep") return run_main(prog.c_str(), n, argv + 1, parse_dep, run_dep);
  if (section == "profile-target") return run_main(prog.c_str(), n, argv + 1, parse_profile_target, run_profile_target);
  if (section == "all") return run_main(prog.c_str(), n, argv + 1, parse_all, run_all);
  if (section == "-h" || section == "--help") help(kUsage);
  const auto refuse = [&](int, char**) -> int {
    if (section.empty()) llm::cli::usage_error("no section given (gemv, probes, attn, dep, profile-target or all)");
    llm::cli::usage_error("unknown section '", section, "' (allowed: gemv, probes, attn, dep, profile-target, all)");
  };
  return run_main("bench", argc, argv, refuse, [](int) { return 0; });
}
