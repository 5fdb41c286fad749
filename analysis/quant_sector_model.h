// Sector model of the QUANTIZED GEMV forms (kernels/quant/gemv_quant_*.cu): replays every global load instruction the
// launch issues, warp by warp, with the launch plan the kernels use (kernels/quant/gemv_quant_plan.h's quant_gemv_plan) and
// the addresses of kernels/quant/gemv_quant_device.cuh's lane bodies over the prepacked planes (models/quant.h PackedQuant)
// or GGUF's blocks as stored, and counts, per load instruction class (codes, each scale plane, x, ...), requests and
// distinct 32-byte sectors per request: what Nsight Compute's l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_ld
// report for the whole kernel. Host code; no GPU.
//
// Modelled as the kernels run on an aligned x (the kVecX path: float4 loads of x), accumulate off (y is only
// written), a warp's load instruction issuing one request when at least one of its lanes is active (none otherwise).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/sector_model.h"    // RequestStats, kSectorBytes
#include "kernels/quant/gemv_quant_plan.h"  // QuantGemvKind, QuantGemvWeight, QuantGemvPlan (CUDA-free)

namespace llm {

// Where "warp" reads x from. Kernel: as kernels/quant/gemv_quant_warp.cu decides (since commit 0f00c51: staged once per block
// in shared memory while 4 K bytes fit two blocks per SM, k <= 29,056; from global memory past that). Global: every
// chunk's x from global memory (the kernel before 0f00c51, e.g. commit bacc727's, which ncu measured, and today's for
// long rows). Shared: staged whatever k.
enum class QuantWarpX : uint8_t { Kernel, Global, Shared };
// "kernel", "global", "shared" -> QuantWarpX; throws llm::Error otherwise.
QuantWarpX parse_quant_warp_x(const std::string& name);
// True when "warp" stages x in shared memory for rows of k weights (gemv_quant_warp.cu's rule).
bool quant_warp_stages_x(int64_t k);

// The H200's SM count: the plan's default (the grid, split-K and the lanes per row group depend on it).
constexpr int kQuantSectorDefaultSms = 132;

// The quantized types the model knows, as typed after --quant: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k.
const std::vector<std::string>& quant_sector_type_names();
// "q4_0" (any case) -> GGML type id; throws llm::Error listing the known names otherwise.
int parse_quant_sector_type(const std::string& name);
// The quantized GEMV forms in report order: warp, warp-dp4a, thread, as-stored.
const std::vector<std::string>& quant_sector_mapping_names();
// Throws llm::Error listing the known forms when `name` is not one.
QuantGemvKind parse_quant_sector_mapping(const std::string& name);

// One class of load instructions: every request issued by one load of the kernel's source (or a group of loads of
// the same field, e.g. as-stored Q4_0's eight 2-byte code loads per block).
struct QuantLoadClass {
  std::string name;           // codes, code_hi (Q5_K, Q6_K), scales, mins, sub_scales, super_d, k_heads; x (each chunk's x
                              // from global memory), x_stage ("warp": each block copies x to shared memory), x_quant
                              // ("warp-dp4a": each block loads x to quantize it); as-stored: the block's fields (d, dm,
                              // qh, qs, ql, scales), x
  bool weight = true;         // reads the weight (false: x)
  int load_bytes = 0;         // bytes per lane of one instruction
  int64_t requests = 0;       // warp-level load instructions
  int64_t sectors = 0;        // sum over requests of distinct 32 B sectors
  int64_t lines = 0;          // sum over requests of distinct 128 B lines
  int64_t useful_bytes = 0;   // distinct bytes the active lanes asked for (lanes reading one address count once)
  int64_t lane_bytes = 0;     // bytes the active lanes asked for, each lane counted (broadcasts counted 32 times)
  int64_t lane_loads = 0;     // active lanes over all requests
  int64_t straddling_lanes = 0;
  int64_t misaligned_lanes = 0;
  RequestStats first;         // the class's first request
  int64_t lane_stride_bytes = 0;  // address distance between lanes 0 and 1 of the first request (0: one lane)
  double sectors_per_request() const { return requests ? double(sectors) / double(requests) : 0.0; }
  double lines_per_request() const { return requests ? double(lines) / double(requests) : 0.0; }
  double bytes_per_request() const { return requests ? double(useful_bytes) / double(requests) : 0.0; }
  double lane_bytes_per_request() const { return requests ? double(lane_bytes) / double(requests) : 0.0; }
};

// The predicted global-load traffic of one launch of a quantized GEMV form on W[N, K].
struct QuantSectorPrediction {
  std::string mapping;  // warp, warp-dp4a, thread, as-stored
  std::string quant;    // q4_0, ...
  QuantGemvKind kind = QuantGemvKind::Warp;
  int type_id = 0;
  int64_t N = 0, K = 0;
  int sm_count = kQuantSectorDefaultSms;
  std::string x_path;   // where the dots read x: "global", "shared" (warp, staged as FP32), "shared-int8" (warp-dp4a)
  QuantGemvWeight weight;  // the layout (quant_gemv_describe), pointers null
  QuantGemvPlan plan;      // the launch plan (quant_gemv_plan)
  std::vector<QuantLoadClass> classes;  // in the order of their first request
  // Over every class (the kernel-wide figures ncu reports):
  int64_t requests_total = 0, sectors_total = 0, lines_total = 0, useful_bytes_total = 0, lane_bytes_total = 0;
  int64_t straddling_lanes_total = 0, misaligned_lanes_total = 0, lane_loads_total = 0;
  // Distinct bytes and 32 B sectors the loads touch over the whole launch (perfect reuse):
  int64_t weight_bytes_touched = 0;    // distinct weight bytes; equals quant_gemv_bytes_read (the tests check it)
  int64_t weight_sectors_touched = 0;  // distinct weight sectors
  int64_t x_bytes_touched = 0;         // distinct bytes of x (4 K)
  int64_t x_sectors_touched = 0;
  int64_t bytes_read = 0;  // kernels' quant_gemv_bytes_read(kind, weight): the bytes the form should read

