// A/B report tests on fabricated runs: statistics and formatting (expected numbers computed by hand, checked with
// Python's statistics module), the attribution verdict, the two-causes split, launch-shape arithmetic, the sector
// prediction's row scaling against a direct prediction, JSON round trip, CSV shape, and the mapping-list parser; the
// bytes per projection a mapping reads on a tiny quantized GGUF, and the KV-cache bytes decode attention reads; the
// decode paths: entries "NAME@PATH", --decode's expansion, the persistent path's refusals, and the report of both.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/sector_model.h"
#include "core/error.h"
#include "core/gemv_table.h"     // gemv_mapping_list: the default --ab list
#include "engine/gemv_choice.h"  // decode_path_refusal: the refusal an entry gets; gemv_plan
#include "measure/ab_render.h"
#include "measure/ab_run.h"
#include "measure/ab_stats.h"
#include "models/model.h"          // load_model
#include "models_test_util.h"      // TempDir, write_file
#include "tiny_quant_gguf_util.h"  // tiny GGUF models with quantized projections

namespace llm {
namespace {

// Repeats whose GEMV time is spread evenly over the eight projections; `other` is the profiled rest.
AbMappingRun fake_run(const std::string& name, std::vector<double> ms, std::vector<double> gemv,
                      std::vector<double> profiled, double other = 0.25) {
  AbMappingRun r;
  r.mapping = name;
  r.ms_per_token = ms;
  r.profiled_ms_per_token = profiled;
  for (double g : gemv) {
    PartMs parts{};
    for (int p = 0; p < ProfileParts::kOther; ++p) parts[p] = g / ProfileParts::kOther;
    parts[ProfileParts::kOther] = other;
    r.part_ms.push_back(parts);
  }
  return r;
}

// A 2-layer model with Llama 3.1 8B's matrix shapes.
std::vector<AbProjection> llama_projections() {
  return {{"q", 4096, 4096, 2},    {"k", 1024, 4096, 2},    {"v", 1024, 4096, 2},
          {"o", 4096, 4096, 2},    {"gate", 14336, 4096, 2}, {"up", 14336, 4096, 2},
          {"down", 4096, 14336, 2}, {"head", 128256, 4096, 1}};
}

AbReportData base_data() {
  AbReportData d;
  d.model = "/models/model.bin";
  d.device = "NVIDIA H200";
  d.sm_count = 132;
  d.max_warps_per_sm = 64;
  d.prompt_tokens = 16;
  d.n_decode = 128;
  d.repeats = 3;
  d.warmup = 1;
  d.seed = 42;
  d.gemv_bytes_per_token = 8000000000LL;
  d.projections = llama_projections();
  d.roofline_gbps = {5000, 4800, 5200};
  d.roofline_method = "stream read";
  d.profiling_method = "events";
  return d;
}

// warp: ms {8, 10, 12} (median 10, sd 2), GEMV {2.0, 2.1, 1.9} (median 2, sd 0.1), overhead 0.5.
// thread: +20 total, +20 GEMV (agrees); colmajor: +10 total, +2 GEMV (does not); cublas: +0.5, +0.2 (agrees).
AbReportData four_mappings() {
  AbReportData d = base_data();
  d.runs.push_back(fake_run("warp", {8, 10, 12}, {2.0, 2.1, 1.9}, {10.5, 10.5, 10.5}));
  d.runs.push_back(fake_run("thread", {30, 30, 30}, {22, 22, 22}, {31, 31, 31}));
  d.runs.push_back(fake_run("colmajor", {20, 20, 20}, {4, 4, 4}, {20.5, 20.5, 20.5}));
  d.runs.push_back(fake_run("cublas", {10.5, 10.5, 10.5}, {2.2, 2.2, 2.2}, {11, 11, 11}));
  d.runs[0].launches = {{"q", 4096, 4096, 512, 256, 64}, {"head", 128256, 4096, 1792, 256, 64}};
  d.runs[1].launches = {{"q", 4096, 4096, 16, 256, 2}, {"o", 4096, 4096, 16, 256, 2},
                        {"head", 128256, 4096, 502, 256, 2}};
  d.runs[3].launches = {{"q", 4096, 4096, 0, 0, 0}, {"head", 128256, 4096, 0, 0, 0}};
  for (size_t i = 0; i < d.runs.size(); ++i) d.runs[i].tokens_matching_first = i == 2 ? 77 : 129;
  return d;
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string line_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (contains(line, what)) return line;
  return "";
}

TEST(AbReport, SpreadMedianAndSampleSd) {
  AbSpread s = ab_spread({12, 8, 10});
  EXPECT_DOUBLE_EQ(s.median, 10.0);
  EXPECT_DOUBLE_EQ(s.sd, 2.0);
  EXPECT_DOUBLE_EQ(s.min, 8.0);
  EXPECT_DOUBLE_EQ(s.max, 12.0);
  EXPECT_EQ(s.n, 3);
  s = ab_spread({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_NEAR(s.sd, 1.2909944487358056, 1e-12);  // statistics.stdev([1, 2, 3, 4])
  EXPECT_DOUBLE_EQ(ab_spread({7}).sd, 0.0);
}

TEST(AbReport, StatisticsPerMapping) {
  const AbSummary s = summarize_ab(four_mappings());
  ASSERT_EQ(s.mappings.size(), 4u);
  const AbMappingStats& w = s.mappings[0];
  EXPECT_DOUBLE_EQ(w.ms.median, 10.0);
  EXPECT_DOUBLE_EQ(w.tps.median, 100.0);
  EXPECT_NEAR(w.tps.sd, 20.97176232019653, 1e-9);  // statistics.stdev([125, 100, 1000 / 12])
  EXPECT_DOUBLE_EQ(w.gemv_ms.median, 2.0);
  EXPECT_NEAR(w.gemv_ms.sd, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(w.other_ms, 8.0);
  EXPECT_DOUBLE_EQ(w.profiled_other_ms, 0.25);
  EXPECT_DOUBLE_EQ(w.overhead_ms, 0.5);
  EXPECT_DOUBLE_EQ(w.part_ms[ProfileParts::kGate], 0.25);
  EXPECT_DOUBLE_EQ(w.gemv_gbps, 4000.0);   // 8 GB / 2 ms
  EXPECT_DOUBLE_EQ(w.token_gbps, 800.0);   // 8 GB / 10 ms
  EXPECT_DOUBLE_EQ(s.roofline_gbps.median, 5000.0);
  EXPECT_DOUBLE_EQ(w.pct_roofline, 80.0);
  EXPECT_DOUBLE_EQ(s.ceiling_tps, 625.0);  // 5000 GB/s / 8 GB
  EXPECT_EQ(s.launch_shape_of, "head");    // 1.05 GB of head beats 2 x 235 MB of gate
  // Sector model: the note's figures (warp 16 sectors per request, thread 32 for 64 useful bytes).
  EXPECT_DOUBLE_EQ(w.sectors_per_request, 16.0);
  EXPECT_DOUBLE_EQ(w.sector_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(s.mappings[1].sectors_per_request, 32.0);
  EXPECT_DOUBLE_EQ(s.mappings[1].sector_efficiency, 0.0625);
  EXPECT_DOUBLE_EQ(s.mappings[2].sectors_per_request, 2.0);
}

TEST(AbReport, LaunchShapeArithmetic) {
  const AbSummary s = summarize_ab(four_mappings());
  const AbLaunchStats& tq = s.mappings[1].launches[0];  // thread, q: 16 x 256 threads = 128 warps on 132 SMs
  EXPECT_EQ(tq.threads, 4096);
  EXPECT_NEAR(tq.warps_per_sm, 128.0 / 132.0, 1e-12);
  EXPECT_NEAR(tq.bytes_in_flight_per_sm, 128.0 / 132.0 * 32 * 2, 1e-9);
  const AbLaunchStats& wh = s.mappings[0].launches[1];  // warp, head: 14336 warps, capped at 64 per SM
  EXPECT_DOUBLE_EQ(wh.warps_per_sm, 64.0);
  EXPECT_DOUBLE_EQ(wh.bytes_in_flight_per_sm, 64.0 * 32 * 64);
  EXPECT_FALSE(s.mappings[3].launches[0].known());
}

TEST(AbReport, MarkdownTableHasEveryMappingFormatted) {
  const AbReportData d = four_mappings();
  const std::string md = ab_markdown(d, summarize_ab(d));
  for (const char* m : {"warp", "thread", "colmajor", "cublas"})
    EXPECT_TRUE(contains(md, std::string("| model.bin | ") + m + " | tg128 | ")) << m;
  EXPECT_TRUE(contains(md, "| model.bin | warp | tg128 | 100.00 ± 20.97 | 10.000 ± 2.000 | 2.000 | 8.000 | 4000 | "
                           "80.0 | 16.00 | 100.0% | 1792x256, 64.0 warps/SM, 131072 B/SM |"))
      << md;
  EXPECT_TRUE(contains(md, "| model.bin | thread | tg128 | 33.33 ± 0.00 | 30.000 ± 0.000 | 22.000 | 8.000 | 364 | "
                           "7.3 | 32.00 | 6.2% | 502x256, 30.4 warps/SM, 1947 B/SM |"))
      << md;
  EXPECT_TRUE(contains(md, "| model.bin | cublas | tg128 | 95.24 ± 0.00 |")) << md;
  EXPECT_TRUE(contains(line_with(md, "| model.bin | cublas |"), "| n/a |"));
  // Launch table: thread's q and o share a shape, hence one row; q of thread is about one warp per SM.
  EXPECT_TRUE(contains(md, "| thread | q, o | 4096x4096 | 16x256 | 4096 | 0.97 | 2 | 62 |")) << md;
  // Per-projection GB/s: warp's q is 4096 x 4096 x 2 B x 2 layers = 67.1 MB in 0.25 ms = 268 GB/s; k 16.8 MB;
  // gate, up, down 234.9 MB; head 1050.7 MB (one layer's worth).
  EXPECT_TRUE(contains(md, "| warp | 268 | 67 | 67 | 268 | 940 | 940 | 940 | 4203 |")) << md;
  EXPECT_TRUE(contains(md, "129/129")) << md;
  EXPECT_TRUE(contains(md, "colmajor 77/129")) << md;
  EXPECT_TRUE(contains(md, "Not measured")) << md;  // no thread-splitk / warp-few here
}

TEST(AbReport, AttributionVerdicts) {
  const AbSummary s = summarize_ab(four_mappings());
  ASSERT_EQ(s.attributions.size(), 3u);
  const AbAttribution& t = s.attributions[0];
  EXPECT_EQ(t.base, "warp");
  EXPECT_EQ(t.mapping, "thread");
  EXPECT_DOUBLE_EQ(t.d_total_ms, 20.0);
  EXPECT_DOUBLE_EQ(t.d_gemv_ms, 20.0);
  EXPECT_NEAR(t.tolerance_ms, 2 * (2 + 0) + 2 * (0.1 + 0) + 0.5, 1e-9);  // hand: 4.7
  EXPECT_TRUE(t.agrees);
  const AbAttribution& c = s.attributions[1];
  EXPECT_DOUBLE_EQ(c.d_rest_ms, 8.0);
  EXPECT_NEAR(c.tolerance_ms, 4.2, 1e-9);
  EXPECT_FALSE(c.agrees);
  EXPECT_NEAR(c.gemv_share, 0.2, 1e-12);
  EXPECT_TRUE(s.attributions[2].agrees);
  const std::string md = ab_markdown(four_mappings(), s);
  EXPECT_TRUE(contains(line_with(md, "| warp -> thread |"), "| agrees |"));
  EXPECT_TRUE(contains(line_with(md, "| warp -> colmajor |"), "| does NOT agree |"));
  EXPECT_TRUE(contains(line_with(md, "| warp -> colmajor |"), "| +10.000 | +2.000 | +8.000 | 4.200 | 20.0% |"));
}

// Just inside and just outside the tolerance: the verdict flips exactly at the stated formula.
TEST(AbReport, AttributionEdgeOfTolerance) {
  for (double excess : {-0.01, 0.01}) {
    AbReportData d = base_data();
    d.runs.push_back(fake_run("warp", {9, 10, 11}, {2, 2, 2}, {11, 11, 11}));        // sd 1, overhead 1
    const double tol = 2 * (1 + 0) + 2 * (0 + 0) + std::fabs(1.0 - 0.5);             // 2.5
    const double total = 15.0, gemv = total - 10.0 - (tol + excess) + 2.0;            // rest = tol + excess
    d.runs.push_back(fake_run("b", {total, total, total}, {gemv, gemv, gemv}, {15.5, 15.5, 15.5}));
    const AbSummary s = summarize_ab(d);
    EXPECT_NEAR(s.attributions[0].tolerance_ms, tol, 1e-9);
    EXPECT_NEAR(s.attributions[0].d_rest_ms, tol + excess, 1e-9);
    EXPECT_EQ(s.attributions[0].agrees, excess < 0) << excess;
  }
}

AbReportData causes_data() {
  AbReportData d = base_data();
  d.runs.push_back(fake_run("warp", {10, 10, 10}, {2, 2, 2}, {10, 10, 10}));
  d.runs.push_back(fake_run("thread", {30, 30, 30}, {22, 22, 22}, {30, 30, 30}));
  d.runs.push_back(fake_run("thread-splitk", {22, 22, 22}, {14, 14, 14}, {22, 22, 22}));
  d.runs.push_back(fake_run("warp-few", {14, 14, 14}, {6, 6, 6}, {14, 14, 14}));
  return d;
}

TEST(AbReport, TwoCausesSplitSumsToTheGap) {
  const AbSummary s = summarize_ab(causes_data());
  const AbCauses& c = s.causes_total;
  ASSERT_TRUE(c.present);
  EXPECT_DOUBLE_EQ(c.gap, 20.0);
  EXPECT_DOUBLE_EQ(c.a_parallelism, 8.0);   // thread -> thread-splitk
  EXPECT_DOUBLE_EQ(c.a_coalescing, 12.0);   // thread-splitk -> warp
  EXPECT_DOUBLE_EQ(c.b_coalescing, 16.0);   // thread -> warp-few
  EXPECT_DOUBLE_EQ(c.b_parallelism, 4.0);   // warp-few -> warp
  EXPECT_DOUBLE_EQ(c.a_parallelism + c.a_coalescing, c.gap);
  EXPECT_DOUBLE_EQ(c.b_parallelism + c.b_coalescing, c.gap);
  EXPECT_DOUBLE_EQ(c.parallelism() + c.coalescing(), c.gap);
  EXPECT_DOUBLE_EQ(c.parallelism(), 6.0);
  EXPECT_DOUBLE_EQ(c.interaction(), 4.0);
  EXPECT_DOUBLE_EQ(s.causes_gemv.gap, 20.0);
  const std::string md = ab_markdown(causes_data(), s);
  EXPECT_TRUE(contains(md, "| A | thread -> thread-splitk | parallelism | 8.000 | 40.0% |")) << md;
  EXPECT_TRUE(contains(md, "| B | thread -> warp-few | coalescing | 16.000 | 80.0% |")) << md;
  EXPECT_TRUE(contains(md, "| mean of A and B |  | coalescing | 14.000 | 70.0% |")) << md;
  EXPECT_FALSE(contains(md, "Not measured"));
}

TEST(AbReport, JsonRoundTripsTheData) {
  AbReportData d = four_mappings();
  d.runs[0].ms_per_token = {8.123456789012345, 10.0, 12.000000000000002};  // digits that must survive
  d.model = "/weird \"path\", with commas";
  const AbSummary s = summarize_ab(d);
  const std::string text = ab_json(d, s);
  const AbReportData back = ab_data_from_json(text);
  EXPECT_EQ(back.model, d.model);
  EXPECT_EQ(back.device, d.device);
  EXPECT_EQ(back.sm_count, d.sm_count);
  EXPECT_EQ(back.gemv_bytes_per_token, d.gemv_bytes_per_token);
  EXPECT_EQ(back.roofline_gbps, d.roofline_gbps);
  ASSERT_EQ(back.projections.size(), d.projections.size());
  EXPECT_EQ(back.projections[7].N, 128256);
  ASSERT_EQ(back.runs.size(), d.runs.size());
  for (size_t i = 0; i < d.runs.size(); ++i) {
    EXPECT_EQ(back.runs[i].mapping, d.runs[i].mapping);
    EXPECT_EQ(back.runs[i].ms_per_token, d.runs[i].ms_per_token);
    EXPECT_EQ(back.runs[i].profiled_ms_per_token, d.runs[i].profiled_ms_per_token);
    EXPECT_EQ(back.runs[i].part_ms, d.runs[i].part_ms);
    EXPECT_EQ(back.runs[i].launches.size(), d.runs[i].launches.size());
    EXPECT_EQ(back.runs[i].tokens_matching_first, d.runs[i].tokens_matching_first);
  }
  EXPECT_EQ(back.runs[1].launches[2].grid, 502);
  // The same report from the round-tripped data.
  EXPECT_EQ(ab_markdown(back, summarize_ab(back)), ab_markdown(d, s));
  EXPECT_TRUE(contains(text, "\"agrees\": false"));
  EXPECT_THROW(ab_data_from_json("{\"data\": {}}"), Error);
}

TEST(AbReport, CsvOneRowPerMapping) {
  AbReportData d = four_mappings();
  d.model = "a,b";
  const std::string csv = ab_csv(d, summarize_ab(d));
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].rfind("model,device,mapping,", 0), 0u);
  EXPECT_EQ(lines[2].rfind("\"a,b\",NVIDIA H200,thread,16,128,3,", 0), 0u) << lines[2];
  EXPECT_TRUE(contains(lines[3], ",false,77")) << lines[3];
  // Every row has the header's number of fields (outside the one quoted field).
  const auto fields = [](const std::string& l) {
    int n = 1;
    bool q = false;
    for (char c : l) {
      if (c == '"') q = !q;
      if (c == ',' && !q) ++n;
    }
    return n;
  };
  for (const auto& l : lines) EXPECT_EQ(fields(l), fields(lines[0])) << l;
}

TEST(AbReport, InconsistentDataIsRejected) {
  AbReportData d = base_data();
  EXPECT_THROW(summarize_ab(d), Error);
  d.runs.push_back(fake_run("warp", {1, 2}, {1}, {1, 2}));
  EXPECT_THROW(summarize_ab(d), Error);
}

// The prediction over a token predicts a few periods of rows and scales; it must equal predicting the whole matrix.
TEST(AbReport, SectorPredictionScalingIsExact) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1000, 4096}, {777, 1001}, {300, 250}, {40, 64}};
  for (const char* m : {"warp", "thread", "colmajor", "thread-splitk", "warp-few", "cublas"}) {
    for (const auto& sh : shapes) {
      const SectorPrediction direct = predict(m, sh.first, sh.second, WeightFormat::BF16);
      double spr = 0, eff = 0;
      ASSERT_TRUE(ab_sector_prediction(m, {{"q", sh.first, sh.second, 3}}, &spr, &eff));
      EXPECT_NEAR(spr, direct.sectors_per_request(), 1e-12) << m << " " << sh.first << "x" << sh.second;
      EXPECT_NEAR(eff, direct.efficiency(), 1e-12) << m << " " << sh.first << "x" << sh.second;
    }
    // Two kinds: sectors and requests add over matrices (bytes-weighted).
    const SectorPrediction a = predict(m, 1000, 4096, WeightFormat::BF16);
    const SectorPrediction b = predict(m, 777, 1001, WeightFormat::BF16);
    double spr = 0, eff = 0;
    ASSERT_TRUE(ab_sector_prediction(m, {{"q", 1000, 4096, 2}, {"k", 777, 1001, 1}}, &spr, &eff));
    EXPECT_NEAR(spr, double(2 * a.sectors_total + b.sectors_total) / double(2 * a.requests_total + b.requests_total),
                1e-12)
        << m;
  }
  double spr = 0, eff = 0;
  EXPECT_FALSE(ab_sector_prediction("no-such-mapping", llama_projections(), &spr, &eff));
}

TEST(AbRun, ParsesTheMappingList) {
  EXPECT_EQ(parse_ab_mappings("warp, thread,cublas"), (std::vector<std::string>{"warp", "thread", "cublas"}));
  EXPECT_EQ(parse_ab_mappings("warp"), std::vector<std::string>{"warp"});
  EXPECT_THROW(parse_ab_mappings(""), Error);
  EXPECT_THROW(parse_ab_mappings("warp,,thread"), Error);
  EXPECT_THROW(parse_ab_mappings("warp,"), Error);
  EXPECT_THROW(parse_ab_mappings("warp,warp"), Error);
}

#ifndef LLM_HAVE_CUDA
TEST(AbRun, CpuOnlyBuildSaysItNeedsCuda) {
  Model m;
  try {
    run_ab(m, AbOptions{});
    FAIL() << "run_ab returned in a build without CUDA";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the A/B run needs the CUDA engine; this build has none");
  }
}
#endif

// The one list of profile parts (measure/profile_parts.h): the engine's DecodeProfile derives from it and the report's
// JSON part_names and CSV ms_* columns follow its order, so the order is a file format.
TEST(AbReport, ProfilePartsAreOneListInFileOrder) {
  const std::vector<std::string> expected = {"q",    "k",    "v",     "o",   "gate",    "up",
                                             "down", "head", "other", "qkv", "gate_up", "attention",
                                             "wait", "norm"};
  ASSERT_EQ(int(expected.size()), int(ProfileParts::kParts));
  for (int p = 0; p < ProfileParts::kParts; ++p) {
    EXPECT_EQ(ProfileParts::part_name(p), expected[size_t(p)]);
    EXPECT_EQ(ProfileParts::part_of(expected[size_t(p)]), p);
    EXPECT_EQ(ProfileParts::is_gemv(p), p != ProfileParts::kOther && p != ProfileParts::kAttention &&
                                            p != ProfileParts::kWait && p != ProfileParts::kNorm)
        << expected[size_t(p)];
  }
  EXPECT_STREQ(ProfileParts::part_name(ProfileParts::kParts), "?");
  EXPECT_EQ(ProfileParts::part_of("no-such-part"), -1);
  EXPECT_EQ(ProfileParts::part_of(std::string("q\0x", 3)), -1);
}

// A run of the CUDA engine (engine/cuda/cuda_engine.cu: q|k|v and gate|up fused): qkv and gate_up carry the time;
// q, k, v, gate, up none.
TEST(AbReport, FusedPartsCountAsGemvAndGetTheirOwnColumns) {
  AbReportData d = base_data();
  d.runs.push_back(fake_run("warp", {10, 10, 10}, {0, 0, 0}, {10.5, 10.5, 10.5}));
  for (auto& parts : d.runs[0].part_ms) {
    parts = {};
    parts[ProfileParts::kQKV] = 0.5;
    parts[ProfileParts::kO] = 0.25;
    parts[ProfileParts::kGateUp] = 0.5;
    parts[ProfileParts::kDown] = 0.25;
    parts[ProfileParts::kHead] = 0.25;
    parts[ProfileParts::kOther] = 0.125;
  }
  const AbSummary s = summarize_ab(d);
  EXPECT_DOUBLE_EQ(s.mappings[0].gemv_ms.median, 1.75);  // every part but "other"
  EXPECT_DOUBLE_EQ(s.mappings[0].profiled_other_ms, 0.125);
  const std::string md = ab_markdown(d, s);
  // Columns timed by no mapping are left out. GB/s: qkv reads q + k + v = (4096 + 2 x 1024) x 4096 x 2 B x 2 layers
  // = 100.7 MB in 0.5 ms = 201; gate_up 2 x 234.9 MB in 0.5 ms = 940; o 268, down 940, head 4203 as above.
  EXPECT_TRUE(contains(md, "| mapping | qkv | o | gate_up | down | head | other | GEMV |")) << md;
  EXPECT_TRUE(contains(md, "| warp | 0.500 | 0.250 | 0.500 | 0.250 | 0.250 | 0.125 | 1.750 |")) << md;
  EXPECT_TRUE(contains(md, "| warp | 201 | 268 | 940 | 940 | 4203 |")) << md;
  // JSON written before the fused parts existed: 9 named columns per row; the fused parts read back as zero.
  AbReportData old = base_data();
  old.runs.push_back(fake_run("warp", {10, 10, 10}, {2, 2, 2}, {10.5, 10.5, 10.5}));
  nlohmann::json j = nlohmann::json::parse(ab_json(old, summarize_ab(old)));
  for (auto& run : j["data"]["runs"]) {
    auto& names = run["part_names"];
    while (names.size() > 9) {  // every part after "other": qkv, gate_up and those added since
      names.erase(names.size() - 1);
      for (auto& row : run["part_ms"]) row.erase(row.size() - 1);
    }
  }
  const AbReportData back = ab_data_from_json(j.dump());
  EXPECT_EQ(back.runs[0].part_ms, old.runs[0].part_ms);
  j["data"]["runs"][0]["part_names"][0] = "no-such-part";
  EXPECT_THROW(ab_data_from_json(j.dump()), Error);
}

}  // namespace
}  // namespace llm

