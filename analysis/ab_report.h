// A/B report of GEMV mappings on one model: the plain data an A/B run measures (filled by engine/ab_run.cpp), the
// statistics and attributions derived from it, and its renderings: llama-bench-style markdown, JSON, CSV and a PNG
// chart (drawn by tools/ab_chart.py). Host code only: no CUDA, no engine types, so CI builds and tests it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace llm {

// Parts of a decode step, in the order of the CUDA engine's DecodeProfile::Part. kAbQKV / kAbGateUp: the fused
// q|k|v and gate|up GEMVs (then q, k, v, gate, up are zero); every part but kAbOther is GEMV time.
enum AbPart { kAbQ, kAbK, kAbV, kAbO, kAbGate, kAbUp, kAbDown, kAbHead, kAbOther, kAbQKV, kAbGateUp, kAbParts };
const char* ab_part_name(int part);  // "q", "k", "v", "o", "gate", "up", "down", "head", "other", "qkv", "gate_up"

// One kind of projection matrix of a decode step.
struct AbProjection {
  std::string name;      // an ab_part_name other than "other"
  int64_t N = 0, K = 0;  // y[N] = W[N, K] x[K], BF16 weights
  int count = 0;         // matrices of this kind per token: n_layers, or 1 for the head
  int64_t bytes_per_token() const { return N * K * 2 * int64_t(count); }
};

// How one mapping launches its kernel for one projection kind (kernels/gemv.h GemvLaunchShape).
struct AbLaunch {
  std::string projection;            // AbProjection::name
  int64_t N = 0, K = 0;
  int grid = 0, block = 0;           // grid 0: not known (cuBLAS picks its own kernels)
  int bytes_in_flight_per_thread = 0;
};

// Everything measured for one mapping. Vectors indexed by timed repeat (warm-up excluded).
struct AbMappingRun {
  std::string mapping;
  std::vector<double> ms_per_token;           // graph-replayed decode (the real speed), wall clock
  std::vector<double> profiled_ms_per_token;  // the un-graphed pass with CUDA events, wall clock
  std::vector<std::array<double, kAbParts>> part_ms;  // that pass's device ms/token per part (events)
  std::vector<AbLaunch> launches;             // one per projection kind
  int tokens_matching_first = -1;  // of the n_decode + 1 sampled tokens, leading ones equal to the first mapping's
};

struct AbReportData {
  std::string model;          // what was opened
  std::string device;         // GPU name
  int sm_count = 0;
  int max_warps_per_sm = 0;   // resident-warp limit of one SM (64 on Hopper)
  int prompt_tokens = 0;
  int n_decode = 0;           // decode steps per pass (EOS ignored)
  int repeats = 0;            // timed repeats per mapping
  int warmup = 0;             // untimed rounds before them
  uint64_t seed = 0;
  int64_t gemv_bytes_per_token = 0;     // weights one decode step reads through the GEMVs (backend's figure)
  std::vector<AbProjection> projections;
  std::vector<double> roofline_gbps;    // streaming-read bandwidth, one figure per timed round
  std::string roofline_method;          // one line: how roofline_gbps was measured
  std::string profiling_method;         // one line: how part_ms was measured
  std::vector<AbMappingRun> runs;       // in run order; the first is the baseline of the attribution
};

// Median and spread of a sample (sd: sample standard deviation, 0 for fewer than 2 values).
struct AbSpread {
  double median = 0, sd = 0, min = 0, max = 0;
  int n = 0;
};
AbSpread ab_spread(std::vector<double> v);

// One launch shape with what follows from it.
struct AbLaunchStats {
  AbLaunch launch;
  int64_t threads = 0;
  double warps_per_sm = 0;            // launched warps / SMs, capped at the resident limit
  double bytes_in_flight_per_sm = 0;  // warps_per_sm x 32 x bytes in flight per thread
  bool known() const { return launch.grid > 0; }
};

