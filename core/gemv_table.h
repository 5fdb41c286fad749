// The GEMV mappings of the CUDA engine (what --gemv, --ab and the chat's /gemv take), ONE row each, in a header that
// builds without CUDA: the CPU build needs them to check --gemv and print --help, the sector models and the A/B report
// read their access pattern and description here, the kernel registries index their kernels by the forms named here.
// Each row says everything the rest of the tree asks of a mapping: its name, its one-line "why" (the only copy: --help,
// /gemv and the reports print it from here), its BF16 form, its quantized form and the GGML types that form runs, its
// access pattern for the sector model, and how it runs inside the persistent kernel. engine/gemv_choice.h resolves a
// name into a GemvPlan once; everything after carries the plan. Adding a mapping = one kernel file + one row (and its
// form id in LLM_GEMV_BF16_FORMS or QuantGemvKind). The first row is the default.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"

// The BF16 forms, one kernel file each: X(Id, ident) -> GemvBf16Form::Id, the GemvMapping object gemv_mapping_<ident>
// defined in kernels/gemv/gemv_<ident>.cu. The registry (kernels/gemv/gemv_registry.cu) is indexed by this order.
#define LLM_GEMV_BF16_FORMS(X) \
  X(WarpR2, warp_r2)           \
  X(Warp, warp)                \
  X(Thread, thread)            \
  X(Colmajor, colmajor)        \
  X(Cublas, cublas)            \
  X(ThreadSplitk, thread_splitk) \
  X(WarpFew, warp_few)

