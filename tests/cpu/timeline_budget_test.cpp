// The kernel-timeline attribution (measure/timeline_budget.h) on hand-made timelines in whole nanoseconds, so every
// expectation is exact: PDL overlap stays with the predecessor, holes go to the gap part, input order does not
// matter, the parts sum to the span, bad input fails with one line; and the split of a trace into graph replays.
// Also what KernelTrace (measure/kernel_trace.h) says where the build has no CUPTI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "measure/kernel_trace.h"
#include "measure/timeline_budget.h"
#include "models_test_util.h"  // expect_error

namespace {

using llm::attribute_timeline;
using llm::split_replays;
using llm::TimelineBudget;
using llm::TraceKernel;
using llm_test::expect_error;

TraceKernel kernel(uint64_t start, uint64_t end, const std::string& name = "k", uint32_t graph = 1,
                   uint32_t correlation = 1, uint64_t node = 0) {
  TraceKernel k;
  k.start_ns = start;
  k.end_ns = end;
  k.name = name;
  k.graph_id = graph;
  k.correlation_id = correlation;
  k.graph_node_id = node;
  return k;
}

uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t(0)); }

// The invariants every budget holds: parts sum to the span, ms mirror ns.
void expect_consistent(const TimelineBudget& b) {
  EXPECT_EQ(sum(b.ns), b.span_ns);
  ASSERT_EQ(b.ms.size(), b.ns.size());
  for (size_t p = 0; p < b.ns.size(); ++p) EXPECT_DOUBLE_EQ(b.ms[p], double(b.ns[p]) * 1e-6) << "part " << p;
  EXPECT_DOUBLE_EQ(b.span_ms, double(b.span_ns) * 1e-6);
  EXPECT_DOUBLE_EQ(b.gap_ms, double(b.gap_ns) * 1e-6);
}

// Kernel 1 starts 200 ns before kernel 0 ends (programmatic dependent launch): those 200 ns are kernel 0's.
TEST(TimelineBudget, PdlOverlapGoesToThePredecessor) {
  const std::vector<TraceKernel> ks = {kernel(1000, 2000, "rmsnorm"), kernel(1800, 2500, "gemv_q")};
  const TimelineBudget b = attribute_timeline(ks, {0, 1}, 3, 2);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{1000, 500, 0}));
  EXPECT_EQ(b.span_ns, 1500u);
  EXPECT_EQ(b.gap_ns, 0u);
  expect_consistent(b);
}

// A kernel wholly inside its predecessor's time adds nothing; the one after it is measured from the later end.
TEST(TimelineBudget, KernelInsideItsPredecessorGetsNothing) {
  const std::vector<TraceKernel> ks = {kernel(1000, 3000), kernel(1500, 2000), kernel(2500, 3400)};
  const TimelineBudget b = attribute_timeline(ks, {0, 1, 2}, 3, 0);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{2000, 0, 400}));
  EXPECT_EQ(b.span_ns, 2400u);
  expect_consistent(b);
}

// Holes between kernels (launch latency) go to the gap part and to gap_ns; a hole before the first kernel cannot
// exist (the span starts there).
TEST(TimelineBudget, HolesGoToTheGapPart) {
  const std::vector<TraceKernel> ks = {kernel(1000, 1100), kernel(1300, 1500), kernel(1500, 1600), kernel(1650, 1700)};
  const TimelineBudget b = attribute_timeline(ks, {0, 1, 0, 1}, 3, 2);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{200, 250, 250}));
  EXPECT_EQ(b.gap_ns, 250u);
  EXPECT_EQ(b.span_ns, 700u);
  expect_consistent(b);
}

// The gap part may be a real part too ("other"): it then holds its kernels' time and the holes, and gap_ns says
// how much of it is holes.
TEST(TimelineBudget, GapPartCanAlsoOwnKernels) {
  const std::vector<TraceKernel> ks = {kernel(10, 110), kernel(150, 250), kernel(300, 330)};
  const TimelineBudget b = attribute_timeline(ks, {1, 0, 1}, 2, 1);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{100, 100 + 30 + 40 + 50}));
  EXPECT_EQ(b.gap_ns, 90u);
  EXPECT_EQ(b.span_ns, 320u);
  expect_consistent(b);
}