namespace llm {
namespace {

// The per-projection GB/s are of the bytes the mapping reads: Q4_0 weights through the quantized "warp" form read
// 18 bytes per 32 weights (16 of codes, one FP16 scale: ab_projection_bytes), not BF16's 64. With BF16 bytes q would
// show 268 GB/s (67.1 MB in 0.25 ms); with Q4_0's 18.9 MB it is 75.
TEST(AbReport, PerProjectionGbpsIsOfTheBytesTheMappingReads) {
  AbReportData d = base_data();
  d.runs.push_back(fake_run("warp", {10, 10, 10}, {2, 2, 2}, {10.5, 10.5, 10.5}));
  for (const AbProjection& p : d.projections)
    d.runs[0].launches.push_back({p.name, p.N, p.K, 512, 256, 64, p.N * (p.K / 32 * 18) * p.count});
  // q 18.87 MB, k and v 4.72 MB, o 18.87 MB, gate, up and down 66.06 MB, head 295.5 MB; each in 0.25 ms.
  const std::string row = "| warp | 75 | 19 | 19 | 75 | 264 | 264 | 264 | 1182 |";
  const std::string md = ab_markdown(d, summarize_ab(d));
  EXPECT_TRUE(contains(md, row)) << md;
  EXPECT_FALSE(contains(md, "| warp | 268 |")) << md;
  const AbReportData back = ab_data_from_json(ab_json(d, summarize_ab(d)));  // the bytes survive the JSON
  EXPECT_EQ(back.runs[0].launches[7].bytes_read, 295501824);
  EXPECT_TRUE(contains(ab_markdown(back, summarize_ab(back)), row));
  // A launch without the record (JSON written before it) reads as BF16: the four-mapping report's 268.
  d.runs[0].launches[0].bytes_read = 0;
  EXPECT_TRUE(contains(ab_markdown(d, summarize_ab(d)), "| warp | 268 | 19 | 19 | 75 |"));
}

// What ab_run records per projection, on a 2-layer GGUF (dim 256, 4 heads of 64, 2 KV heads, hidden 512, vocab 256):
// q Q4_K, k F16, v and the rest Q8_0. Bytes per row of 256 weights: Q4_K as prepacked for warp/thread 128 of codes +
// the 16-byte head (FP16 d and dmin, 12 bytes of scales and mins) = 144, as stored 144 too; Q8_0 256 + 8 FP16 scales = 272 either way; BF16
// 512.
TEST(AbRun, ProjectionBytesAreWhatTheMappingReads) {
  llm_test::TempDir tmp;
  llm_test::TinyQuantSpec spec = llm_test::TinyQuantSpec::all(llm_test::kTqQ8_0);
  spec.wq = llm_test::kTqQ4_K;
  spec.wk = llm_test::kTqF16;
  llm_test::write_file(tmp.path() / "m.gguf", llm_test::tiny_quant_gguf(spec).quant.build());
  const Model m = load_model(tmp.str("m.gguf"));
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "q"), 2 * 256 * 144);
  EXPECT_EQ(ab_projection_bytes(m, "thread", false, "q"), 2 * 256 * 144);
  EXPECT_EQ(ab_projection_bytes(m, "as-stored", false, "q"), 2 * 256 * 144);
  EXPECT_EQ(ab_projection_bytes(m, "warp", true, "q"), 2 * 256 * 512);  // --dequantize: BF16
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "k"), 2 * 128 * 512);  // F16 weights run as BF16
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "v"), 2 * 128 * 272);
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "qkv"), 2 * (256 * 144 + 128 * 512 + 128 * 272));
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "gate_up"), 2 * 2 * 512 * 272);
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "down"), 2 * 256 * 2 * 272);  // [256, 512]: 2 blocks of 256
  EXPECT_EQ(ab_projection_bytes(m, "warp", false, "head"), 256 * 272);          // one matrix
  EXPECT_THROW(ab_projection_bytes(m, "cublas", false, "q"), Error);  // no quantized form
  EXPECT_THROW(ab_projection_bytes(m, "warp", false, "other"), Error);
  EXPECT_THROW(ab_projection_bytes(m, "no-such-mapping", false, "q"), Error);
}