namespace llm {

#define LLM_GEMV_FORM_ENUM(id, ident) id,
enum class GemvBf16Form : int8_t { None = -1, LLM_GEMV_BF16_FORMS(LLM_GEMV_FORM_ENUM) };
#undef LLM_GEMV_FORM_ENUM
#define LLM_GEMV_FORM_COUNT(id, ident) +1
inline constexpr int kGemvBf16Forms = 0 LLM_GEMV_BF16_FORMS(LLM_GEMV_FORM_COUNT);
#undef LLM_GEMV_FORM_COUNT

// The quantized forms, one kernel file each (kernels/quant/gemv_quant_<name>.cu); the quantized launcher dispatches on
// this id.
enum class QuantGemvKind : uint8_t {
  Warp,      // lanes along K over the prepacked planes, 16-byte code loads, R rows per warp
  Thread,    // one thread per output row over the prepacked planes (lanes ld_codes bytes apart)
  AsStored,  // lanes along K over GGUF's blocks unchanged (lane j takes block j), 2/4-byte loads
  WarpDp4a,  // Warp's loads, x quantized to int8 per 32 in each block (as llama.cpp's q8_1), dp4a dots
};
inline constexpr int kQuantGemvKinds = 4;

// What a quantized form's kernel can take besides its weights and x (kernels/gemv/gemv_epilogue.h): the one answer the
// engine asks (engine/cuda/gemv_mappings.h) and the launchers check against.
// x's int8 form written by the kernel before (GemvEpilogue::x_q8): warp-dp4a copies it instead of quantizing x.
constexpr bool quant_kind_reads_x_q8(QuantGemvKind k) { return k == QuantGemvKind::WarpDp4a; }
// Whether a form multiplies int8 activations (x rounded per 32 as llama.cpp's q8_1) rather than FP32 x: a short pass's
// batch-k GEMV (kernels/quant/gemv_quant_batch.h) takes the same activations as the decode step's form.
constexpr bool quant_kind_int8_x(QuantGemvKind k) { return k == QuantGemvKind::WarpDp4a; }
// The RMSNorm fold's block sums (GemvEpilogue::scale_sums), added by each warp at a converged point: the warp forms.
constexpr bool quant_kind_reads_norm_sums(QuantGemvKind k) {
  return k == QuantGemvKind::Warp || k == QuantGemvKind::WarpDp4a;
}
// The token axis (GemvEpilogue::tokens: the decode step's launch for several tokens side by side, each bit for bit
// its own step; a decode-order verify): the warp forms' shared kernel.
constexpr bool quant_kind_token_axis(QuantGemvKind k) {
  return k == QuantGemvKind::Warp || k == QuantGemvKind::WarpDp4a;
}
// The BF16 forms with a token axis: the default, warp-r2.
constexpr bool bf16_form_token_axis(GemvBf16Form f) { return f == GemvBf16Form::WarpR2; }

// How the BF16 form's lanes walk the weight: what the sector model (analysis/sector_model.h) replays.
enum class GemvAccess : uint8_t {
  None,          // no BF16 form
  AlongRow,      // row-major [N, K]; the 32 lanes load consecutive 16-byte chunks of ONE row
  AcrossRows,    // row-major [N, K]; lane j loads one element of row 32b + j (does not coalesce)
  ColumnMajor,   // prepacked [K, N]; lanes read consecutive columns of one k
  LibraryModel,  // a library's kernels (cuBLAS), whose access is not public: modelled as AlongRow, 16-byte loads only
};

// Whether and how a form runs inside the persistent kernel (kernels/persistent/), which has its own GEMV stages.
enum class PersistentGemv : uint8_t {
  None,       // cannot run there (--decode persistent refuses the mapping)
  OneRow,     // BF16, lanes along K over the padded row-major layout, one row after the other
  TwoRows,    // BF16, the same, two rows at once sharing each x chunk
  QuantFma,   // quantized, the "warp" form's planes and FP32 lane code
  QuantDp4a,  // quantized, the "warp" form's planes and the "warp-dp4a" lane code (two rows at once)
};

// GGML type ids as bits (1u << id): the types a quantized form runs. The eight of models/quant.h's GgmlQuantType.
inline constexpr uint32_t kGgmlQuantTypesAll =
    (1u << 2) | (1u << 3) | (1u << 6) | (1u << 7) | (1u << 8) | (1u << 12) | (1u << 13) | (1u << 14);

struct GemvRow {
  const char* name;               // as typed after --gemv
  const char* why;                // one line, the BF16 form's; nullptr: no BF16 form
  GemvBf16Form bf16;              // None: this name runs no BF16 weight
  GemvAccess access;              // the BF16 form's access pattern (None without one)
  PersistentGemv bf16_persistent; // the BF16 form inside the persistent kernel
  const char* quant_why;          // one line, the quantized form's; nullptr: no quantized form
  QuantGemvKind quant;            // meaningful only when quant_types != 0
  uint32_t quant_types;           // GGML types (1u << id) the quantized form runs; 0: no quantized form
  PersistentGemv quant_persistent;
  // The BF16 form runs the RMSNorm fold in its epilogue (kernels/gemv/gemv_epilogue.h): every form of ours does, a
  // library's (cuBLAS) cannot; the quantized forms all do. Where a plan's form cannot, the graph path keeps the norm
  // kernels.
  bool bf16_fuses_norm = true;

