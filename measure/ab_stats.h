// Statistics of an A/B run (measure/ab_data.h): medians and spreads, GB/s and % of the roofline, the sector model's
// prediction, the attribution of each change in total time to the change in GEMV time, and the split of thread's gap
// into its two causes. Plain data in, plain data out; rendered by measure/ab_render.h. Host code only.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/gemv_choice.h"  // GemvPlan
#include "measure/ab_data.h"

namespace llm {

// Median and spread of a sample (sd: sample standard deviation, 0 for fewer than 2 values).
struct AbSpread {
  double median = 0, sd = 0, min = 0, max = 0;
  int n = 0;
};
AbSpread ab_spread(std::vector<double> v);
// The median alone (0 for an empty sample): what the benchmarks report per measurement.
inline double median(std::vector<double> v) { return ab_spread(std::move(v)).median; }

// One launch shape with what follows from it.
struct AbLaunchStats {
  AbLaunch launch;
  int64_t threads = 0;
  double warps_per_sm = 0;            // launched warps / SMs, capped at the resident limit
  double bytes_in_flight_per_sm = 0;  // warps_per_sm x 32 x bytes in flight per thread
  bool known() const { return launch.grid > 0; }
};

struct AbMappingStats {
  std::string mapping;   // the entry (AbMappingRun::mapping): "warp-r2", "warp-r2@persistent"
  std::string decode;    // its decode path (engine/gemv_choice.h decode_path_name): "graph" or "persistent"
  AbSpread ms;           // measured ms/token (the timed passes: graph-replayed, or the persistent kernel)
  AbSpread tps;          // measured tokens/s
  AbSpread gemv_ms;      // profiled GEMV device ms/token (every part but "other")
  AbSpread profiled_ms;  // profiled pass wall ms/token
  double other_ms = 0;            // ms.median - gemv_ms.median: attention, norms, sampling, launch gaps
  // The time budget of a token: the profiled device ms/token (every part, medians summed: on the persistent path
  // exactly the kernel's time) and what the measured time has beyond it, ms.median - device_ms (launches, sampling,
  // host; negative where the profiling pass spends device time the timed pass does not).
  double device_ms = 0;
  double rest_ms = 0;
  double profiled_other_ms = 0;   // the profiled "other" part alone (device time between GEMV regions)
  double overhead_ms = 0;         // profiled_ms.median - ms.median: what the profiling pass costs per token
  PartMs part_ms{};               // medians per part
  double gemv_gbps = 0;       // GEMV bytes per token / GEMV time
  double token_gbps = 0;      // GEMV bytes per token / whole token time (gpt-fast's "bandwidth achieved")
  double pct_roofline = 0;    // gemv_gbps / roofline
  // Decode attention where the profile times it (AbMappingRun::attention_ms_per_token; NaN where it does not): its
  // device ms/token (median), the KV-cache bytes per token (AbReportData::kv_bytes_per_token) / that time, and that
  // against the roofline.
  double attention_ms = 0, attention_gbps = 0, attention_pct_roofline = 0;
  // Sector model (analysis/sector_model.h), over all projection matrices of a token (so bytes-weighted): NaN when
  // the model does not describe the mapping.
  double sectors_per_request = 0;
  double sector_efficiency = 0;  // useful bytes / fetched sector bytes
  std::vector<AbLaunchStats> launches;
  int tokens_matching_first = -1;
  int kernels_per_token = 0;  // AbMappingRun::kernels_per_token
  int waits_per_token = 0;    // AbMappingRun::waits_per_token
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
  double ceiling_kv_tps = 0;  // roofline / (GEMV + KV-cache bytes per token): the ceiling at the run's context depth
  double kv_roofline_ms = 0;  // KV-cache bytes per token / roofline: decode attention's floor (0: bytes not recorded)
  std::string launch_shape_of;  // projection whose launch shape the main table shows (most bytes per token)
  std::vector<AbMappingStats> mappings;
  std::vector<AbAttribution> attributions;  // one per mapping after the first
  AbCauses causes_total;  // on graphed ms/token
  AbCauses causes_gemv;   // on profiled GEMV ms/token
};

// Throws llm::Error when the data is inconsistent (no runs, repeats of different lengths, parts missing).
AbSummary summarize_ab(const AbReportData& d);

// Sector-model figures over a token's projections for one GEMV plan (an entry's AbEntry::gemv resolved): projections
// decode keeps quantized (AbProjection::quant) by the plan's quantized form (analysis/quant_sector_model.h: every load
// of the launch, x included), the others by its BF16 form's access pattern (analysis/sector_model.h; exact for any
// shape: predicts a few periods of stored rows and scales, the pattern repeating every <= 128 rows). false when the
// plan has no form for some projection.
bool ab_sector_prediction(const GemvPlan& plan, const std::vector<AbProjection>& projections,
                          double* sectors_per_request, double* efficiency);
// The same for a mapping name; false for a name that is not a row of core/gemv_table.h (JSON of another tree).
bool ab_sector_prediction(const std::string& mapping, const std::vector<AbProjection>& projections,
                          double* sectors_per_request, double* efficiency);

}  // namespace llm