// Llama 3.1 8B's cache (32 layers, 8 KV heads of 128) read by 64 steps from position 8192: the steps read 8193 ..
// 8256 rows, 8224.5 on average, of 32 x 2 x 1024 elements each: 131,072 x 2 bytes x 8224.5 = 1.078 GB with BF16;
// FP8 one byte each plus one FP32 scale per 32 rows, KV head, K or V and layer (257 blocks for half the steps, 258 for
// the other half).
TEST(AbRun, KvBytesDecodeAttentionReads) {
  ModelConfig c;
  c.n_layers = 32;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  const AbKvRead bf16 = ab_kv_read(c, KvDtype::BF16, 8192, 64);
  EXPECT_DOUBLE_EQ(bf16.rows, 8224.5);
  EXPECT_EQ(bf16.bytes_per_token, 1078001664);
  EXPECT_EQ(ab_kv_read(c, KvDtype::Default, 8192, 64).bytes_per_token, 1078001664);  // the CUDA engine's BF16
  EXPECT_EQ(ab_kv_read(c, KvDtype::FP8, 8192, 64).bytes_per_token, 65536LL * 16449 / 2 + 2 * 32 * 8 * 4 * 515 / 2);
  EXPECT_EQ(ab_kv_read(c, KvDtype::BF16, 0, 1).bytes_per_token, 131072);  // one step at position 0 reads one row
  EXPECT_THROW(ab_kv_read(c, KvDtype::BF16, 0, 0), Error);
}

