// bench: the command line of the benchmark harness (measure/bench/): one program, one section per measurement. Each
// section's options are declared here, in one apps/cli.h option table per section (`bench SECTION --help` prints it,
// with defaults and ranges), and handed to its entry point (measure/bench/sections.h); no measurement code lives here.
//
//   bench gemv            GEMV mappings (or quantized forms) on the Llama 3.1 8B decode shapes
//   bench probes          batched GEMV; tiny K
//   bench attn            decode attention at long contexts, causal prefill
//   bench dep             the cost of one dependency inside a persistent kernel
//   bench profile-target  one launch per mapping and shape behind a marker kernel, for ncu
//   bench all             gemv, probes, attn and dep in turn, each with its defaults
// Bad usage says "run 'bench SECTION --help' for the options" (apps/cli.h).
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "apps/cli.h"                  // Options, usage_error, run_main
#include "core/error.h"                // llm::fail
#include "core/gemv_table.h"           // check_gemv_mapping, gemv_row, gemv_mapping_lines, gemv_mapping_list
#include "engine/backend.h"            // require_cuda_device
#include "engine/memory_plan.h"        // kQuantBatchPassMax
#include "measure/bench/sections.h"    // the options and entry points
#include "measure/probes/dep_probe.h"  // kDepProbeMaxVector
#include "models/config.h"             // kMaxHeads, kMaxHeadDim, kMaxPositions: the ranges the engine supports

