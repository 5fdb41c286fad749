// The A/B report's sector columns (measure/ab_stats.h ab_sector_prediction, measure/ab_render.h): filled for every
// mapping of core/gemv_table.h, on BF16 weights by the BF16 form's access pattern and on weights decode keeps
// quantized by the quantized form's replay (analysis/quant_sector_model.h), warp-dp4a included; the projections' types
// survive the JSON round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/quant_sector_model.h"
#include "core/gemv_table.h"
#include "measure/ab_render.h"
#include "measure/ab_stats.h"

namespace llm {
namespace {

constexpr uint32_t kQ4_0 = 2, kQ6_K = 14;

// A 2-layer model of small shapes (fast to replay); `quant`: the type decode keeps every projection in (0 = BF16),
// the head Q6_K where the rest is quantized (as llama.cpp's Q4_0 files).
std::vector<AbProjection> projections(uint32_t quant) {
  return {{"q", 512, 512, 2, quant},    {"k", 128, 512, 2, quant},    {"v", 128, 512, 2, quant},
          {"o", 512, 512, 2, quant},    {"gate", 1024, 512, 2, quant}, {"up", 1024, 512, 2, quant},
          {"down", 512, 1024, 2, quant}, {"head", 2048, 512, 1, quant ? kQ6_K : 0u}};
}

AbMappingRun run_of(const std::string& name) {
  AbMappingRun r;
  r.mapping = name;
  r.ms_per_token = {1.0, 1.0, 1.0};
  r.profiled_ms_per_token = {1.1, 1.1, 1.1};
  for (int i = 0; i < 3; ++i) {
    PartMs parts{};
    for (int p = 0; p < ProfileParts::kOther; ++p) parts[p] = 0.1;
    r.part_ms.push_back(parts);
  }
  r.tokens_matching_first = 129;
  return r;
}

// Every mapping of the table that can run these projections, one run each.
AbReportData data(uint32_t quant) {
  AbReportData d;
  d.model = "/models/model.gguf";
  d.device = "NVIDIA H200";
  d.sm_count = 132;
  d.max_warps_per_sm = 64;
  d.prompt_tokens = 16;
  d.n_decode = 128;
  d.repeats = 3;
  d.warmup = 1;
  d.gemv_bytes_per_token = 10000000;
  d.projections = projections(quant);
  d.roofline_gbps = {4000, 4000, 4000};
  d.roofline_method = "stream read";
  d.profiling_method = "events";
  for (const GemvRow& r : kGemvTable)
    if (quant ? r.has_quant() : r.has_bf16()) d.runs.push_back(run_of(r.name));
  return d;
}

// The main table's cells of one mapping's row.
std::vector<std::string> cells_of(const std::string& md, const std::string& mapping) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("| model.gguf | " + mapping + " |") != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string c;
    while (std::getline(row, c, '|')) cells.push_back(c);
    return cells;
  }
  return {};
}

TEST(AbSectorColumn, FilledForEveryMappingBf16AndQuantized) {
  for (uint32_t quant : {0u, kQ4_0}) {
    const AbReportData d = data(quant);
    ASSERT_EQ(d.runs.size(), size_t(quant ? kQuantGemvKinds : kGemvBf16Forms));
    const AbSummary s = summarize_ab(d);
    const std::string md = ab_markdown(d, s);
    for (const AbMappingStats& m : s.mappings) {
      SCOPED_TRACE(m.mapping + (quant ? " on Q4_0" : " on BF16"));
      EXPECT_FALSE(std::isnan(m.sectors_per_request));
      EXPECT_FALSE(std::isnan(m.sector_efficiency));
      EXPECT_GT(m.sectors_per_request, 0.0);
      EXPECT_GT(m.sector_efficiency, 0.0);
      EXPECT_LE(m.sector_efficiency, 1.0);
      const std::vector<std::string> cells = cells_of(md, m.mapping);
      ASSERT_GE(cells.size(), 12u) << md;
      EXPECT_EQ(cells[10].find("n/a"), std::string::npos) << "sectors/req: " << cells[10];
      EXPECT_EQ(cells[11].find("n/a"), std::string::npos) << "efficiency: " << cells[11];
    }
  }
}

// warp-dp4a's figures are its launch replay's: one quantized projection predicts as predict_quant does.
TEST(AbSectorColumn, QuantizedFiguresAreTheLaunchReplay) {
  const QuantSectorPrediction q = predict_quant(QuantGemvKind::WarpDp4a, 4096, 4096, int(kQ4_0));
  double spr = 0, eff = 0;
  ASSERT_TRUE(ab_sector_prediction("warp-dp4a", {{"q", 4096, 4096, 3, kQ4_0}}, &spr, &eff));
  EXPECT_DOUBLE_EQ(spr, q.sectors_per_request());
  EXPECT_DOUBLE_EQ(eff, q.efficiency());
  // A BF16 projection has no warp-dp4a form; a quantized one none in cublas.
  EXPECT_FALSE(ab_sector_prediction("warp-dp4a", {{"q", 4096, 4096, 3, 0}}, &spr, &eff));
  EXPECT_FALSE(ab_sector_prediction("cublas", {{"q", 4096, 4096, 3, kQ4_0}}, &spr, &eff));
}

TEST(AbSectorColumn, ProjectionTypesRoundTripThroughJson) {
  const AbReportData d = data(kQ4_0);
  const AbReportData back = ab_data_from_json(ab_json(d, summarize_ab(d)));
  ASSERT_EQ(back.projections.size(), d.projections.size());
  for (size_t i = 0; i < d.projections.size(); ++i) EXPECT_EQ(back.projections[i].quant, d.projections[i].quant);
}

}  // namespace
}  // namespace llm