  double sectors_per_request() const { return requests_total ? double(sectors_total) / double(requests_total) : 0.0; }
  double lines_per_request() const { return requests_total ? double(lines_total) / double(requests_total) : 0.0; }
  double bytes_per_request() const {
    return requests_total ? double(useful_bytes_total) / double(requests_total) : 0.0;
  }
  double lane_bytes_per_request() const {
    return requests_total ? double(lane_bytes_total) / double(requests_total) : 0.0;
  }
  double efficiency() const;  // distinct requested bytes / fetched sector bytes over every request (0..1)
  // DRAM bytes of the weight when every sector is fetched once (L2 keeps what a later request needs): the form's
  // DRAM traffic as ncu sees it, x and y aside.
  int64_t dram_bytes() const { return weight_sectors_touched * kSectorBytes; }
  int64_t x_dram_bytes() const { return x_sectors_touched * kSectorBytes; }
  // Every request's sectors from DRAM again (no reuse in L1 or L2): the bound the other way.
  int64_t dram_bytes_no_reuse() const { return sectors_total * kSectorBytes; }
  const QuantLoadClass* find_class(const std::string& name) const;
};

// mapping: warp, warp-dp4a, thread or as-stored; quant: q4_0 ... q6_k; sm_count: the GPU's SMs (the plan's grid);
// warp_x: where "warp" reads x (ignored by the other forms). Throws llm::Error for unknown names and shapes the type
// cannot hold (K a multiple of 32, of 256 for the K-quants).
QuantSectorPrediction predict_quant(const std::string& mapping, int64_t N, int64_t K, const std::string& quant,
                                    int sm_count = kQuantSectorDefaultSms, QuantWarpX warp_x = QuantWarpX::Kernel);
// The same for a resolved form and a GGML type id (a GemvPlan's quant and a weight's type: the A/B report's way in).
// Throws llm::Error for a type the model does not know and shapes the type cannot hold.
QuantSectorPrediction predict_quant(QuantGemvKind kind, int64_t N, int64_t K, int type_id,
                                    int sm_count = kQuantSectorDefaultSms, QuantWarpX warp_x = QuantWarpX::Kernel);

// Markdown: one row per prediction (kernel-wide figures), and one row per load class of each prediction.
std::string quant_sector_summary_markdown(const std::vector<QuantSectorPrediction>& rows);
std::string quant_sector_class_markdown(const std::vector<QuantSectorPrediction>& rows);
// One JSON object (one line) per prediction: the fields of gemv-sectors --json for BF16 (mapping, dtype, N, K,
// load_bytes, sectors_per_request, ...), with dtype the quantized type, plus the quantized figures and the classes.
std::string quant_sector_json_line(const QuantSectorPrediction& p);

}  // namespace llm
