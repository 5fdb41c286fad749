// gemv-sectors: prints the sector model's prediction (sectors, lines, efficiency, DRAM bytes) for GEMV mappings, and
// with --quant for the quantized GEMV forms (analysis/quant_sector_model.h).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "analysis/quant_sector_model.h"  // predict_quant: the quantized forms
#include "analysis/sector_model.h"        // predict, sector_mappings, sector_table_markdown
#include "apps/cli.h"               // Options, run_main: bad usage exits 2 with the --help hint
#include "core/error.h"             // llm::Error, llm::fail
#include "core/gemv_table.h"        // gemv_mapping_lines: the engine's mappings, the default named

namespace {

const char* kUsage =
    "usage: gemv-sectors [--mapping NAME] --shape NxK --dtype bf16|f16|q8_0|q4_0|int4 [--load-bytes B]"
    " [--ld-bytes B] [--json]\n"
    "       gemv-sectors --quant q4_0|q4_1|q5_0|q5_1|q8_0|q4_k|q6_k [--mapping warp|warp-dp4a|thread|as-stored]\n"
    "                    --shape NxK [--sms N] [--warp-x kernel|global|shared] [--json]\n"
    "\n"
    "Predicts, for y[N] = W[N, K] x[K], what the 32 lanes of a warp touch in each load instruction: distinct 32 B\n"
    "sectors and 128 B lines per request, useful bytes, efficiency, requests per stored row and for the matrix, and\n"
    "DRAM traffic with no L1 reuse (sectors x 32 B) and with perfect reuse (matrix bytes). One row per mapping unless\n"
    "--mapping names one.\n"
    "\n";

struct Options {
  std::string mapping;  // "" = every mapping
  int64_t N = 0, K = 0;
  std::string dtype;
  std::string quant;  // --quant: the quantized forms instead of --dtype
  int sms = llm::kQuantSectorDefaultSms;
  llm::QuantWarpX warp_x = llm::QuantWarpX::Kernel;
  int load_bytes = 0;  // 0 = per-mapping default
  int64_t ld_bytes = 0;
  bool json = false;
};

// Parses a positive decimal integer; the whole string must be digits.
bool parse_positive(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 15 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoll(s);
  return *out > 0;
}

void parse_shape(const std::string& s, Options* o) {
  size_t x = s.find('x');
  if (x == std::string::npos || !parse_positive(s.substr(0, x), &o->N) || !parse_positive(s.substr(x + 1), &o->K))
    llm::fail("--shape '", s, "' is malformed: expected NxK with positive integers, e.g. 4096x4096");
}

// The options shared by both models. This program's value messages predate apps/cli.h's vocabulary and tests and
// scripts read them ("malformed", "expected one of ..."): its number options parse themselves (custom), the table
// states their ranges.
void declare_options(llm::cli::Options& t, Options& o) {
  t.text("--mapping", "NAME", &o.mapping, "one of the GEMV mappings below").default_is("all of them");
  t.custom("--shape", "NxK", [&o](const std::string&, const std::string& v) { parse_shape(v, &o); },
           "output rows x input columns, e.g. 4096x4096 (required)");
  t.custom("--dtype", "T", [&o](const std::string&, const std::string& v) {
    llm::parse_weight_format(v);
    o.dtype = v;
  }, "bf16, f16 (2 B); q8_0 (34 B / 32 weights); q4_0 (18 B / 32); int4 (nibble plane, 16 B / 32)");
  t.custom("--load-bytes", "B", [&o](const std::string&, const std::string& v) {
    int64_t n = 0;
    if (!parse_positive(v, &n) || (n != 1 && n != 2 && n != 4 && n != 8 && n != 16))
      llm::fail("--load-bytes '", v, "' is not supported: expected one of 1, 2, 4, 8, 16");
    o.load_bytes = int(n);
  }, "bytes per lane per load; cublas is always 16")
      .default_is("16 for warp-like mappings and quantized types, one element otherwise")
      .allowed("1, 2, 4, 8, 16");
  t.custom("--ld-bytes", "B", [&o](const std::string&, const std::string& v) {
    if (!parse_positive(v, &o.ld_bytes)) llm::fail("--ld-bytes '", v, "' is malformed: expected a positive integer");
  }, "padded row stride of the stored matrix in bytes")
      .default_is("packed")
      .allowed("a positive integer");
  t.flag("--json", &o.json, "one JSON object per mapping per line instead of the table (for tools/ncu_table.py)");
  t.custom("--quant", "T", [&o](const std::string&, const std::string& v) {
    llm::parse_quant_sector_type(v);
    o.quant = v;
  }, "the quantized GEMV forms (kernels/quant/gemv_quant_*.cu) on GGML type T instead of --dtype: replays every "
     "global load of one launch (its plan, the prepacked planes or GGUF's blocks, x) and gives per load class (codes, "
     "scales, x, ...) requests, sectors and bytes per request, the kernel-wide sectors/request over all loads (what "
     "ncu's l1tex__t_sectors and _requests_pipe_lsu_mem_global_op_ld count) and DRAM bytes (distinct weight "
     "sectors); --mapping: warp, warp-dp4a, thread or as-stored (default: all four); --json adds the classes to each "
     "line")
      .allowed("q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k");
  t.custom("--sms", "N", [&o](const std::string&, const std::string& v) {
    int64_t n = 0;
    if (!parse_positive(v, &n) || n > 100000) llm::fail("--sms '", v, "' is malformed: expected a positive integer");
    o.sms = int(n);
  }, "with --quant: SMs of the GPU the launch plan is made for")
      .default_is(std::to_string(llm::kQuantSectorDefaultSms) + ", the H200")
      .allowed("1 to 100000");
  t.custom("--warp-x", "S", [&o](const std::string&, const std::string& v) { o.warp_x = llm::parse_quant_warp_x(v); },
           "with --quant, where warp reads x: kernel (as gemv_quant_warp.cu decides, staged in shared memory up to "
           "k = 29,056, from global memory past it), global (every chunk's x from global memory, as the kernel did "
           "before x staging, e.g. at commit bacc727), shared (staged whatever k)")
      .default_is("kernel")
      .allowed("kernel, global, shared");
}

Options parse_args(int argc, char** argv) {
  Options o;
  llm::cli::Options t(kUsage);
  declare_options(t, o);
  t.epilogue("GEMV mappings (run-llama --gemv NAME picks one on --device cuda):\n" + llm::gemv_mapping_lines("  "));
  t.parse(argc, argv);
  if (!o.mapping.empty()) {  // fails listing the known mappings
    if (o.quant.empty())
      llm::find_sector_mapping(o.mapping);
    else
      llm::parse_quant_sector_mapping(o.mapping);
  }
  if (!t.given("--shape")) llm::fail("--shape NxK is required");
  if (!o.quant.empty()) {
    if (!o.dtype.empty()) llm::fail("--quant and --dtype exclude each other: --quant T models the quantized forms");
    if (o.load_bytes || o.ld_bytes)
      llm::fail("--load-bytes and --ld-bytes do not apply to --quant: the forms' loads and strides are the kernels'");
    return o;
  }
  if (t.given("--sms") || t.given("--warp-x"))
    llm::fail(t.given("--sms") ? "--sms" : "--warp-x", " applies to --quant only");
  if (o.dtype.empty()) llm::fail("--dtype is required: one of bf16, f16, q8_0, q4_0, int4");
  return o;
}

// Every mapping that can read this format; what is left out or changed goes to `notes` (printed under the table).
std::vector<llm::SectorPrediction> predict_all(const Options& o, llm::WeightFormat f, std::vector<std::string>* notes) {
  std::vector<llm::SectorPrediction> rows;
  for (const auto& m : llm::sector_mappings()) {
    std::string name = m.name;
    const bool library = m.access == llm::GemvAccess::LibraryModel;  // modelled with 16-byte loads only
    if (m.transposed && llm::weight_format_info(f).quantized) {
      notes->push_back(name + " omitted: " + o.dtype + " blocks run along K, so there is no [K, N] layout");
      continue;
    }
    int lb = library ? 16 : o.load_bytes;
    if (library && o.load_bytes && o.load_bytes != 16) notes->push_back(name + " kept at 16-byte loads");
    rows.push_back(llm::predict(name, o.N, o.K, f, lb, o.ld_bytes));
  }
  return rows;
}

// One line per prediction, machine-readable: the figures the table shows, unrounded.
void print_json_lines(const std::string& dtype, const std::vector<llm::SectorPrediction>& rows) {
  for (const auto& r : rows) {
    char buf[768];
    std::snprintf(buf, sizeof buf,
                  "{\"mapping\": \"%s\", \"dtype\": \"%s\", \"N\": %lld, \"K\": %lld, \"load_bytes\": %d, "
                  "\"sectors_per_request\": %.6f, \"lines_per_request\": %.6f, \"useful_bytes_per_request\": %.6f, "
                  "\"efficiency\": %.6f, \"requests_total\": %lld, \"sectors_total\": %lld, "
                  "\"matrix_bytes\": %lld, \"dram_bytes_no_reuse\": %lld, \"dram_bytes_perfect_reuse\": %lld, "
                  "\"lane_stride_bytes\": %lld}",
                  r.mapping.c_str(), dtype.c_str(), (long long)r.N, (long long)r.K, r.load_bytes,
                  r.sectors_per_request(), r.lines_per_request(), r.useful_bytes_per_request(), r.efficiency(),
                  (long long)r.requests_total, (long long)r.sectors_total, (long long)r.matrix_bytes,
                  (long long)r.dram_bytes_no_reuse(), (long long)r.dram_bytes_perfect_reuse(),
                  (long long)r.lane_stride_bytes);
    std::cout << buf << "\n";
  }
}

// --quant: every quantized form (or the one --mapping names) on W[N, K] of that type.
int run_quant(const Options& o) {
  std::vector<llm::QuantSectorPrediction> rows;
  const std::vector<std::string> forms =
      o.mapping.empty() ? llm::quant_sector_mapping_names() : std::vector<std::string>{o.mapping};
  for (const std::string& m : forms) rows.push_back(llm::predict_quant(m, o.N, o.K, o.quant, o.sms, o.warp_x));
  if (o.json) {
    for (const auto& r : rows) std::cout << llm::quant_sector_json_line(r) << "\n";
    return 0;
  }
  const auto& w = rows.front().weight;
  const int64_t packed = llm::quant_gemv_bytes_read(llm::QuantGemvKind::Warp, w);
  const int64_t stored = llm::quant_gemv_bytes_read(llm::QuantGemvKind::AsStored, w);
  char mb[96];
  std::snprintf(mb, sizeof mb, "%.2f MB prepacked (codes + scales), %.2f MB as stored", packed / 1e6, stored / 1e6);
  std::cout << "W[" << o.N << ", " << o.K << "] " << llm::quant_type_traits(w.type_id).name << ": " << mb
            << "; launch plans for " << o.sms
            << " SMs; req = one warp-wide global load instruction, over the whole launch (what ncu's"
            << " l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_ld count)\n\n";
  std::cout << llm::quant_sector_summary_markdown(rows) << "\n";
  std::cout << llm::quant_sector_class_markdown(rows) << "\n";
  std::vector<std::string> notes = {
      "sectors/req (all loads) = all classes' sectors / all classes' requests: codes, scales and x together; "
      "bytes/req = distinct bytes a request asks for (lanes reading one address count once), lane bytes/req = "
      "the lanes' bytes each counted",
      "x is modelled 16-byte aligned (float4 loads). x: each chunk's x from global memory (lanes a chunk's x apart); "
      "x_stage: warp's blocks copying x to shared memory (k <= 29,056; --warp-x global models the kernel before "
      "that, commit bacc727); x_quant: warp-dp4a's blocks loading x to quantize it; both once per block, so they "
      "grow with the grid",
      "DRAM MB (weight sectors) = distinct 32 B sectors of the weight the launch touches x 32: the DRAM traffic when "
      "each is fetched once; bytes read MB (form) = the kernels' quant_gemv_bytes_read; DRAM MB no reuse = every "
      "request's sectors fetched again"};
  for (const auto& r : rows) {
    if (r.dram_bytes() != r.bytes_read)
      notes.push_back(r.mapping + ": the weight sectors hold " + std::to_string(r.dram_bytes() - r.bytes_read) +
                      " B of row padding beside the " + std::to_string(r.bytes_read) + " B the form reads");
    if (r.weight_bytes_touched != r.bytes_read)
      notes.push_back(r.mapping + ": the loads touch " + std::to_string(r.weight_bytes_touched) +
                      " distinct weight bytes, not the form's " + std::to_string(r.bytes_read) + " (model error)");
  }
  for (const auto& n : notes) std::cout << "- " << n << "\n";
  return 0;
}

int run(const Options& o) {
  if (!o.quant.empty()) return run_quant(o);
  const llm::WeightFormat f = llm::parse_weight_format(o.dtype);
  std::vector<std::string> notes;
  std::vector<llm::SectorPrediction> rows;
  if (o.mapping.empty())
    rows = predict_all(o, f, &notes);
  else
    rows.push_back(llm::predict(o.mapping, o.N, o.K, f, o.load_bytes, o.ld_bytes));
  if (o.json) {
    print_json_lines(o.dtype, rows);
    return 0;
  }

  const auto& first = rows.front();
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.2f", first.matrix_bytes / 1e6);
  std::cout << "W[" << o.N << ", " << o.K << "] " << o.dtype << ", " << first.matrix_bytes << " B (" << mb
            << " MB); 32 B sectors, 128 B lines; req = one warp-wide load instruction;"
            << " req/row = requests touching one stored row\n\n";
  std::cout << llm::sector_table_markdown(rows);
  std::cout << "\n";
  for (const auto& r : rows) {
    const llm::GemvAccess access = llm::find_sector_mapping(r.mapping).access;
    if (access == llm::GemvAccess::LibraryModel)
      notes.push_back(r.mapping + " is a model (warp-like, 16-byte loads); its real access pattern is not public");
    if (access == llm::GemvAccess::ColumnMajor)
      notes.push_back(r.mapping + " stores W as [K, N]: its stored rows are the K rows of N weights");
    if (r.misaligned_lanes_total > 0)
      notes.push_back(r.mapping + ": " + std::to_string(r.misaligned_lanes_total) + " of " +
                      std::to_string(r.lane_loads_total) +
                      " lane loads are not aligned to their width (a GPU vector load would fault: pad the row stride)");
  }
  for (const auto& n : notes) std::cout << "- " << n << "\n";
  return 0;
}

}  // namespace

// Every error is the command line's: the prediction is computed from the options alone (exit 2).
int main(int argc, char** argv) {
  return llm::cli::run_main("gemv-sectors", argc, argv, parse_args,
                            [](const Options& o) { return llm::cli::as_usage([&] { return run(o); }); });
}
