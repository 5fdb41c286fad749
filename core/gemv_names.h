// The names of the CUDA engine's GEMV mappings (what --gemv, --ab and the chat's /gemv take), listed ONCE, in a
// header that builds without CUDA: the CPU build needs them to check --gemv and to print --help. The CUDA registry
// (kernels/gemv/gemv_registry.cu) expands the same list to its kernels and checks that each kernel file names itself as
// listed here; tests/cpu/gemv_names_test.cpp checks the two agree. The first entry is the default.
#pragma once
#include <string>

#include "core/error.h"

// X(identifier, "name", "one line: what it is and why it exists"). The identifier names the kernel's GemvMapping
// object, gemv_mapping_<identifier>, defined in kernels/gemv/gemv_<identifier>.cu. warp-r2 is first (the default):
// synthetic llama3.1-8b decode on the H200 ran at 223 tokens/s with it, 199.5 with warp and 199.4 with cuBLAS.
#define LLM_GEMV_MAPPINGS(X)                                                                                      \
  X(warp_r2, "warp-r2", "lanes along K, 16-byte loads, two rows per warp share each x chunk: fastest end to end") \
  X(warp, "warp", "lanes along K of the row-major weight, 16-byte loads, shuffle reduction: the coalesced one")  \
  X(thread, "thread", "one thread per output row, 2-byte loads: the deliberately uncoalesced baseline")         \
  X(colmajor, "colmajor", "weight prepacked to [K, N], one thread per output column: coalesced, no reduction")  \
  X(cublas, "cublas", "cublasGemmEx on the row-major weight: the vendor yardstick")                              \
  X(thread_splitk, "thread-splitk", "control: thread's uncoalesced loads, K split so the GPU is full")           \
  X(warp_few, "warp-few", "control: warp's coalesced loads with only as many warps as thread launches")

namespace llm {

struct GemvMappingName {
  const char* name;  // as typed after --gemv
  const char* what;  // one line
};

#define LLM_GEMV_NAME_ENTRY(id, name, what) GemvMappingName{name, what},
inline constexpr GemvMappingName kGemvMappingNames[] = {LLM_GEMV_MAPPINGS(LLM_GEMV_NAME_ENTRY)};
#undef LLM_GEMV_NAME_ENTRY
inline constexpr int kGemvMappingCount = int(sizeof(kGemvMappingNames) / sizeof(kGemvMappingNames[0]));
inline constexpr const char* kGemvDefaultMapping = kGemvMappingNames[0].name;

// The quantized forms (kernels/quant/gemv_quant_<name>.cu; which form runs which weight type: engine/gemv_choice.h). "warp"
// and "thread" name a form of each kind; "as-stored" and "warp-dp4a" exist only for quantized weights. The first is
// the default for quantized weights.
inline constexpr GemvMappingName kQuantGemvNames[] = {
    {"warp", "lanes along K over prepacked planes: one 16-byte load = 32 INT4 (16 INT8) codes, 4 rows share x"},
    {"thread", "one thread per row over the prepacked planes, lanes a row apart: the uncoalesced case, 4-bit codes"},
    {"as-stored", "lanes along K over GGUF's blocks unchanged, 2/4-byte loads: what prepacking is worth"},
    {"warp-dp4a", "warp's loads with x quantized to int8 per 32 in each block's shared memory, dp4a dot products"},
};
inline constexpr int kQuantGemvCount = int(sizeof(kQuantGemvNames) / sizeof(kQuantGemvNames[0]));
inline constexpr const char* kQuantGemvDefault = kQuantGemvNames[0].name;

inline bool is_quant_gemv_name(const std::string& name) {
  for (const GemvMappingName& m : kQuantGemvNames)
    if (name == m.name) return true;
  return false;
}

inline bool gemv_mapping_known(const std::string& name) {
  if (is_quant_gemv_name(name)) return true;
  for (const GemvMappingName& m : kGemvMappingNames)
    if (name == m.name) return true;
  return false;
}

// The one-line description of a registered mapping ("" = the default); "" for an unknown name.
inline const char* gemv_mapping_what(const std::string& name) {
  for (const GemvMappingName& m : kGemvMappingNames)
    if (name == m.name || (name.empty() && m.name == kGemvMappingNames[0].name)) return m.what;
  return "";
}

// "warp-r2 (default), warp, thread, ..."
inline std::string gemv_mapping_names() {
  std::string s;
  for (int i = 0; i < kGemvMappingCount; ++i)
    s += (i ? ", " : "") + std::string(kGemvMappingNames[i].name) + (i == 0 ? " (default)" : "");
  s += "; for quantized weights: ";
  for (int i = 0; i < kQuantGemvCount; ++i)
    s += (i ? ", " : "") + std::string(kQuantGemvNames[i].name) + (i == 0 ? " (default)" : "");
  return s;
}

// "warp-r2,warp,thread,...": every mapping in registry order, comma-separated as --ab and --mappings take them (the
// default list of llama-ab and gemv-profile-target).
inline std::string gemv_mapping_list() {
  std::string s;
  for (int i = 0; i < kGemvMappingCount; ++i) s += (i ? "," : "") + std::string(kGemvMappingNames[i].name);
  return s;
}

// One line per mapping, `indent` first, names padded to one column: for --help and the chat's /gemv.
inline std::string gemv_mapping_lines(const std::string& indent) {
  std::string s;
  for (int i = 0; i < kGemvMappingCount; ++i) {
    std::string name = std::string(kGemvMappingNames[i].name) + (i == 0 ? " (default)" : "");
    if (name.size() < 19) name.resize(19, ' ');
    s += indent + name + " " + kGemvMappingNames[i].what + "\n";
  }
  s += indent + "quantized weights (GGUF Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K, kept quantized):\n";
  for (int i = 0; i < kQuantGemvCount; ++i) {
    std::string name = std::string(kQuantGemvNames[i].name) + (i == 0 ? " (default)" : "");
    if (name.size() < 19) name.resize(19, ' ');
    s += indent + name + " " + kQuantGemvNames[i].what + "\n";
  }
  return s;
}

// The one check of a mapping name wherever one is typed (--gemv, --ab, /gemv): "" = the default. Throws llm::Error
// for an unknown name, listing the mappings; and, when the run is on the CPU reference (`on_cpu`), for any mapping
// but the default, since mappings choose CUDA kernels. `what` names the option ("--gemv", "/gemv").
inline void check_gemv_mapping(const std::string& what, const std::string& name, bool on_cpu) {
  if (name.empty()) return;
  if (!gemv_mapping_known(name))
    fail(what, ": unknown GEMV mapping '", name, "' (known: ", gemv_mapping_names(), ")");
  if (on_cpu && name != kGemvDefaultMapping)
    fail(what, " ", name, ": GEMV mappings apply to --device cuda; this run is on the CPU reference, which has no "
         "GEMV mappings (leave out ", what, " or run with --device cuda)");
}

}  // namespace llm
