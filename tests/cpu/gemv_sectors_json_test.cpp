// gemv-sectors --json (read by tools/ncu_table.py): one parseable line per mapping, carrying predict()'s figures.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/sector_model.h"

namespace llm {
namespace {

std::vector<nlohmann::json> run_json(const std::string& args) {
  const std::string bin = std::string(LLM_BINARY_DIR) + "/gemv-sectors";
  const std::string out = std::string(LLM_BINARY_DIR) + "/gemv_sectors_json_test.out";
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
  }
}

}  // namespace
}  // namespace llm
