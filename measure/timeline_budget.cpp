// Attribution of a replay's kernel timeline to parts, and the split of a trace into replays (measure/timeline_budget.h).
#include "measure/timeline_budget.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"  // fail, printable

namespace llm {

namespace {

bool starts_before(const TraceKernel& a, const TraceKernel& b) {
  return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
}

}  // namespace

TimelineBudget attribute_timeline(const std::vector<TraceKernel>& kernels, const std::vector<int>& part_of_kernel,
                                  int n_parts, int gap_part) {
  if (kernels.size() != part_of_kernel.size())
    fail("attribute_timeline: ", kernels.size(), " kernels in the replay but ", part_of_kernel.size(),
         " parts given (one per kernel of the capture)");
  if (n_parts <= 0) fail("attribute_timeline: n_parts ", n_parts, " (must be positive)");
  if (gap_part < 0 || gap_part >= n_parts)
    fail("attribute_timeline: gap part ", gap_part, " not in [0, ", n_parts, ")");
  for (size_t i = 0; i < part_of_kernel.size(); ++i)
    if (part_of_kernel[i] < 0 || part_of_kernel[i] >= n_parts)
      fail("attribute_timeline: kernel ", i, " has part ", part_of_kernel[i], ", not in [0, ", n_parts, ")");

  // Start order is capture order (one chain from one stream); stable, so equal records keep the caller's order.
  std::vector<size_t> order(kernels.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return starts_before(kernels[a], kernels[b]); });

  TimelineBudget b;
  b.ns.assign(size_t(n_parts), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const TraceKernel& k = kernels[order[i]];
    if (k.start_ns == 0 && k.end_ns == 0)
      fail("attribute_timeline: kernel ", i, " in start order (", printable(k.name), ") has no timestamps (the tracer "
           "could not time it)");
    if (k.end_ns < k.start_ns)
      fail("attribute_timeline: kernel ", i, " in start order (", printable(k.name), ") ends before it starts (start ",
           k.start_ns, " ns, end ", k.end_ns, " ns)");
  }
  if (!order.empty()) {
    const uint64_t first = kernels[order[0]].start_ns;
    uint64_t t = first;  // everything before t is attributed
    for (size_t i = 0; i < order.size(); ++i) {
      const TraceKernel& k = kernels[order[i]];
      if (k.start_ns > t) {  // a hole: no kernel of the replay ran
        b.ns[size_t(gap_part)] += k.start_ns - t;
        b.gap_ns += k.start_ns - t;
        t = k.start_ns;
      }
      if (k.end_ns > t) {  // the part of [start, end] no earlier kernel covers (PDL overlap stays with those)
        b.ns[size_t(part_of_kernel[i])] += k.end_ns - t;
        t = k.end_ns;
      }
    }
    b.span_ns = t - first;
  }
  b.ms.resize(b.ns.size());
  for (size_t p = 0; p < b.ns.size(); ++p) b.ms[p] = double(b.ns[p]) * 1e-6;
  b.span_ms = double(b.span_ns) * 1e-6;
  b.gap_ms = double(b.gap_ns) * 1e-6;
  return b;
}

std::vector<TraceReplay> split_replays(const std::vector<TraceKernel>& records, uint32_t graph_id) {
  std::map<uint32_t, TraceReplay> by_correlation;
  for (const TraceKernel& k : records) {
    if (k.graph_id == 0 || (graph_id != 0 && k.graph_id != graph_id)) continue;
    TraceReplay& r = by_correlation[k.correlation_id];
    if (r.kernels.empty()) {
      r.correlation_id = k.correlation_id;
      r.graph_id = k.graph_id;
    }
    r.kernels.push_back(k);
  }
  std::vector<TraceReplay> replays;
  replays.reserve(by_correlation.size());
  for (auto& entry : by_correlation) {
    std::stable_sort(entry.second.kernels.begin(), entry.second.kernels.end(), starts_before);
    replays.push_back(std::move(entry.second));
  }
  std::stable_sort(replays.begin(), replays.end(), [](const TraceReplay& a, const TraceReplay& b) {
    return starts_before(a.kernels.front(), b.kernels.front());
  });
  return replays;
}

}  // namespace llm
