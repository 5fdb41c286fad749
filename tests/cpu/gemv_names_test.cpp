// The GEMV mapping names of core/gemv_names.h (built without CUDA): the one check every path uses (--gemv, --ab,
// /gemv), agreement with the sector model, and, in a CUDA build, with the kernel registry (no GPU needed: the
// registry is a list of host structs).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "analysis/sector_model.h"
#include "core/error.h"
#include "core/gemv_names.h"
#include "measure/ab_run.h"
#include "models_test_util.h"

#if LLM_HAVE_CUDA
#include "kernels/gemv/gemv.h"
#endif

namespace llm {
namespace {

TEST(GemvNames, UniqueDescribedAndTheDefaultFirst) {
  ASSERT_GE(kGemvMappingCount, 7);
  EXPECT_STREQ(kGemvDefaultMapping, "warp-r2");
  std::set<std::string> seen;
  for (const GemvMappingName& m : kGemvMappingNames) {
    EXPECT_TRUE(seen.insert(m.name).second) << m.name << " listed twice";
    EXPECT_GT(std::string(m.what).size(), 10u) << m.name;
    EXPECT_TRUE(gemv_mapping_known(m.name));
  }
  for (const char* n : {"warp-r2", "warp", "thread", "colmajor", "cublas", "thread-splitk", "warp-few"})
    EXPECT_TRUE(seen.count(n)) << n;
  EXPECT_FALSE(gemv_mapping_known(""));
  EXPECT_FALSE(gemv_mapping_known("Warp"));
  EXPECT_EQ(gemv_mapping_names().rfind("warp-r2 (default), warp, thread, ", 0), 0u) << gemv_mapping_names();
  const std::string lines = gemv_mapping_lines("  ");
  EXPECT_EQ(lines.rfind("  warp-r2 (default)  ", 0), 0u) << lines;
  for (const GemvMappingName& m : kGemvMappingNames) EXPECT_NE(lines.find(m.what), std::string::npos) << m.name;
}

TEST(GemvNames, TheOneCheck) {
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "", true));
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "thread", false));
  EXPECT_NO_THROW(check_gemv_mapping("--gemv", "warp-r2", true));  // the default is what the CPU path means anyway
  llm_test::expect_error([] { check_gemv_mapping("--gemv", "nope", false); },
                         {"--gemv: unknown GEMV mapping 'nope' (known: " + gemv_mapping_names() + ")"});
  llm_test::expect_error([] { check_gemv_mapping("--gemv", "nope", true); }, {"unknown GEMV mapping 'nope'"});
  llm_test::expect_error([] { check_gemv_mapping("/gemv", "warp", true); },
                         {"/gemv warp: GEMV mappings apply to --device cuda"});
}

TEST(GemvNames, AbListsAreChecked) {
  EXPECT_EQ(parse_ab_mappings("warp-r2, thread"), (std::vector<std::string>{"warp-r2", "thread"}));
  llm_test::expect_error([] { parse_ab_mappings("warp,nope"); }, {"--ab: unknown GEMV mapping 'nope'", "warp-r2"});
}

// The sector model describes every mapping the engine has (gemv-sectors --help lists the same names).
TEST(GemvNames, TheSectorModelKnowsEveryMapping) {
  for (const GemvMappingName& m : kGemvMappingNames) EXPECT_NO_THROW(find_sector_mapping(m.name)) << m.name;
}

#if LLM_HAVE_CUDA
// The CUDA registry is built from the same list, in the same order, and each kernel names itself as listed.
TEST(GemvNames, TheCudaRegistryIsTheSameList) {
  const auto& reg = gemv_mappings();
  ASSERT_EQ(int(reg.size()), kGemvMappingCount);
  for (int i = 0; i < kGemvMappingCount; ++i) EXPECT_STREQ(reg[size_t(i)]->name, kGemvMappingNames[i].name);
  EXPECT_STREQ(gemv_default_name(), kGemvDefaultMapping);
}
#endif

}  // namespace
}  // namespace llm
