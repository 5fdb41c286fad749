// Sector model: which bytes the 32 lanes of a warp touch in each load instruction of a GEMV mapping, and what
// that costs in 32-byte sectors, 128-byte lines and DRAM bytes. Host code; it generates the addresses, then counts.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/gemv_table.h"  // GemvAccess, GemvBf16Form

namespace llm {

constexpr int kWarpLanes = 32;
constexpr int64_t kSectorBytes = 32;
constexpr int64_t kLineBytes = 128;

// Weight storage formats the model knows. Quantized formats are byte arrays along K made of blocks of 32 weights:
//   Q8_0: fp16 scale + 32 int8      = 34 B per block
//   Q4_0: fp16 scale + 16 B nibbles = 18 B per block
//   INT4: the nibble plane alone (scales prepacked into a separate plane that this model does not count), 16 B per 32
//         weights: the "two weights per byte" case of the coalescing note.
enum class WeightFormat : uint8_t { BF16, F16, Q8_0, Q4_0, INT4 };

struct WeightFormatInfo {
  WeightFormat format;
  const char* name;       // as typed after --dtype
  int block_weights;      // weights per block (1 for plain element types)
  int block_bytes;        // bytes per block
  bool quantized;         // blocks run along K; K must be a multiple of block_weights
};
const std::vector<WeightFormatInfo>& weight_formats();
const WeightFormatInfo& weight_format_info(WeightFormat f);
// Throws llm::Error listing the known names when `name` is unknown.
WeightFormat parse_weight_format(const std::string& name);
// Bytes of one stored row of K weights (quantized: (K / 32) * block_bytes).
int64_t row_bytes(WeightFormat f, int64_t K);

// One lane's part of a warp-wide load instruction: `bytes` contiguous bytes from `addr` (0 bytes = lane inactive).
struct LaneLoad {
  int64_t addr = 0;
  int bytes = 0;
};
using WarpRequest = std::array<LaneLoad, kWarpLanes>;

// What one warp-level load instruction (a "request" in Nsight Compute's terms) touches.
struct RequestStats {
  int sectors = 0;           // distinct 32 B sectors
  int lines = 0;             // distinct 128 B lines
  int64_t useful_bytes = 0;  // bytes the lanes asked for
  int active_lanes = 0;
  int straddling_lanes = 0;  // lane loads that cross a sector boundary
  int misaligned_lanes = 0;  // lane loads whose address is not a multiple of their width (a GPU vector load faults)
};
RequestStats count_request(const WarpRequest& req);

// A matrix as stored in memory at address 0: `rows` rows of `row_bytes` useful bytes, `ld_bytes` apart.
struct StoredLayout {
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t ld_bytes = 0;
};

// How the lanes of a warp walk a stored layout.
//   along_row:  the 32 lanes load consecutive `load_bytes` chunks of ONE stored row (a warp-wide run of 32 * load_bytes
//               bytes), then the warp moves on along the row; rows are visited one after another.
//   across_rows: lane j loads `load_bytes` at the same byte offset of stored row 32 * b + j; the warp steps along the
//               rows together.
// A chunk that would run past the end of its row is clipped to the row (a kernel's tail path), never into padding.
struct AccessPattern {
  StoredLayout layout;
  bool across_rows = false;
  int load_bytes = 16;
};
// Calls `visit` once per warp-level load instruction needed to read every useful byte of the layout, in issue order.
void for_each_request(const AccessPattern& p, const std::function<void(const WarpRequest&)>& visit);

// The GEMV mappings the model describes: every row of core/gemv_table.h with a BF16 form, in its order, each with the
// access pattern (the row's GemvAccess) the sector model walks for it.
struct SectorMappingInfo {
  const char* name;
  const char* layout;       // "row-major [N, K]" or "column-major [K, N]"
  bool across_rows;         // see AccessPattern
  bool transposed;          // stored as [K, N]
  int default_load_bytes;   // 0 = one element of the weight type
  const char* why;          // the table's one line
  GemvAccess access;        // the pattern these fields describe
};
const std::vector<SectorMappingInfo>& sector_mappings();
// Rows of core/gemv_table.h with a BF16 form but no access pattern, and rows with an access pattern but no BF16 form;
// both empty in a consistent table (tests/cpu/sector_model_test.cpp).
std::vector<std::string> sector_mappings_missing();
std::vector<std::string> sector_patterns_unregistered();
// Throws llm::Error listing the known mappings when `name` is unknown.
const SectorMappingInfo& find_sector_mapping(const std::string& name);
// The mapping of a BF16 form (a GemvPlan's bf16); throws llm::Error for GemvBf16Form::None.
const SectorMappingInfo& find_sector_mapping(GemvBf16Form form);

// The predicted traffic of one GEMV y[N] = W[N, K] x[K] under one mapping. Averages are over every request needed to
// read the whole matrix once; `first` is the first request issued (row 0 / column step 0), which the note's figures
// describe.
struct SectorPrediction {
  std::string mapping;
  WeightFormat format = WeightFormat::BF16;
  int64_t N = 0, K = 0;
  int load_bytes = 0;
  StoredLayout layout;         // as the mapping stores the weight ([N, K] rows, or [K, N] rows when transposed)
  int64_t matrix_bytes = 0;    // useful bytes of the weight (padding excluded)
  RequestStats first;
  int64_t lane_stride_bytes = 0;   // address distance between lanes 0 and 1 of the first request
  int64_t requests_per_row = 0;    // requests that touch stored row 0
  int64_t requests_total = 0;      // requests to read the whole matrix once
  int64_t sectors_total = 0;       // sum over requests of distinct sectors (two requests sharing one count it twice)
  int64_t lines_total = 0;
  int64_t straddling_lanes_total = 0;
  int64_t misaligned_lanes_total = 0;
  int64_t lane_loads_total = 0;
  double sectors_per_request() const;
  double lines_per_request() const;
  double useful_bytes_per_request() const;
  double weights_per_request() const;  // useful bytes x weights per byte of the format
  double efficiency() const;           // useful bytes / fetched sector bytes, over the whole matrix (0..1)
  int64_t dram_bytes_no_reuse() const { return sectors_total * kSectorBytes; }  // every sector from DRAM again
  int64_t dram_bytes_perfect_reuse() const { return matrix_bytes; }           // L1/L2 keep every sector until used
};

// load_bytes: 0 = the mapping's default (16 for warp-like mappings and for quantized formats, one element otherwise);
// otherwise one of 1, 2, 4, 8, 16. ld_bytes: stored row stride in bytes; 0 = packed (row_bytes).
// cublas is modelled as warp with 16-byte loads only (cuBLAS's real access pattern is not public).
// Throws llm::Error for unknown mappings, bad shapes, bad load widths, formats a mapping cannot read.
SectorPrediction predict(const std::string& mapping, int64_t N, int64_t K, WeightFormat format, int load_bytes = 0,
                         int64_t ld_bytes = 0);

// The AccessPattern predict() walks for these arguments (same validation, same defaults).
AccessPattern sector_access_pattern(const std::string& mapping, int64_t N, int64_t K, WeightFormat format,
                                    int load_bytes = 0, int64_t ld_bytes = 0);

// One markdown table, one row per prediction (columns as gemv-sectors prints them).
std::string sector_table_markdown(const std::vector<SectorPrediction>& rows);

}  // namespace llm