// Decode attention beside the roofline: 1.078 GB of KV per token in 0.3 ms (median) = 3593 GB/s, 71.9% of 5000; at
// the roofline the bytes take 0.216 ms. Without attention times the bytes and the floor are still stated.
TEST(AbReport, AttentionGbpsOfTheKvBytesPerToken) {
  AbReportData d = base_data();
  d.kv_dtype = "bf16";
  d.attention_rows = 8224.5;
  d.kv_bytes_per_token = 1078001664;
  d.runs.push_back(fake_run("warp", {10, 10, 10}, {2, 2, 2}, {10.5, 10.5, 10.5}));
  d.runs.push_back(fake_run("thread", {30, 30, 30}, {22, 22, 22}, {31, 31, 31}));
  AbReportData untimed = d;
  d.runs[0].attention_ms_per_token = {0.35, 0.3, 0.25};
  d.runs[1].attention_ms_per_token = {0.3, 0.3, 0.3};
  const AbSummary s = summarize_ab(d);
  EXPECT_NEAR(s.kv_roofline_ms, 0.2156003328, 1e-12);
  // The ceiling at this depth: the roofline over the weights' and the KV cache's bytes together.
  EXPECT_NEAR(s.ceiling_kv_tps, 5000e9 / double(d.gemv_bytes_per_token + d.kv_bytes_per_token), 1e-9);
  EXPECT_LT(s.ceiling_kv_tps, s.ceiling_tps);
  EXPECT_DOUBLE_EQ(s.mappings[0].attention_ms, 0.3);
  EXPECT_NEAR(s.mappings[0].attention_gbps, 3593.33888, 1e-6);
  EXPECT_NEAR(s.mappings[0].attention_pct_roofline, 71.8667776, 1e-9);
  const std::string md = ab_markdown(d, s);
  EXPECT_TRUE(contains(md, "KV cache read per token at the timed steps: 1.08 GB (bf16 K and V of every layer, 8224.5 "
                           "cache rows per step on average); at the read roofline (5000 GB/s) that takes 0.216 "
                           "ms/token."))
      << md;
  EXPECT_TRUE(contains(md, "| warp | 0.300 | 3593 | 71.9 |")) << md;
  EXPECT_TRUE(contains(md, "| thread | 0.300 | 3593 | 71.9 |")) << md;
  const AbReportData back = ab_data_from_json(ab_json(d, s));
  EXPECT_EQ(back.kv_bytes_per_token, d.kv_bytes_per_token);
  EXPECT_EQ(back.runs[0].attention_ms_per_token, d.runs[0].attention_ms_per_token);
  EXPECT_EQ(ab_markdown(back, summarize_ab(back)), md);
  // Not timed apart (today's profile): no GB/s, the bytes and their floor still shown.
  const AbSummary su = summarize_ab(untimed);
  EXPECT_TRUE(std::isnan(su.mappings[0].attention_gbps));
  const std::string mu = ab_markdown(untimed, su);
  EXPECT_TRUE(contains(mu, "Attention time not measured")) << mu;
  EXPECT_TRUE(contains(mu, "that takes 0.216 ms/token")) << mu;
  EXPECT_FALSE(contains(mu, "| attention ms/token |")) << mu;
  // Timings for fewer repeats than the run has are inconsistent data.
  d.runs[1].attention_ms_per_token.pop_back();
  EXPECT_THROW(summarize_ab(d), Error);
  // Data without the KV figures (JSON written before them): no attention section.
  EXPECT_FALSE(contains(ab_markdown(four_mappings(), summarize_ab(four_mappings())), "Decode attention"));
}