  constexpr bool has_bf16() const { return bf16 != GemvBf16Form::None; }
  constexpr bool has_quant() const { return quant_types != 0; }
  constexpr bool runs_quant_type(uint32_t ggml_type) const { return ggml_type < 32 && (quant_types >> ggml_type) & 1u; }
};

// warp-r2 is first (the default): synthetic llama3.1-8b decode on the H200 ran at 223 tokens/s with it, 199.5 with warp
// and 199.4 with cuBLAS. warp is the first with a quantized form (the default for quantized weights).
inline constexpr GemvRow kGemvTable[] = {
    {"warp-r2", "lanes along K, 16-byte loads, two rows per warp share each x chunk: fastest end to end",
     GemvBf16Form::WarpR2, GemvAccess::AlongRow, PersistentGemv::TwoRows, nullptr, QuantGemvKind::Warp, 0,
     PersistentGemv::None},
    {"warp", "lanes along K of the row-major weight, 16-byte loads, shuffle reduction: the coalesced one",
     GemvBf16Form::Warp, GemvAccess::AlongRow, PersistentGemv::OneRow,
     "lanes along K over prepacked planes: one 16-byte load = 32 INT4 (16 INT8) codes, 4 rows share x",
     QuantGemvKind::Warp, kGgmlQuantTypesAll, PersistentGemv::QuantFma},
    {"thread", "one thread per output row, 2-byte loads: the deliberately uncoalesced baseline", GemvBf16Form::Thread,
     GemvAccess::AcrossRows, PersistentGemv::None,
     "one thread per row over the prepacked planes, lanes a row apart: the uncoalesced case, 4-bit codes",
     QuantGemvKind::Thread, kGgmlQuantTypesAll, PersistentGemv::None},
    {"colmajor", "weight prepacked to [K, N], one thread per output column: coalesced, no reduction",
     GemvBf16Form::Colmajor, GemvAccess::ColumnMajor, PersistentGemv::None, nullptr, QuantGemvKind::Warp, 0,
     PersistentGemv::None},
    {"cublas", "cublasGemmEx on the row-major weight: the vendor yardstick", GemvBf16Form::Cublas,
     GemvAccess::LibraryModel, PersistentGemv::None, nullptr, QuantGemvKind::Warp, 0, PersistentGemv::None, false},
    {"thread-splitk", "control: thread's uncoalesced loads, K split so the GPU is full", GemvBf16Form::ThreadSplitk,
     GemvAccess::AcrossRows, PersistentGemv::None, nullptr, QuantGemvKind::Warp, 0, PersistentGemv::None},
    {"warp-few", "control: warp's coalesced loads with only as many warps as thread launches", GemvBf16Form::WarpFew,
     GemvAccess::AlongRow, PersistentGemv::OneRow, nullptr, QuantGemvKind::Warp, 0, PersistentGemv::None},
    {"as-stored", nullptr, GemvBf16Form::None, GemvAccess::None, PersistentGemv::None,
     "lanes along K over GGUF's blocks unchanged, 2/4-byte loads: what prepacking is worth", QuantGemvKind::AsStored,
     kGgmlQuantTypesAll, PersistentGemv::None},
    {"warp-dp4a", nullptr, GemvBf16Form::None, GemvAccess::None, PersistentGemv::None,
     "warp's loads with x quantized to int8 per 32 in each block's shared memory, dp4a dot products",
     QuantGemvKind::WarpDp4a, kGgmlQuantTypesAll, PersistentGemv::QuantDp4a},
};
inline constexpr int kGemvRows = int(sizeof(kGemvTable) / sizeof(kGemvTable[0]));

// The row of a name, or nullptr. The one place a mapping name is compared.
inline const GemvRow* gemv_row(const std::string& name) {
  for (const GemvRow& r : kGemvTable)
    if (name == r.name) return &r;
  return nullptr;
}
// The row of a BF16 form / of a quantized form (the first row with it); nullptr for None.
constexpr const GemvRow* gemv_row(GemvBf16Form f) {
  for (const GemvRow& r : kGemvTable)
    if (r.bf16 == f && f != GemvBf16Form::None) return &r;
  return nullptr;
}
constexpr const GemvRow* gemv_row(QuantGemvKind k) {
  for (const GemvRow& r : kGemvTable)
    if (r.has_quant() && r.quant == k) return &r;
  return nullptr;
}
// The defaults: the first row with a BF16 form, and the first with a quantized form.
constexpr const GemvRow& gemv_default_bf16_row() {
  for (const GemvRow& r : kGemvTable)
    if (r.has_bf16()) return r;
  return kGemvTable[0];
}
constexpr const GemvRow& gemv_default_quant_row() {
  for (const GemvRow& r : kGemvTable)
    if (r.has_quant()) return r;
  return kGemvTable[0];
}
inline constexpr const char* kGemvDefaultMapping = gemv_default_bf16_row().name;
inline constexpr const char* kQuantGemvDefault = gemv_default_quant_row().name;

// The name of a form (for messages): "warp", "as-stored", ...
inline const char* gemv_form_name(GemvBf16Form f) { return gemv_row(f) ? gemv_row(f)->name : "?"; }
inline const char* quant_gemv_kind_name(QuantGemvKind k) { return gemv_row(k) ? gemv_row(k)->name : "?"; }
// The one-line "why" of a form, from its row.
inline const char* quant_gemv_kind_why(QuantGemvKind k) { return gemv_row(k) ? gemv_row(k)->quant_why : "?"; }

inline bool gemv_mapping_known(const std::string& name) { return gemv_row(name) != nullptr; }

// The one-line description of a mapping's BF16 form ("" = the default); "" for an unknown name or one without a BF16
// form.
inline const char* gemv_mapping_what(const std::string& name) {
  const GemvRow* r = name.empty() ? &gemv_default_bf16_row() : gemv_row(name);
  return r && r->why ? r->why : "";
}

// "warp-r2 (default), warp, thread, ...; for quantized weights: warp (default), ..."
inline std::string gemv_mapping_names() {
  std::string s, q;
  for (const GemvRow& r : kGemvTable) {
    const char* mark_bf16 = &r == &gemv_default_bf16_row() ? " (default)" : "";
    const char* mark_quant = &r == &gemv_default_quant_row() ? " (default)" : "";
    if (r.has_bf16()) s += (s.empty() ? "" : ", ") + std::string(r.name) + mark_bf16;
    if (r.has_quant()) q += (q.empty() ? "" : ", ") + std::string(r.name) + mark_quant;
  }
  return s + "; for quantized weights: " + q;
}

// "warp-r2,warp,thread,...": every mapping with a BF16 form in table order, comma-separated as --ab and --mappings
// take them (the default list of llama-ab and gemv-profile-target); quant: those with a quantized form.
inline std::string gemv_mapping_list(bool quant = false) {
  std::string s;
  for (const GemvRow& r : kGemvTable)
    if (quant ? r.has_quant() : r.has_bf16()) s += (s.empty() ? "" : ",") + std::string(r.name);
  return s;
}

// One line per mapping, `indent` first, names padded to one column: for --help and the chat's /gemv.
inline std::string gemv_mapping_lines(const std::string& indent) {
  auto line = [&](const GemvRow& r, bool is_default, const char* what) {
    std::string name = std::string(r.name) + (is_default ? " (default)" : "");
    if (name.size() < 19) name.resize(19, ' ');
    return indent + name + " " + what + "\n";
  };
  std::string s, q;
  for (const GemvRow& r : kGemvTable) {
    if (r.has_bf16()) s += line(r, &r == &gemv_default_bf16_row(), r.why);
    if (r.has_quant()) q += line(r, &r == &gemv_default_quant_row(), r.quant_why);
  }
  return s + indent + "quantized weights (GGUF Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, kept quantized):\n" + q;
}

// The one check of a mapping name wherever one is typed (--gemv, --ab, /gemv): "" = the default. Throws llm::Error
// for an unknown name, listing the mappings; and, when the run is on the CPU reference (`on_cpu`), for any mapping
// but the default, since mappings choose CUDA kernels. `what` names the option ("--gemv", "/gemv").
inline void check_gemv_mapping(const std::string& what, const std::string& name, bool on_cpu) {
  if (name.empty()) return;
  const GemvRow* r = gemv_row(name);
  if (!r) fail(what, ": unknown GEMV mapping '", name, "' (known: ", gemv_mapping_names(), ")");
  if (on_cpu && r != &gemv_default_bf16_row())
    fail(what, " ", name, ": GEMV mappings apply to --device cuda; this run is on the CPU reference, which has no "
         "GEMV mappings (leave out ", what, " or run with --device cuda)");
}

}  // namespace llm