namespace llm::bench {
namespace {

using cli::split_commas;
using cli::usage_error;

const char* kUsage =
    "usage: bench SECTION [options]; bench SECTION --help for a section's options\n"
    "  gemv            GB/s of each GEMV mapping (or quantized form) on the Llama 3.1 8B decode shapes\n"
    "  probes          batched GEMV (B = 1..8) against B separate GEMVs; tiny K: where 'warp' overtakes\n"
    "  attn            decode attention GB/s at long contexts beside the roofline, causal prefill TFLOP/s\n"
    "  dep             what one dependency between the resident blocks of a persistent kernel costs\n"
    "  profile-target  one launch per mapping and shape behind a marker kernel, for ncu (tools/ncu-gemv.sh)\n"
    "  all             gemv, probes, attn and dep in turn, each with its defaults\n";

const char* kGemvUsage =
    "usage: bench gemv [options]\n"
    "\n"
    "GB/s of weight bytes per GEMV mapping and shape, beside a streaming-read roofline measured in the same run. With\n"
    "--quant, random weights quantized (models/quant.h) run through the quantized forms instead; GB/s of the bytes\n"
    "each form reads (codes + scales; GGUF's blocks for as-stored).\n"
    "\n";

const char* kProbesUsage =
    "usage: bench probes [options]\n"
    "\n"
    "batch: batched GEMV (B = 1, 2, 4, 8 vectors, weights read once) vs B separate warp GEMVs.\n"
    "tiny:  warp vs colmajor vs several-rows-per-warp for small K; where warp overtakes.\n"
    "\n";

const char* kAttnUsage =
    "usage: bench attn [options]\n"
    "\n"
    "The attention kernels (kernels/ops/ops.h) on random BF16 caches. Decode: one query token at position L - 1 over\n"
    "L cache rows; GB/s of the K and V bytes read (2 x L x kv_heads x head_dim x 2 B) beside a streaming-read\n"
    "roofline measured in the same run. Prefill: N query tokens at positions 0 .. N - 1 over a fresh cache; TFLOP/s\n"
    "of the causal FLOPs (4 x heads x head_dim x N (N + 1) / 2). Every call takes the next of several caches whose\n"
    "bytes together exceed 4x L2.\n"
    "\n";

const char* kDepUsage =
    "usage: bench dep [options]\n"
    "\n"
    "The cost of one grid-wide dependency (counter, as the persistent decode kernel) and of one cluster barrier,\n"
    "bare, with a vector of floats staged after it, and with KiB of weights per block streamed after (or issued\n"
    "before) the wait.\n"
    "\n";

const char* kProfileUsage =
    "usage: bench profile-target [options]\n"
    "\n"
    "One profiled GEMV launch per mapping and shape, each behind a marker kernel (grid size = id); run under\n"
    "ncu --profile-from-start off. Writes the id -> mapping, shape manifest as CSV.\n"
    "\n";

const char* kAllUsage =
    "usage: bench all\n"
    "\n"
    "gemv, probes, attn and dep in turn, each with its defaults.\n"
    "\n";

// "NxK" -> (N, K), both in [1, 2^30]; fails naming `flag` and its expected form.
std::pair<int, int> parse_shape(const std::string& flag, const std::string& s) {
  const size_t x = s.find('x');
  char* end1 = nullptr;
  char* end2 = nullptr;
  const long n = x == std::string::npos ? 0 : std::strtol(s.c_str(), &end1, 10);
  const long k = x == std::string::npos ? 0 : std::strtol(s.c_str() + x + 1, &end2, 10);
  if (x == std::string::npos || end1 != s.c_str() + x || *end2 != '\0' || n <= 0 || k <= 0 || n > (1L << 30) ||
      k > (1L << 30))
    fail(flag, ": expected NxK with positive integers (e.g. 4096x14336), found '", s, "'");
  return {int(n), int(k)};
}

Shapes shapes_of(const std::string& flag, const std::string& text) {
  Shapes out;
  for (const std::string& s : split_commas(text)) out.push_back(parse_shape(flag, s));
  if (out.empty()) fail(flag, ": no shape given");
  return out;
}

// "4096x4096,1024x4096": shapes as --shapes takes them.
std::string shapes_text(const Shapes& shapes) {
  std::string s;
  for (const auto& [n, k] : shapes) s += (s.empty() ? "" : ",") + std::to_string(n) + "x" + std::to_string(k);
  return s;
}

// A list of NxK shapes replacing the default (--shapes, --batch-shapes).
void add_shapes(cli::Options& t, const char* names, Shapes* target, const std::string& help) {
  const auto apply = [target](const std::string& flag, const std::string& text) { *target = shapes_of(flag, text); };
  t.custom(names, "NxK,...", apply, help).default_is(shapes_text(*target)).allowed("N and K from 1 to 2^30");
}

GemvOptions parse_gemv(int argc, char** argv) {
  GemvOptions o;
  cli::Options t(kGemvUsage);
  const auto mappings = [&o](const std::string& flag, const std::string& text) {
    o.mappings = split_commas(text);
    for (const std::string& m : o.mappings) check_gemv_mapping(flag, m, /*on_cpu=*/false);
  };
  t.custom("--mappings", "a,b,c", mappings,
           "GEMV mappings to time, in this order; with --quant, quantized forms (warp, thread, as-stored, warp-dp4a)")
      .default_is("every mapping of the first list below, in its order; with --quant, every quantized form");
  add_shapes(t, "--shapes", &o.shapes, "GEMV shapes, N rows x K columns");
  const auto quant = [&o](const std::string& flag, const std::string& text) {
    o.quant = split_commas(text);
    for (const std::string& q : o.quant)
      if (q != "q4_0" && q != "q4_1" && q != "q8_0" && q != "q5_0" && q != "q5_1" && q != "q4_k" && q != "q5_k" &&
          q != "q6_k")
        usage_error(flag, ": invalid value '", q, "' (allowed: q4_0, q4_1, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k)");
  };
  t.custom("--quant", "q4_0,...", quant,
           "random weights quantized to these types (comma-separated), timed through the quantized forms instead")
      .allowed("q4_0, q4_1, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k");
  t.integer("--repeats", "R", &o.repeats, 1, 1000, "timed repeats, median reported");
  t.flag("--csv", &o.csv, "CSV instead of the markdown table");
  t.text("--json", "FILE", &o.json_path, "write every figure as JSON");
  t.epilogue("GEMV mappings:\n" + gemv_mapping_lines("  "));
  t.parse(argc, argv);
  return o;
}

ProbesOptions parse_probes(int argc, char** argv) {
  ProbesOptions o;
  cli::Options t(kProbesUsage);
  t.choice("--section", "PART", &o.part, {"batch", "qbatch", "tiny", "all"}, "which probes to run");
  add_shapes(t, "--batch-shapes", &o.batch_shapes, "the batched GEMV's shapes, N rows x K columns");
  t.integer("--tiny-n", "N", &o.tiny_n, 1, 1 << 24, "rows of the tiny-K GEMVs");
  t.integers("--tiny-k", "k1,k2,...", &o.tiny_k, 1, 1 << 16, "the tiny-K GEMVs' K, comma-separated");
  add_shapes(t, "--qbatch-shapes", &o.qbatch_shapes, "the batch-k quantized GEMV's shapes");
  t.integers("--qbatch-k", "k1,k2,...", &o.qbatch_k, 1, kQuantBatchPassMax,
             "the batch-k quantized GEMV's vector counts, comma-separated");
  t.integer("--repeats", "R", &o.repeats, 1, 1000, "timed repeats, median reported");
  t.text("--json", "FILE", &o.json_path, "write every figure as JSON");
  t.parse(argc, argv);
  if (o.tiny_k.empty()) usage_error("--tiny-k: no K given");
  if (o.qbatch_k.empty()) usage_error("--qbatch-k: no vector count given");
  std::sort(o.tiny_k.begin(), o.tiny_k.end());
  return o;
}

AttnOptions parse_attn(int argc, char** argv) {
  AttnOptions o;
  cli::Options t(kAttnUsage);
  t.integer("--heads", "N", &o.heads, 1, kMaxHeads, "query heads");
  t.integer("--kv-heads", "N", &o.kv_heads, 1, kMaxHeads, "KV heads, dividing --heads");
  const std::string even_head_dim = "even, 2 to " + std::to_string(kMaxHeadDim);
  t.integer("--head-dim", "N", &o.head_dim, 2, kMaxHeadDim, "head dimension").allowed(even_head_dim);
  t.integers("--contexts", "L,...", &o.contexts, 1, kMaxPositions,
             "decode context lengths ('' = no decode); each is timed with max_ctx = L and, below the largest, with "
             "max_ctx = the largest (the engine passes its cache size; the KV split follows the length on the "
             "device, so both rows should agree)");
  t.integers("--prefill", "N,...", &o.prefill, 1, kMaxPositions, "prefill token counts ('' = no prefill)");
  t.integer("--layers", "N", &o.layers, 1, 4096, "caches rotated through")
      .default_is("per length, enough that their bytes exceed 4x L2, at least 2, fewer if memory is short");
  t.integer("--reps", "R", &o.reps, 1, 1000, "timed repeats, median reported");
  t.integer("--model-layers", "N", &o.model_layers, 1, 4096,
            "layers of the model the 'x layers' columns scale to; 32 is Llama 3.1 8B");
  t.text("--json", "FILE", &o.json_path, "write every figure as JSON");
  t.parse(argc, argv);
  if (o.head_dim % 2 != 0) usage_error("--head-dim: invalid value '", o.head_dim, "' (allowed: ", even_head_dim, ")");
  if (o.heads % o.kv_heads != 0) usage_error("--kv-heads ", o.kv_heads, " must divide --heads ", o.heads);
  if (o.contexts.empty() && o.prefill.empty()) usage_error("--contexts and --prefill are both empty: nothing to time");
  return o;
}

DepOptions parse_dep(int argc, char** argv) {
  DepOptions o;
  cli::Options t(kDepUsage);
  t.integer("--stages", "N", &o.stages, 1, 1000000, "dependencies per timed launch");
  t.integer("--repeats", "R", &o.repeats, 2, 1000, "timed repeats");
  t.integer("--vector", "N", &o.vector, 0, kDepProbeMaxVector,
            "floats staged after each wait; 576 is SmolLM2's width");
  t.integers("--blocks", "b1,b2,...", &o.blocks, 1, 4096, "resident blocks (grid sizes), comma-separated");
  t.integers("--weights-kb", "k1,k2,...", &o.weights_kb, 0, 1 << 16,
             "KiB of weights per block, comma-separated: up to 64, or a multiple of 64");
  t.integers("--clusters", "c1,c2,...", &o.clusters, 1, 16, "cluster sizes of the cluster barrier, comma-separated");
  t.parse(argc, argv);
  const auto nonempty = [](const char* flag, const std::vector<int>& list) {
    if (list.empty()) usage_error(flag, ": no value given");
  };
  nonempty("--blocks", o.blocks);
  nonempty("--weights-kb", o.weights_kb);
  nonempty("--clusters", o.clusters);
  return o;
}

ProfileTargetOptions parse_profile_target(int argc, char** argv) {
  ProfileTargetOptions o;
  o.mappings = split_commas(gemv_mapping_list());  // every mapping, in registry order
  cli::Options t(kProfileUsage);
  const auto mappings = [&o](const std::string& flag, const std::string& text) {
    o.mappings = split_commas(text);
    if (o.mappings.empty()) usage_error(flag, ": no mapping given");
  };
  t.custom("--mappings", "a,b,c", mappings, "GEMV mappings to profile, in this order")
      .default_is("every mapping of the first list below, in its order");
  add_shapes(t, "--shapes", &o.shapes, "GEMV shapes, N rows x K columns");
  t.integer("--warmup", "W", &o.warmup, 1, 100, "untimed launches of each before its profiled one");
  t.text("--manifest", "FILE", &o.manifest, "where the CSV manifest goes").default_is("stdout");
  t.epilogue("GEMV mappings:\n" + gemv_mapping_lines("  "));
  t.parse(argc, argv);
  for (const std::string& m : o.mappings) {  // unknown names are bad usage, found before any GPU work
    check_gemv_mapping("--mappings", m, /*on_cpu=*/false);
    if (!gemv_row(m)->has_bf16())  // and it has a BF16 kernel to profile (not a form for quantized weights only)
      usage_error("--mappings: GEMV mapping '", m, "' runs quantized weights only (BF16 mappings: ",
                  gemv_mapping_list(), ")");
  }
  return o;
}

// bench all: no options but --help; every section with its defaults, the worst exit status.
int parse_all(int argc, char** argv) {
  cli::Options t(kAllUsage);
  t.parse(argc, argv);
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
  if (section == "-h" || section == "--help") {
    std::cout << kUsage;
    return 0;
  }
  const auto refuse = [&](int, char**) -> int {
    if (section.empty()) usage_error("no section given (gemv, probes, attn, dep, profile-target or all)");
    usage_error("unknown section '", section, "' (allowed: gemv, probes, attn, dep, profile-target, all)");
  };
  return run_main("bench", argc, argv, refuse, [](int) { return 0; });
}