// ---- decode paths ----

TEST(AbRun, EntriesNameTheirDecodePath) {
  const AbEntry p = parse_ab_entry("warp-r2@persistent");
  EXPECT_EQ(p.gemv, "warp-r2");
  EXPECT_EQ(p.path, DecodePath::Persistent);
  const AbEntry g = parse_ab_entry("warp-r2@graph");
  EXPECT_EQ(g.gemv, "warp-r2");
  EXPECT_EQ(g.path, DecodePath::Graph);
  EXPECT_EQ(parse_ab_entry("warp-r2").path, DecodePath::Graph);
  EXPECT_EQ(parse_ab_entry("warp-r2").gemv, "warp-r2");
  // The report's name: the graph path (the default) keeps the plain mapping name.
  EXPECT_EQ(ab_entry_name(p), "warp-r2@persistent");
  EXPECT_EQ(ab_entry_name(g), "warp-r2");
  llm_test::expect_error([] { parse_ab_entry("warp@fast"); }, {"'warp@fast'", "'fast'", "graph or persistent"});
  llm_test::expect_error([] { parse_ab_entry("warp@graph@persistent"); }, {"'graph@persistent'"});
  llm_test::expect_error([] { parse_ab_entry("warp@"); }, {"unknown decode path ''", "graph or persistent"});

  EXPECT_EQ(parse_ab_mappings("warp-r2@persistent, warp@graph,thread"),
            (std::vector<std::string>{"warp-r2@persistent", "warp@graph", "thread"}));
  llm_test::expect_error([] { parse_ab_mappings("warp,thread@fast"); }, {"'fast'", "graph or persistent"});
  llm_test::expect_error([] { parse_ab_mappings("nope@persistent"); }, {"--ab: unknown GEMV mapping 'nope'"});
  llm_test::expect_error([] { parse_ab_mappings("warp,@persistent"); }, {"empty mapping name"});
  llm_test::expect_error([] { parse_ab_mappings("warp@persistent,warp@persistent"); }, {"listed twice"});
}

