// engine/load_progress.h: the lines a large load says (not a terminal: one per quarter, in order, with bytes and rate;
// a terminal: a bar redrawn in place, ended by a newline), and silence under 256 MiB.
#include "engine/load_progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {

std::string run(uint64_t total, bool tty, uint64_t step) {
  std::FILE* f = std::tmpfile();
  {
    llm::LoadProgress p("prepacking 'warp'", total, f, tty);
    for (uint64_t done = 0; done < total; done += step) p.add(std::min(step, total - done));
    EXPECT_EQ(p.done(), total);
  }
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(LoadProgress, APlainStreamGetsOneLinePerQuarter) {
  const uint64_t total = uint64_t(4) << 30;  // 4 GiB in 100 steps
  const std::string out = run(total, false, total / 100 + 1);
  size_t at = 0;
  for (int pct : {25, 50, 75, 100}) {
    const std::string want = "prepacking 'warp': " + std::to_string(pct) + "% (";
    const size_t pos = out.find(want, at);
    ASSERT_NE(pos, std::string::npos) << want << " in\n" << out;
    at = pos + want.size();
  }
  EXPECT_NE(out.find("/ 4.29 GB, "), std::string::npos) << out;
  EXPECT_NE(out.find(" GB/s)\n"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
}

TEST(LoadProgress, ATerminalGetsABarEndedByANewline) {
  const uint64_t total = uint64_t(1) << 30;
  const std::string out = run(total, true, total / 8);
  EXPECT_EQ(out.rfind("\rprepacking 'warp' [", 0), 0u) << out;
  EXPECT_NE(out.find("[##############################] 1.07 / 1.07 GB"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(LoadProgress, SmallLoadsStayQuiet) {
  EXPECT_EQ(run(llm::LoadProgress::kQuietBelow - 1, false, 1 << 20), "");
  EXPECT_EQ(run(llm::LoadProgress::kQuietBelow - 1, true, 1 << 20), "");
}

}  // namespace