// part_of_kernel follows start order whatever order the records come in; equal starts order by end.
TEST(TimelineBudget, OutOfOrderInputIsSortedByStartThenEnd) {
  const std::vector<TraceKernel> sorted = {kernel(100, 400, "a"), kernel(100, 450, "b"), kernel(500, 600, "c"),
                                           kernel(580, 900, "d")};
  const std::vector<int> parts = {0, 1, 2, 3};
  const TimelineBudget want = attribute_timeline(sorted, parts, 5, 4);
  EXPECT_EQ(want.ns, (std::vector<uint64_t>{300, 50, 100, 300, 50}));
  EXPECT_EQ(want.span_ns, 800u);
  const std::vector<TraceKernel> shuffled = {sorted[3], sorted[1], sorted[2], sorted[0]};
  const TimelineBudget got = attribute_timeline(shuffled, parts, 5, 4);
  EXPECT_EQ(got.ns, want.ns);
  EXPECT_EQ(got.span_ns, want.span_ns);
  EXPECT_EQ(got.gap_ns, want.gap_ns);
  expect_consistent(got);
}

// A long chain of overlaps, holes, nested and back-to-back kernels from a fixed generator: the parts sum to the span
// exactly, the span is last end - first start, and the sweep matches a per-nanosecond count on the same timeline.
TEST(TimelineBudget, PartsSumToTheSpan) {
  uint64_t state = 12345;
  const auto next = [&](uint64_t n) {  // deterministic LCG, values in [0, n)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  const int n_parts = 5, gap_part = 4;
  std::vector<TraceKernel> ks;
  uint64_t start = 5000;
  for (int i = 0; i < 300; ++i) {
    start += next(60);  // 0: same start as the previous kernel
    ks.push_back(kernel(start, start + next(120)));  // zero-length kernels included
  }
  // In start order (ties by end), the order part_of_kernel follows.
  std::stable_sort(ks.begin(), ks.end(), [](const TraceKernel& a, const TraceKernel& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  std::vector<int> parts;
  for (size_t i = 0; i < ks.size(); ++i) parts.push_back(int(next(n_parts)));
  const TimelineBudget b = attribute_timeline(ks, parts, n_parts, gap_part);
  expect_consistent(b);
  uint64_t last_end = 0;
  for (const TraceKernel& k : ks) last_end = std::max(last_end, k.end_ns);
  EXPECT_EQ(b.span_ns, last_end - ks.front().start_ns);

  // Reference: each nanosecond [t, t+1) belongs to the first kernel in start order covering it, else to the gap.
  std::vector<uint64_t> ref(n_parts, 0);
  uint64_t ref_gap = 0;
  for (uint64_t t = ks.front().start_ns; t < last_end; ++t) {
    int owner = -1;
    for (size_t i = 0; i < ks.size() && owner < 0; ++i)
      if (ks[i].start_ns <= t && t < ks[i].end_ns) owner = parts[i];
    if (owner < 0) {
      owner = gap_part;
      ++ref_gap;
    }
    ++ref[size_t(owner)];
  }
  EXPECT_EQ(b.ns, ref);
  EXPECT_EQ(b.gap_ns, ref_gap);
  EXPECT_GT(ref_gap, 0u);  // the generator made holes
}

TEST(TimelineBudget, NoKernelsIsAllZero) {
  const TimelineBudget b = attribute_timeline({}, {}, 3, 2);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(b.span_ns, 0u);
  EXPECT_EQ(b.gap_ns, 0u);
  expect_consistent(b);
}

TEST(TimelineBudget, MismatchedCountsFailNamingBoth) {
  const std::vector<TraceKernel> ks = {kernel(1, 2), kernel(3, 4), kernel(5, 6)};
  expect_error([&] { attribute_timeline(ks, {0, 1}, 2, 0); }, {"attribute_timeline: ", "3 kernels", "2 parts"});
  expect_error([&] { attribute_timeline({}, {0}, 2, 0); }, {"0 kernels", "1 parts"});
}

TEST(TimelineBudget, BadRecordsAndPartsFail) {
  expect_error([&] { attribute_timeline({kernel(10, 20), kernel(30, 25, "gemv_down")}, {0, 0}, 1, 0); },
               {"kernel 1 in start order (gemv_down) ends before it starts (start 30 ns, end 25 ns)"});
  expect_error([&] { attribute_timeline({kernel(0, 0, "attn"), kernel(30, 40)}, {0, 0}, 1, 0); },
               {"kernel 0 in start order (attn) has no timestamps"});
  expect_error([&] { attribute_timeline({kernel(10, 20)}, {2}, 2, 0); }, {"kernel 0 has part 2, not in [0, 2)"});
  expect_error([&] { attribute_timeline({kernel(10, 20)}, {-1}, 2, 0); }, {"kernel 0 has part -1"});
  expect_error([&] { attribute_timeline({kernel(10, 20)}, {0}, 2, 2); }, {"gap part 2 not in [0, 2)"});
  expect_error([&] { attribute_timeline({}, {}, 0, 0); }, {"n_parts 0"});
}

// Two replays of graph 3 (correlation ids 7 and 9) whose records arrive interleaved and out of order, an un-graphed
// kernel (graph 0) between them, and one launch of another graph (4).
TEST(TimelineBudget, SplitReplaysGroupsByCorrelationId) {
  const std::vector<TraceKernel> records = {
      kernel(2100, 2200, "b1", 3, 9, 52), kernel(1000, 1100, "a0", 3, 7, 51), kernel(1500, 1600, "plain", 0, 8, 0),
      kernel(2000, 2090, "b0", 3, 9, 51), kernel(1100, 1250, "a1", 3, 7, 52), kernel(3000, 3100, "c0", 4, 11, 60),
      kernel(1240, 1300, "a2", 3, 7, 53),
  };
  const auto names = [](const llm::TraceReplay& r) {
    std::vector<std::string> n;
    for (const TraceKernel& k : r.kernels) n.push_back(k.name);
    return n;
  };

  const std::vector<llm::TraceReplay> of3 = split_replays(records, 3);
  ASSERT_EQ(of3.size(), 2u);
  EXPECT_EQ(of3[0].correlation_id, 7u);
  EXPECT_EQ(of3[0].graph_id, 3u);
  EXPECT_EQ(names(of3[0]), (std::vector<std::string>{"a0", "a1", "a2"}));
  EXPECT_EQ(of3[1].correlation_id, 9u);
  EXPECT_EQ(names(of3[1]), (std::vector<std::string>{"b0", "b1"}));
  EXPECT_EQ(of3[1].kernels[1].graph_node_id, 52u);

  // Each replay attributes on its own: in replay 7 a2 starts 10 ns before a1 ends, replay 9 has a 10 ns hole.
  const TimelineBudget a = attribute_timeline(of3[0].kernels, {0, 1, 2}, 4, 3);
  EXPECT_EQ(a.ns, (std::vector<uint64_t>{100, 150, 50, 0}));
  const TimelineBudget b = attribute_timeline(of3[1].kernels, {0, 1}, 4, 3);
  EXPECT_EQ(b.ns, (std::vector<uint64_t>{90, 100, 0, 10}));

  const std::vector<llm::TraceReplay> any = split_replays(records, 0);
  ASSERT_EQ(any.size(), 3u);
  EXPECT_EQ(any[0].correlation_id, 7u);
  EXPECT_EQ(any[1].correlation_id, 9u);
  EXPECT_EQ(any[2].correlation_id, 11u);
  EXPECT_EQ(any[2].graph_id, 4u);
  EXPECT_EQ(names(any[2]), (std::vector<std::string>{"c0"}));

  EXPECT_TRUE(split_replays(records, 5).empty());
  EXPECT_TRUE(split_replays({kernel(1, 2, "plain", 0, 8)}, 0).empty());
}

// Without CUPTI the tracer refuses with one fixed line and hands back nothing. With CUPTI, start() either works or
// says why in one line (this machine may have no GPU); take() after it is then empty of dropped records.
TEST(TimelineBudget, KernelTraceStartSaysWhyItCannot) {
  llm::KernelTrace& trace = llm::KernelTrace::instance();
  std::string why;
  if (!llm::KernelTrace::built_with_cupti()) {
    EXPECT_FALSE(trace.start(&why));
    EXPECT_EQ(why, "this build has no CUPTI (kernel timeline unavailable)");
    uint32_t id = 7;
    EXPECT_FALSE(trace.graph_exec_id(nullptr, &id, &why));
    EXPECT_EQ(id, 0u);
  } else if (!trace.start(&why)) {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_EQ(why.rfind("kernel timeline: ", 0), 0u) << why;
  } else {
    trace.stop();
  }
  uint64_t dropped = 99;
  (void)trace.take(&dropped);
  EXPECT_EQ(dropped, 0u);
}

}  // namespace