TEST(AbRun, DecodeListRunsEveryMappingOnEveryPathMappingMajor) {
  using P = DecodePath;
  EXPECT_EQ(parse_ab_decode("graph"), std::vector<P>{P::Graph});
  EXPECT_EQ(parse_ab_decode("graph, persistent"), (std::vector<P>{P::Graph, P::Persistent}));
  EXPECT_EQ(parse_ab_decode("persistent,graph"), (std::vector<P>{P::Persistent, P::Graph}));
  llm_test::expect_error([] { parse_ab_decode("graph,fast"); }, {"unknown --decode 'fast' (graph or persistent)"});
  llm_test::expect_error([] { parse_ab_decode("graph,graph"); }, {"'graph' is listed twice"});
  llm_test::expect_error([] { parse_ab_decode(""); }, {"--decode ''"});
  llm_test::expect_error([] { parse_ab_decode("graph,"); }, {"--decode 'graph,'"});

  const std::vector<std::string> two = {"warp-r2", "warp"};
  EXPECT_EQ(ab_decode_entries(two, {P::Graph}), two);
  EXPECT_EQ(ab_decode_entries(two, {P::Graph, P::Persistent}),
            (std::vector<std::string>{"warp-r2", "warp-r2@persistent", "warp", "warp@persistent"}));
  EXPECT_EQ(ab_decode_entries(two, {P::Persistent, P::Graph}),
            (std::vector<std::string>{"warp-r2@persistent", "warp-r2", "warp@persistent", "warp"}));
  // An entry that names its path runs there alone; "@graph" is the plain name.
  EXPECT_EQ(ab_decode_entries({"warp-r2@persistent", "warp@graph", "thread"}, {P::Graph}),
            (std::vector<std::string>{"warp-r2@persistent", "warp", "thread"}));
  llm_test::expect_error([] { ab_decode_entries({"warp", "warp@persistent"}, {P::Graph, P::Persistent}); },
                         {"'warp@persistent' is listed twice"});
  llm_test::expect_error([] { ab_decode_entries({"warp", "warp@graph"}, {P::Graph}); },
                         {"'warp' is listed twice"});
}