struct AbMappingStats {
  std::string mapping;
  AbSpread ms;           // graphed ms/token
  AbSpread tps;          // graphed tokens/s
  AbSpread gemv_ms;      // profiled GEMV device ms/token (q .. head)
  AbSpread profiled_ms;  // profiled pass wall ms/token
  double other_ms = 0;            // ms.median - gemv_ms.median: attention, norms, sampling, launch gaps
  double profiled_other_ms = 0;   // the profiled "other" part alone (device time between GEMV regions)
  double overhead_ms = 0;         // profiled_ms.median - ms.median: what the profiling pass costs per token
  std::array<double, kAbParts> part_ms{};  // medians per part
  double gemv_gbps = 0;       // GEMV bytes per token / GEMV time
  double token_gbps = 0;      // GEMV bytes per token / whole token time (gpt-fast's "bandwidth achieved")
  double pct_roofline = 0;    // gemv_gbps / roofline
  // Sector model (analysis/sector_model.h), over all projection matrices of a token (so bytes-weighted): NaN when
  // the model does not describe the mapping.
  double sectors_per_request = 0;
  double sector_efficiency = 0;  // useful bytes / fetched sector bytes
  std::vector<AbLaunchStats> launches;
  int tokens_matching_first = -1;
};

// The change from the baseline (first mapping) to another: does the GEMV time account for the total change?
struct AbAttribution {
  std::string base, mapping;
  double d_total_ms = 0;  // graphed ms/token, mapping - base
  double d_gemv_ms = 0;   // profiled GEMV ms/token, mapping - base
  double d_rest_ms = 0;   // d_total - d_gemv
  double tolerance_ms = 0;  // 2 (sd_a + sd_b) of total + 2 (sd_a + sd_b) of GEMV + |overhead_a - overhead_b|
  double gemv_share = 0;  // d_gemv / d_total
  bool agrees = false;    // |d_rest| <= tolerance
};

// The thread -> warp gap split into its two causes, two ways (needs thread, thread-splitk, warp-few and warp).
struct AbCauses {
  bool present = false;
  double gap = 0;                       // thread - warp
  double a_parallelism = 0;             // A: thread -> thread-splitk (same loads, GPU filled)
  double a_coalescing = 0;              //    thread-splitk -> warp
  double b_coalescing = 0;              // B: thread -> warp-few (coalesced loads, as few warps)
  double b_parallelism = 0;             //    warp-few -> warp
  double parallelism() const { return 0.5 * (a_parallelism + b_parallelism); }  // average of both orders
  double coalescing() const { return 0.5 * (a_coalescing + b_coalescing); }
  double interaction() const { return a_parallelism - b_parallelism; }  // 0 when the causes simply add
};

struct AbSummary {
  AbSpread roofline_gbps;
  double ceiling_tps = 0;  // roofline / GEMV bytes per token: tokens/s if only the weights were read, at roofline
  std::string launch_shape_of;  // projection whose launch shape the main table shows (most bytes per token)
  std::vector<AbMappingStats> mappings;
  std::vector<AbAttribution> attributions;  // one per mapping after the first
  AbCauses causes_total;  // on graphed ms/token
  AbCauses causes_gemv;   // on profiled GEMV ms/token
};

// Throws llm::Error when the data is inconsistent (no runs, repeats of different lengths, parts missing).
AbSummary summarize_ab(const AbReportData& d);

// Sector-model figures over a token's projections for one mapping; false when the model lacks the mapping.
// Exact for any shape: predicts a few periods of stored rows and scales (the pattern repeats every <= 128 rows).
bool ab_sector_prediction(const std::string& mapping, const std::vector<AbProjection>& projections,
                          double* sectors_per_request, double* efficiency);

// The whole report: the llama-bench-style table, per-projection breakdown, launch shapes, attribution, two causes.
std::string ab_markdown(const AbReportData& d, const AbSummary& s);
// One row per mapping, a header line first.
std::string ab_csv(const AbReportData& d, const AbSummary& s);
// {"data": <every measurement>, "summary": <what the report derives>}; ab_data_from_json reads "data" back.
std::string ab_json(const AbReportData& d, const AbSummary& s);
AbReportData ab_data_from_json(const std::string& text);

// Writes text to path; throws llm::Error naming the path on failure.
void ab_write_file(const std::string& path, const std::string& text);
// Runs `python3 script json_path png_path` (tools/ab_chart.py); throws llm::Error with the script's message when it
// fails (e.g. matplotlib missing). script "" = found beside the executable's tree or the working directory.
void ab_draw_chart(const std::string& json_path, const std::string& png_path, const std::string& script = "");

}  // namespace llm
