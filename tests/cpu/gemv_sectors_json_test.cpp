// gemv-sectors --json (read by tools/ncu_table.py): one parseable line per mapping, carrying predict()'s figures.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/quant_sector_model.h"
#include "analysis/sector_model.h"

namespace llm {
namespace {

std::vector<nlohmann::json> run_json(const std::string& args) {
  const std::string bin = std::string(LLM_BINARY_DIR) + "/gemv-sectors";
  // One file per test: ctest runs the tests of this file in parallel processes.
  const std::string out = std::string(LLM_BINARY_DIR) + "/gemv_sectors_json_test." +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".out";
  const int rc = std::system((bin + " " + args + " --json >" + out + " 2>&1").c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << bin << " " << args << " failed";
  std::ifstream f(out);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(nlohmann::json::parse(line));  // throws (fails) on a non-JSON line
  return lines;
}

TEST(GemvSectorsJson, OneLinePerMappingWithPredictFigures) {
  if (!std::ifstream(std::string(LLM_BINARY_DIR) + "/gemv-sectors").good())
    FAIL() <<  "(every tree that runs this test builds it) " << "gemv-sectors not built (build the gemv-sectors target)";
  const auto one = run_json("--mapping thread --shape 1024x4096 --dtype bf16");
  ASSERT_EQ(one.size(), 1u);
  const SectorPrediction p = predict("thread", 1024, 4096, WeightFormat::BF16);
  EXPECT_EQ(one[0]["mapping"], "thread");
  EXPECT_EQ(one[0]["N"], 1024);
  EXPECT_EQ(one[0]["K"], 4096);
  EXPECT_EQ(one[0]["requests_total"].get<int64_t>(), p.requests_total);
  EXPECT_EQ(one[0]["sectors_total"].get<int64_t>(), p.sectors_total);
  EXPECT_DOUBLE_EQ(one[0]["sectors_per_request"].get<double>(), 32.0);  // lanes 8 KiB apart: one sector each
  EXPECT_EQ(one[0]["matrix_bytes"].get<int64_t>(), int64_t(1024) * 4096 * 2);

  const auto all = run_json("--shape 4096x4096 --dtype bf16");
  EXPECT_EQ(all.size(), sector_mappings().size());
  for (const auto& j : all) {
    if (j["mapping"] == "warp") {
      EXPECT_DOUBLE_EQ(j["sectors_per_request"].get<double>(), 16.0);  // 512 B per request
    }
    EXPECT_FALSE(j.contains("quantized")) << j.dump();  // the BF16 lines stay as tools/ncu_table.py reads them
    EXPECT_FALSE(j.contains("classes")) << j.dump();
  }
}

// --quant --json: the BF16 lines' fields (same names) plus the quantized figures and one entry per load class.
TEST(GemvSectorsJson, QuantizedFormsCarryTheirClasses) {
  if (!std::ifstream(std::string(LLM_BINARY_DIR) + "/gemv-sectors").good())
    FAIL() << "gemv-sectors not built (build the gemv-sectors target)";
  const auto one = run_json("--quant q4_0 --mapping warp --shape 14336x4096 --warp-x global");
  ASSERT_EQ(one.size(), 1u);
  const nlohmann::json& j = one[0];
  const QuantSectorPrediction p = predict_quant("warp", 14336, 4096, "q4_0", 132, QuantWarpX::Global);
  for (const char* key : {"mapping", "dtype", "N", "K", "load_bytes", "sectors_per_request", "lines_per_request",
                          "useful_bytes_per_request", "efficiency", "requests_total", "sectors_total", "matrix_bytes",
                          "dram_bytes_no_reuse", "dram_bytes_perfect_reuse", "lane_stride_bytes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["mapping"], "warp");
  EXPECT_EQ(j["dtype"], "q4_0");
  EXPECT_EQ(j["quantized"], true);
  EXPECT_EQ(j["x_path"], "global");
  EXPECT_EQ(j["load_bytes"], 16);
  EXPECT_DOUBLE_EQ(j["sectors_per_request"].get<double>(), 20.5);
  EXPECT_EQ(j["requests_total"].get<int64_t>(), p.requests_total);
  EXPECT_EQ(j["sectors_total"].get<int64_t>(), p.sectors_total);
  const QuantGemvWeight w = quant_gemv_describe(quant_type_id::kQ4_0, 14336, 4096);
  EXPECT_EQ(j["dram_bytes"].get<int64_t>(), quant_gemv_bytes_read(QuantGemvKind::Warp, w));
  EXPECT_EQ(j["matrix_bytes"].get<int64_t>(), quant_gemv_bytes_read(QuantGemvKind::Warp, w));
  EXPECT_EQ(j["grid"], 264);
  ASSERT_EQ(j["classes"].size(), 3u);
  EXPECT_EQ(j["classes"][0]["class"], "codes");
  EXPECT_DOUBLE_EQ(j["classes"][0]["sectors_per_request"].get<double>(), 16.0);
  EXPECT_EQ(j["classes"][2]["class"], "x");
  EXPECT_EQ(j["classes"][2]["weight"], false);

  const auto all = run_json("--quant q8_0 --shape 14336x4096");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0]["mapping"], "warp");
  EXPECT_EQ(all[1]["mapping"], "warp-dp4a");
  EXPECT_EQ(all[2]["mapping"], "thread");
  EXPECT_EQ(all[3]["mapping"], "as-stored");
  EXPECT_EQ(all[3]["load_bytes"], 2);  // 34-byte blocks: 2-byte loads
}

}  // namespace
}  // namespace llm