// What the persistent path cannot run is refused with decode_path_refusal's line before any GPU work: a listed entry
// at once; the default list keeps, per path, the mappings that path runs.
TEST(AbRun, PersistentEntriesItCannotRunAreRefusedByName) {
  using P = DecodePath;
  const Model gqa = load_model("synthetic:tiny-gqa");
  const std::vector<std::string> registry = parse_ab_mappings(gemv_mapping_list());
  EXPECT_EQ(ab_runnable_entries({"warp-r2", "warp"}, {P::Graph, P::Persistent}, true, gqa, false, KvDtype::Default),
            (std::vector<std::string>{"warp-r2", "warp-r2@persistent", "warp", "warp@persistent"}));
  try {
    ab_runnable_entries({"warp-r2", "cublas"}, {P::Graph, P::Persistent}, true, gqa, false, KvDtype::Default);
    ADD_FAILURE() << "cublas@persistent was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), decode_path_refusal(P::Persistent, "cublas", gqa, false, false, true));
    EXPECT_NE(std::string(e.what()).find("'cublas' cannot run inside it"), std::string::npos) << e.what();
  }
  llm_test::expect_error(
      [&] { ab_runnable_entries({"warp-r2@persistent"}, {P::Graph}, true, gqa, false, KvDtype::FP8); },
      {"--decode persistent keeps the KV cache in BF16"});
  // Graph runs everything, whatever --kv-dtype.
  EXPECT_EQ(ab_runnable_entries({"cublas"}, {P::Graph}, true, gqa, false, KvDtype::FP8),
            std::vector<std::string>{"cublas"});
  // The default list: on the persistent path only the lanes-along-K mappings, in the registry's order.
  const std::vector<std::string> all = ab_runnable_entries(registry, {P::Graph, P::Persistent}, false, gqa, false,
                                                           KvDtype::Default);
  std::vector<std::string> want;
  for (const std::string& m : registry) {
    want.push_back(m);
    if (persistent_pair_rows(gemv_plan(m).bf16_persistent) >= 0) want.push_back(m + "@persistent");
  }
  EXPECT_EQ(all, want);
  EXPECT_EQ(std::count(all.begin(), all.end(), "warp-r2@persistent"), 1);
  EXPECT_EQ(std::count(all.begin(), all.end(), "cublas@persistent"), 0);
  // A path that runs none of the default list is refused: tiny-hd's head_dim 24.
  const Model hd = load_model("synthetic:tiny-hd");
  llm_test::expect_error([&] { ab_runnable_entries(registry, {P::Persistent}, false, hd, false, KvDtype::Default); },
                         {"head_dim 24"});
  EXPECT_EQ(ab_runnable_entries(registry, {P::Graph}, false, hd, false, KvDtype::Default), registry);
  // Quantized weights run on the persistent path through the quantized "warp" and "warp-dp4a" forms (or as BF16,
  // --dequantize); the other quantized forms are refused by name.
  llm_test::TempDir tmp;
  llm_test::write_file(tmp.path() / "m.gguf",
                       llm_test::tiny_quant_gguf(llm_test::TinyQuantSpec::all(llm_test::kTqQ8_0)).quant.build());
  const Model q8 = load_model(tmp.str("m.gguf"));
  EXPECT_EQ(ab_runnable_entries({"warp"}, {P::Persistent}, true, q8, false, KvDtype::Default),
            std::vector<std::string>{"warp@persistent"});
  EXPECT_EQ(ab_runnable_entries({"warp-dp4a"}, {P::Persistent}, true, q8, false, KvDtype::Default),
            std::vector<std::string>{"warp-dp4a@persistent"});
  llm_test::expect_error([&] { ab_runnable_entries({"thread"}, {P::Persistent}, true, q8, false, KvDtype::Default); },
                         {"'thread' cannot run inside it", "use --gemv warp"});
  EXPECT_EQ(ab_runnable_entries({"warp"}, {P::Persistent}, true, q8, true, KvDtype::Default),
            std::vector<std::string>{"warp@persistent"});
}

// One mapping on both paths. The persistent entry's profile has the parts only it times (waiting for a stage's
// producers, RMSNorm) and no GEMV launch shape.
AbReportData both_paths() {
  AbReportData d = base_data();
  d.runs.push_back(fake_run("warp", {10, 10, 10}, {2, 2, 2}, {10.5, 10.5, 10.5}));
  d.runs.push_back(fake_run("warp@persistent", {8, 8, 8}, {2, 2, 2}, {8.5, 8.5, 8.5}));
  for (auto& parts : d.runs[1].part_ms) {
    parts[ProfileParts::kWait] = 1.5;
    parts[ProfileParts::kNorm] = 0.5;
  }
  d.runs[0].launches = {{"head", 128256, 4096, 1792, 256, 64}};
  d.runs[1].launches = {{"head", 128256, 4096, 0, 0, 0}};
  return d;
}

