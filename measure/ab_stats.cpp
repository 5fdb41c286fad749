// Statistics of an A/B run: spreads, the sector model's prediction, per-mapping figures, attribution, two causes.
#include "measure/ab_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "analysis/quant_sector_model.h"  // predict_quant: the forms that keep weights quantized
#include "analysis/sector_model.h"        // predict, find_sector_mapping: the BF16 forms
#include "core/error.h"             // llm::fail
#include "measure/ab_run.h"         // parse_ab_entry: an entry's GEMV mapping and decode path

namespace llm {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

const AbMappingStats* find_stats(const AbSummary& s, const std::string& name) {
  for (const auto& m : s.mappings)
    if (m.mapping == name) return &m;
  return nullptr;
}

int64_t gcd64(int64_t a, int64_t b) { return b == 0 ? a : gcd64(b, a % b); }

}  // namespace

AbSpread ab_spread(std::vector<double> v) {
  AbSpread s;
  s.n = int(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  if (n >= 2) {
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(n);
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    s.sd = std::sqrt(ss / double(n - 1));
  }
  return s;
}

// --- sector model ------------------------------------------------------------------------------------------------

namespace {

// One BF16 projection kind's sectors and requests over its whole matrix, by the pattern of `info`. The access pattern
// repeats every `period` stored rows: a multiple of the 32 rows a lanes-across-rows load spans, after which rows start
// at the same offset within a 128-byte line. Predicting r1 = R mod period + 2 periods and r1 - period rows gives one
// period's exact cost, so a 1 GB head costs as little as a 64 KB one.
void bf16_sectors(const SectorMappingInfo& info, const AbProjection& p, double* sectors, double* requests) {
  const int64_t rows = info.transposed ? p.K : p.N;
  const int64_t row_bytes = (info.transposed ? p.N : p.K) * 2;
  const int64_t align = kLineBytes / gcd64(row_bytes, kLineBytes);
  const int64_t period = align * kWarpLanes / gcd64(align, kWarpLanes);
  auto run = [&](int64_t r) {
    return info.transposed ? predict(info.name, p.N, r, WeightFormat::BF16)
                           : predict(info.name, r, p.K, WeightFormat::BF16);
  };
  if (rows <= 3 * period) {
    const SectorPrediction sp = run(rows);
    *sectors = double(sp.sectors_total);
    *requests = double(sp.requests_total);
    return;
  }
  const int64_t r1 = rows % period + 2 * period;
  const SectorPrediction hi = run(r1), lo = run(r1 - period);
  const double periods = double((rows - r1) / period);
  *sectors = double(hi.sectors_total) + periods * double(hi.sectors_total - lo.sectors_total);
  *requests = double(hi.requests_total) + periods * double(hi.requests_total - lo.requests_total);
}

}  // namespace

bool ab_sector_prediction(const GemvPlan& plan, const std::vector<AbProjection>& projections,
                          double* sectors_per_request, double* efficiency) {
  double sectors = 0, requests = 0, useful = 0;
  for (const AbProjection& p : projections) {
    if (p.quant != 0) {  // kept quantized: the quantized form's replay of the whole launch
      if (!plan.has_quant || !plan.runs_quant_type(p.quant)) return false;
      const QuantSectorPrediction q = predict_quant(plan.quant, p.N, p.K, int(p.quant));
      sectors += double(q.sectors_total) * p.count;
      requests += double(q.requests_total) * p.count;
      useful += double(q.useful_bytes_total) * p.count;
      continue;
    }
    if (plan.bf16 == GemvBf16Form::None) return false;
    double s = 0, q = 0;
    bf16_sectors(find_sector_mapping(plan.bf16), p, &s, &q);
    sectors += s * p.count;
    requests += q * p.count;
    useful += double(p.bf16_bytes_per_token());
  }
  if (requests <= 0) return false;
  *sectors_per_request = sectors / requests;
  *efficiency = useful / (sectors * double(kSectorBytes));
  return true;
}

bool ab_sector_prediction(const std::string& mapping, const std::vector<AbProjection>& projections,
                          double* sectors_per_request, double* efficiency) {
  if (!gemv_row(mapping)) return false;
  return ab_sector_prediction(gemv_plan(mapping), projections, sectors_per_request, efficiency);
}

// --- statistics --------------------------------------------------------------------------------------------------

namespace {

AbLaunchStats launch_stats(const AbLaunch& l, int sm_count, int max_warps_per_sm) {
  AbLaunchStats s;
  s.launch = l;
  if (l.grid <= 0 || l.block <= 0 || sm_count <= 0) return s;
  s.threads = int64_t(l.grid) * l.block;
  const double warps = double(l.grid) * double((l.block + 31) / 32);
  s.warps_per_sm = warps / sm_count;
  if (max_warps_per_sm > 0) s.warps_per_sm = std::min(s.warps_per_sm, double(max_warps_per_sm));
  s.bytes_in_flight_per_sm = s.warps_per_sm * 32.0 * l.bytes_in_flight_per_thread;
  return s;
}

AbMappingStats mapping_stats(const AbReportData& d, const AbMappingRun& r, double roofline) {
  AbMappingStats m;
  m.mapping = r.mapping;
  const AbEntry entry = parse_ab_entry(r.mapping);
  m.decode = decode_path_name(entry.path);
  m.ms = ab_spread(r.ms_per_token);
  std::vector<double> tps, gemv;
  for (double ms : r.ms_per_token) tps.push_back(ms > 0 ? 1e3 / ms : 0.0);
  m.tps = ab_spread(tps);
  for (const auto& parts : r.part_ms) {
    double g = 0;
    for (int p = 0; p < ProfileParts::kParts; ++p)
      if (ProfileParts::is_gemv(p)) g += parts[p];
    gemv.push_back(g);
  }
  m.gemv_ms = ab_spread(gemv);
  m.profiled_ms = ab_spread(r.profiled_ms_per_token);
  for (int p = 0; p < ProfileParts::kParts; ++p) {
    std::vector<double> v;
    for (const auto& parts : r.part_ms) v.push_back(parts[p]);
    m.part_ms[p] = ab_spread(v).median;
  }
  m.other_ms = m.ms.median - m.gemv_ms.median;
  for (int p = 0; p < ProfileParts::kParts; ++p) m.device_ms += m.part_ms[p];
  m.rest_ms = m.ms.median - m.device_ms;
  m.profiled_other_ms = m.part_ms[ProfileParts::kOther];
  m.overhead_ms = m.profiled_ms.median - m.ms.median;
  const double bytes = double(d.gemv_bytes_per_token);
  m.gemv_gbps = m.gemv_ms.median > 0 ? bytes / (m.gemv_ms.median * 1e6) : 0.0;
  m.token_gbps = m.ms.median > 0 ? bytes / (m.ms.median * 1e6) : 0.0;
  m.pct_roofline = roofline > 0 ? 100.0 * m.gemv_gbps / roofline : kNaN;
  m.attention_ms = m.attention_gbps = m.attention_pct_roofline = kNaN;
  if (!r.attention_ms_per_token.empty()) {
    m.attention_ms = ab_spread(r.attention_ms_per_token).median;
    if (m.attention_ms > 0 && d.kv_bytes_per_token > 0) {
      m.attention_gbps = double(d.kv_bytes_per_token) / (m.attention_ms * 1e6);
      if (roofline > 0) m.attention_pct_roofline = 100.0 * m.attention_gbps / roofline;
    }
  }
  if (!ab_sector_prediction(entry.gemv, d.projections, &m.sectors_per_request, &m.sector_efficiency))
    m.sectors_per_request = m.sector_efficiency = kNaN;
  for (const AbLaunch& l : r.launches) m.launches.push_back(launch_stats(l, d.sm_count, d.max_warps_per_sm));
  m.tokens_matching_first = r.tokens_matching_first;
  m.kernels_per_token = r.kernels_per_token;
  m.waits_per_token = r.waits_per_token;
  return m;
}

AbAttribution attribute(const AbMappingStats& a, const AbMappingStats& b) {
  AbAttribution t;
  t.base = a.mapping;
  t.mapping = b.mapping;
  t.d_total_ms = b.ms.median - a.ms.median;
  t.d_gemv_ms = b.gemv_ms.median - a.gemv_ms.median;
  t.d_rest_ms = t.d_total_ms - t.d_gemv_ms;
  // Noise of each difference (2 sd of both sides) plus how differently the profiling pass perturbs the two.
  t.tolerance_ms = 2.0 * (a.ms.sd + b.ms.sd) + 2.0 * (a.gemv_ms.sd + b.gemv_ms.sd) +
                   std::fabs(a.overhead_ms - b.overhead_ms);
  t.gemv_share = t.d_total_ms != 0 ? t.d_gemv_ms / t.d_total_ms : kNaN;
  t.agrees = std::fabs(t.d_rest_ms) <= t.tolerance_ms;
  return t;
}

AbCauses causes(const AbSummary& s, double (*metric)(const AbMappingStats&)) {
  AbCauses c;
  const AbMappingStats* th = find_stats(s, "thread");
  const AbMappingStats* tsk = find_stats(s, "thread-splitk");
  const AbMappingStats* wf = find_stats(s, "warp-few");
  const AbMappingStats* w = find_stats(s, "warp");
  if (!th || !tsk || !wf || !w) return c;
  c.present = true;
  c.gap = metric(*th) - metric(*w);
  c.a_parallelism = metric(*th) - metric(*tsk);
  c.a_coalescing = metric(*tsk) - metric(*w);
  c.b_coalescing = metric(*th) - metric(*wf);
  c.b_parallelism = metric(*wf) - metric(*w);
  return c;
}

void check_data(const AbReportData& d) {
  if (d.runs.empty()) fail("A/B report: no mapping was run");
  for (const AbMappingRun& r : d.runs) {
    if (r.ms_per_token.empty()) fail("A/B report: mapping '", r.mapping, "' has no timed repeat");
    if (r.part_ms.size() != r.ms_per_token.size() || r.profiled_ms_per_token.size() != r.ms_per_token.size())
      fail("A/B report: mapping '", r.mapping, "' has ", r.ms_per_token.size(), " timed repeats but ",
           r.part_ms.size(), " profiles and ", r.profiled_ms_per_token.size(), " profiled timings");
    if (!r.attention_ms_per_token.empty() && r.attention_ms_per_token.size() != r.ms_per_token.size())
      fail("A/B report: mapping '", r.mapping, "' has ", r.ms_per_token.size(), " timed repeats but ",
           r.attention_ms_per_token.size(), " attention timings");
  }
}

}  // namespace

AbSummary summarize_ab(const AbReportData& d) {
  check_data(d);
  AbSummary s;
  s.roofline_gbps = ab_spread(d.roofline_gbps);
  const double roof = s.roofline_gbps.median;
  s.ceiling_tps = d.gemv_bytes_per_token > 0 ? roof * 1e9 / double(d.gemv_bytes_per_token) : 0.0;
  s.kv_roofline_ms = roof > 0 ? double(d.kv_bytes_per_token) / (roof * 1e6) : 0.0;
  const double step_bytes = double(d.gemv_bytes_per_token) + double(std::max<int64_t>(d.kv_bytes_per_token, 0));
  s.ceiling_kv_tps = d.gemv_bytes_per_token > 0 ? roof * 1e9 / step_bytes : 0.0;
  int64_t most = -1;
  for (const AbProjection& p : d.projections)
    if (p.bf16_bytes_per_token() > most) {
      most = p.bf16_bytes_per_token();
      s.launch_shape_of = p.name;
    }
  for (const AbMappingRun& r : d.runs) s.mappings.push_back(mapping_stats(d, r, roof));
  for (size_t i = 1; i < s.mappings.size(); ++i) s.attributions.push_back(attribute(s.mappings[0], s.mappings[i]));
  s.causes_total = causes(s, [](const AbMappingStats& m) { return m.ms.median; });
  s.causes_gemv = causes(s, [](const AbMappingStats& m) { return m.gemv_ms.median; });
  return s;
}

}  // namespace llm