TEST(AbReport, BothDecodePathsWithTheirTimeBudget) {
  AbReportData d = both_paths();
  d.runs[0].kernels_per_token = 259;  // the graph's kernel nodes
  d.runs[1].kernels_per_token = 1;    // the persistent kernel
  d.runs[1].waits_per_token = 160;    // its grid-wide waits: 5 per layer of 32
  const AbSummary s = summarize_ab(d);
  ASSERT_EQ(s.mappings.size(), 2u);
  EXPECT_EQ(s.mappings[0].decode, "graph");
  EXPECT_EQ(s.mappings[1].decode, "persistent");
  // Device time: the eight GEMV parts (2 ms) + other 0.25 (+ wait 1.5 + norm 0.5 on the persistent path).
  EXPECT_DOUBLE_EQ(s.mappings[0].device_ms, 2.25);
  EXPECT_DOUBLE_EQ(s.mappings[0].rest_ms, 7.75);
  EXPECT_DOUBLE_EQ(s.mappings[1].device_ms, 4.25);
  EXPECT_DOUBLE_EQ(s.mappings[1].rest_ms, 3.75);
  EXPECT_DOUBLE_EQ(s.mappings[1].gemv_ms.median, 2.0);  // waiting and norms are not GEMV time
  EXPECT_DOUBLE_EQ(s.mappings[1].sectors_per_request, 16.0);  // the sector model of its GEMV, warp
  const std::string md = ab_markdown(d, s);
  EXPECT_TRUE(contains(md, "(NAME@persistent: one persistent kernel per token)")) << md;
  EXPECT_TRUE(contains(md, "| model.bin | warp@persistent | tg128 | 125.00 ± 0.00 | 8.000 ± 0.000 | 2.000 |")) << md;
  EXPECT_TRUE(contains(line_with(md, "| model.bin | warp@persistent |"), "| 16.00 | 100.0% | n/a |")) << md;
  // The per-part table shows norm and wait, which only the persistent entry timed; a row adds up to the device time.
  EXPECT_TRUE(contains(md, "| mapping | q | k | v | o | gate | up | down | head | norm | wait | other | GEMV |")) << md;
  EXPECT_TRUE(contains(md, "| warp | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.000 | 0.000 "
                           "| 0.250 | 2.000 |"))
      << md;
  EXPECT_TRUE(contains(md, "| warp@persistent | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | 0.250 | "
                           "0.500 | 1.500 | 0.250 | 2.000 |"))
      << md;
  // The time budget: measured, profiled device, the remainder, and the device time's share.
  EXPECT_TRUE(contains(md, "### Time budget per token: measured vs profiled device time")) << md;
  EXPECT_TRUE(contains(md, "| warp | 10.000 | 2.250 | +7.750 | 22.5% | 259 |")) << md;
  EXPECT_TRUE(contains(md, "| warp@persistent | 8.000 | 4.250 | +3.750 | 53.1% | 1 (160 waits) |")) << md;
  EXPECT_TRUE(contains(md, "| warp@persistent | head | 128256x4096 | n/a (persistent kernel) |")) << md;
  EXPECT_TRUE(contains(md, "| warp -> warp@persistent | -2.000 | +0.000 | -2.000 |")) << md;
  // Without a persistent entry the report keeps its columns: no norm or wait, no persistent note.
  const AbReportData g = four_mappings();
  const std::string mg = ab_markdown(g, summarize_ab(g));
  EXPECT_FALSE(contains(mg, "| wait |")) << mg;
  EXPECT_FALSE(contains(mg, "@persistent")) << mg;
  EXPECT_TRUE(contains(mg, "| warp | 10.000 | 2.250 | +7.750 | 22.5% | n/a |")) << mg;  // not recorded
  const AbReportData with_kernels = ab_data_from_json(ab_json(d, s));
  EXPECT_EQ(with_kernels.runs[0].kernels_per_token, 259);
  EXPECT_EQ(with_kernels.runs[1].kernels_per_token, 1);
  EXPECT_EQ(with_kernels.runs[1].waits_per_token, 160);
  EXPECT_EQ(with_kernels.runs[0].waits_per_token, 0);

  // CSV: the decode path and the budget per row, at the end.
  const std::string csv = ab_csv(d, s);
  std::istringstream in(csv);
  std::string header, graph_row, persistent_row;
  std::getline(in, header);
  std::getline(in, graph_row);
  std::getline(in, persistent_row);
  const auto ends_with = [](const std::string& text, const std::string& end) {
    return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
  };
  EXPECT_TRUE(ends_with(header, ",depth,decode,device_ms,rest_ms")) << header;
  EXPECT_TRUE(ends_with(graph_row, ",0,graph,2.25,7.75")) << graph_row;
  EXPECT_TRUE(ends_with(persistent_row, ",0,persistent,4.25,3.75")) << persistent_row;
  // JSON: the entry's name carries its path back; the summary names the path and the budget.
  const std::string text = ab_json(d, s);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["summary"]["mappings"][1]["mapping"], "warp@persistent");
  EXPECT_EQ(j["summary"]["mappings"][1]["decode"], "persistent");
  EXPECT_EQ(j["summary"]["mappings"][0]["decode"], "graph");
  EXPECT_DOUBLE_EQ(j["summary"]["mappings"][1]["device_ms"].get<double>(), 4.25);
  EXPECT_DOUBLE_EQ(j["summary"]["mappings"][1]["rest_ms"].get<double>(), 3.75);
  const AbReportData back = ab_data_from_json(text);
  EXPECT_EQ(back.runs[1].mapping, "warp@persistent");
  EXPECT_EQ(back.runs[1].part_ms, d.runs[1].part_ms);
  EXPECT_EQ(ab_markdown(back, summarize_ab(back)), md);
  // An entry whose path is unknown is inconsistent data.
  AbReportData bad = d;
  bad.runs[1].mapping = "warp@fast";
  EXPECT_THROW(summarize_ab(bad), Error);
}

// JSON written before the persistent path's parts (12 part names, no "wait" or "norm"): they read back as zero and
// the report shows neither column.
TEST(AbReport, JsonWithoutWaitAndNormReadsThemAsZero) {
  const AbReportData d = four_mappings();
  nlohmann::json j = nlohmann::json::parse(ab_json(d, summarize_ab(d)));
  for (auto& run : j["data"]["runs"]) {
    auto& names = run["part_names"];
    for (const char* gone : {"norm", "wait"}) {
      size_t at = 0;
      while (names[at] != gone) ++at;
      names.erase(at);
      for (auto& row : run["part_ms"]) row.erase(at);
    }
    ASSERT_EQ(names.size(), 12u);
  }
  const AbReportData back = ab_data_from_json(j.dump());
  for (size_t i = 0; i < d.runs.size(); ++i) EXPECT_EQ(back.runs[i].part_ms, d.runs[i].part_ms);
  const std::string md = ab_markdown(back, summarize_ab(back));
  EXPECT_FALSE(contains(md, "| norm |")) << md;
  EXPECT_EQ(md, ab_markdown(d, summarize_ab(d)));
}

}  // namespace
}  // namespace llm
