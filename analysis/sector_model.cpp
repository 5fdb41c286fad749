// Sector model: generates the byte addresses of every warp-wide load of a GEMV mapping and counts sectors and lines.
#include "analysis/sector_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/gemv_table.h"  // the mappings' rows: names, order, access patterns

namespace llm {

// ---- weight formats ----

const std::vector<WeightFormatInfo>& weight_formats() {
  static const std::vector<WeightFormatInfo> formats = {
      {WeightFormat::BF16, "bf16", 1, 2, false},
      {WeightFormat::F16, "f16", 1, 2, false},
      {WeightFormat::Q8_0, "q8_0", 32, 34, true},
      {WeightFormat::Q4_0, "q4_0", 32, 18, true},
      {WeightFormat::INT4, "int4", 32, 16, true},
  };
  return formats;
}

const WeightFormatInfo& weight_format_info(WeightFormat f) {
  for (const auto& info : weight_formats())
    if (info.format == f) return info;
  fail("sector model: weight format ", int(f), " is not in the format table");
}

static std::string known_format_names() {
  std::string names;
  for (const auto& info : weight_formats()) names += std::string(names.empty() ? "" : ", ") + info.name;
  return names;
}

WeightFormat parse_weight_format(const std::string& name) {
  for (const auto& info : weight_formats())
    if (name == info.name) return info.format;
  fail("unsupported dtype '", name, "': expected one of ", known_format_names());
}

int64_t row_bytes(WeightFormat f, int64_t K) {
  const auto& info = weight_format_info(f);
  return K / info.block_weights * info.block_bytes;
}

// ---- counting one request ----

using ByteSpan = std::pair<int64_t, int64_t>;  // [first byte, last byte] of one lane's load

// Number of distinct (1 << shift)-byte blocks covered by byte spans sorted by their first byte.
static int count_distinct_units(const ByteSpan* spans, int n, int shift) {
  int distinct = 0;
  int64_t top = -1;  // highest unit counted so far
  for (int i = 0; i < n; ++i) {
    int64_t from = std::max(spans[i].first >> shift, top + 1), to = spans[i].second >> shift;
    if (from <= to) distinct += int(to - from + 1);
    top = std::max(top, to);
  }
  return distinct;
}

RequestStats count_request(const WarpRequest& req) {
  static_assert(kSectorBytes == 32 && kLineBytes == 128, "shifts below assume 32 B sectors and 128 B lines");
  RequestStats s;
  std::array<ByteSpan, kWarpLanes> spans;
  int n = 0;
  for (const auto& lane : req) {
    if (lane.bytes <= 0) continue;
    if (lane.addr < 0) fail("sector model: lane address ", lane.addr, " is negative");
    const int64_t end = lane.addr + lane.bytes - 1;
    spans[n++] = {lane.addr, end};
    s.useful_bytes += lane.bytes;
    s.straddling_lanes += (lane.addr >> 5) != (end >> 5);
    const bool pow2 = (lane.bytes & (lane.bytes - 1)) == 0;  // the common case: a mask, not a 64-bit division
    s.misaligned_lanes += pow2 ? (lane.addr & (lane.bytes - 1)) != 0 : lane.addr % lane.bytes != 0;
  }
  s.active_lanes = n;
  // Every mapping we model issues lanes in address order; any other order is sorted so the sweep stays exact.
  if (!std::is_sorted(spans.begin(), spans.begin() + n)) std::sort(spans.begin(), spans.begin() + n);
  s.sectors = count_distinct_units(spans.data(), n, 5);
  s.lines = count_distinct_units(spans.data(), n, 7);
  return s;
}

// ---- generating requests ----

static void for_each_request_along_row(const AccessPattern& p, const std::function<void(const WarpRequest&)>& visit) {
  const StoredLayout& L = p.layout;
  const int64_t warp_span = int64_t(kWarpLanes) * p.load_bytes;
  WarpRequest req;
  for (int64_t r = 0; r < L.rows; ++r) {
    for (int64_t off = 0; off < L.row_bytes; off += warp_span) {
      for (int j = 0; j < kWarpLanes; ++j) {
        int64_t start = off + int64_t(j) * p.load_bytes;  // byte offset of lane j inside row r
        req[j].addr = r * L.ld_bytes + start;
        req[j].bytes = start < L.row_bytes ? int(std::min<int64_t>(p.load_bytes, L.row_bytes - start)) : 0;
      }
      visit(req);
    }
  }
}

static void for_each_request_across_rows(const AccessPattern& p,
                                         const std::function<void(const WarpRequest&)>& visit) {
  const StoredLayout& L = p.layout;
  WarpRequest req;
  for (int64_t r0 = 0; r0 < L.rows; r0 += kWarpLanes) {
    for (int64_t off = 0; off < L.row_bytes; off += p.load_bytes) {
      const int bytes = int(std::min<int64_t>(p.load_bytes, L.row_bytes - off));
      for (int j = 0; j < kWarpLanes; ++j) {
        int64_t r = r0 + j;  // lane j owns row r0 + j
        req[j].addr = r * L.ld_bytes + off;
        req[j].bytes = r < L.rows ? bytes : 0;
      }
      visit(req);
    }
  }
}

void for_each_request(const AccessPattern& p, const std::function<void(const WarpRequest&)>& visit) {
  if (p.load_bytes <= 0) fail("sector model: load width ", p.load_bytes, " B must be positive");
  if (p.layout.ld_bytes < p.layout.row_bytes)
    fail("sector model: row stride ", p.layout.ld_bytes, " B is shorter than a row (", p.layout.row_bytes, " B)");
  if (p.across_rows)
    for_each_request_across_rows(p, visit);
  else
    for_each_request_along_row(p, visit);
}

// ---- mappings ----

namespace {

// What each access pattern of core/gemv_table.h (GemvAccess) means for the model: the stored layout and how the lanes
// walk it. A mapping's row names its pattern; the rows, their names and order come from the table.
struct PatternInfo {
  const char* layout;      // "row-major [N, K]" or "column-major [K, N]"
  bool across_rows;        // see AccessPattern
  bool transposed;         // stored as [K, N]
  int default_load_bytes;  // 0 = one element of the weight type
};
const PatternInfo* pattern_info(GemvAccess a) {
  static const PatternInfo along{"row-major [N, K]", false, false, 16};
  static const PatternInfo across{"row-major [N, K]", true, false, 0};
  static const PatternInfo colmajor{"column-major [K, N]", false, true, 0};
  switch (a) {
    case GemvAccess::AlongRow:
    case GemvAccess::LibraryModel: return &along;  // a library's kernels: modelled as lanes along K, 16-byte loads
    case GemvAccess::AcrossRows: return &across;
    case GemvAccess::ColumnMajor: return &colmajor;
    case GemvAccess::None: break;
  }
  return nullptr;
}

}  // namespace

const std::vector<SectorMappingInfo>& sector_mappings() {
  static const std::vector<SectorMappingInfo> mappings = [] {
    std::vector<SectorMappingInfo> list;
    for (const GemvRow& r : kGemvTable)
      if (const PatternInfo* p = r.has_bf16() ? pattern_info(r.access) : nullptr)
        list.push_back({r.name, p->layout, p->across_rows, p->transposed, p->default_load_bytes, r.why, r.access});
    return list;
  }();
  return mappings;
}

std::vector<std::string> sector_mappings_missing() {
  std::vector<std::string> missing;
  for (const GemvRow& r : kGemvTable)
    if (r.has_bf16() && !pattern_info(r.access)) missing.push_back(r.name);
  return missing;
}

std::vector<std::string> sector_patterns_unregistered() {
  std::vector<std::string> extra;
  for (const GemvRow& r : kGemvTable)
    if (!r.has_bf16() && r.access != GemvAccess::None) extra.push_back(r.name);
  return extra;
}

const SectorMappingInfo& find_sector_mapping(const std::string& name) {
  std::string known;
  for (const auto& m : sector_mappings()) {
    if (name == m.name) return m;
    known += std::string(known.empty() ? "" : ", ") + m.name;
  }
  fail("unknown mapping '", name, "': known mappings are ", known);
}

const SectorMappingInfo& find_sector_mapping(GemvBf16Form form) {
  const GemvRow* r = gemv_row(form);
  if (!r) fail("sector model: no BF16 form");
  return find_sector_mapping(r->name);
}

static int resolve_load_bytes(const SectorMappingInfo& m, const WeightFormatInfo& f, int load_bytes) {
  if (load_bytes == 0) {
    if (f.quantized) return 16;
    return m.default_load_bytes ? m.default_load_bytes : f.block_bytes;
  }
  if (load_bytes != 1 && load_bytes != 2 && load_bytes != 4 && load_bytes != 8 && load_bytes != 16)
    fail("load bytes ", load_bytes, " is not supported: expected one of 1, 2, 4, 8, 16");
  if (!f.quantized && load_bytes < f.block_bytes)
    fail("load bytes ", load_bytes, " is smaller than one ", f.name, " element (", f.block_bytes, " B)");
  if (m.access == GemvAccess::LibraryModel && load_bytes != 16)
    fail("mapping ", m.name, " is modelled with 16-byte loads only, found load bytes ", load_bytes);
  return load_bytes;
}

AccessPattern sector_access_pattern(const std::string& mapping, int64_t N, int64_t K, WeightFormat format,
                                    int load_bytes, int64_t ld_bytes) {
  const SectorMappingInfo& m = find_sector_mapping(mapping);
  const WeightFormatInfo& f = weight_format_info(format);
  if (N <= 0 || K <= 0) fail("shape ", N, "x", K, ": expected positive N and K");
  if (K % f.block_weights != 0)
    fail("shape ", N, "x", K, ": ", f.name, " needs K to be a multiple of ", f.block_weights, " (its block size)");
  if (m.transposed && f.quantized)
    fail("mapping ", m.name, " needs a [K, N] layout, which ", f.name,
         " does not have (its blocks run along K); use bf16 or f16");
  AccessPattern p;
  p.across_rows = m.across_rows;
  p.load_bytes = resolve_load_bytes(m, f, load_bytes);
  p.layout.rows = m.transposed ? K : N;
  p.layout.row_bytes = m.transposed ? row_bytes(format, N) : row_bytes(format, K);
  p.layout.ld_bytes = ld_bytes ? ld_bytes : p.layout.row_bytes;
  if (ld_bytes < 0 || p.layout.ld_bytes < p.layout.row_bytes)
    fail("row stride ", ld_bytes, " B is shorter than a stored row (", p.layout.row_bytes, " B)");
  return p;
}

SectorPrediction predict(const std::string& mapping, int64_t N, int64_t K, WeightFormat format, int load_bytes,
                         int64_t ld_bytes) {
  const AccessPattern p = sector_access_pattern(mapping, N, K, format, load_bytes, ld_bytes);
  SectorPrediction s;
  s.mapping = mapping;
  s.format = format;
  s.N = N;
  s.K = K;
  s.load_bytes = p.load_bytes;
  s.layout = p.layout;
  s.matrix_bytes = p.layout.rows * p.layout.row_bytes;
  for_each_request(p, [&](const WarpRequest& req) {
    RequestStats r = count_request(req);
    if (s.requests_total == 0) {
      s.first = r;
      s.lane_stride_bytes = req[1].bytes > 0 ? req[1].addr - req[0].addr : 0;
    }
    bool touches_row0 = false;  // stored row 0 is bytes [0, row_bytes)
    for (const auto& lane : req) touches_row0 |= lane.bytes > 0 && lane.addr < p.layout.row_bytes;
    s.requests_per_row += touches_row0;
    s.requests_total++;
    s.sectors_total += r.sectors;
    s.lines_total += r.lines;
    s.straddling_lanes_total += r.straddling_lanes;
    s.misaligned_lanes_total += r.misaligned_lanes;
    s.lane_loads_total += r.active_lanes;
  });
  return s;
}

double SectorPrediction::sectors_per_request() const { return double(sectors_total) / double(requests_total); }
double SectorPrediction::lines_per_request() const { return double(lines_total) / double(requests_total); }
double SectorPrediction::useful_bytes_per_request() const { return double(matrix_bytes) / double(requests_total); }
double SectorPrediction::weights_per_request() const {
  const auto& f = weight_format_info(format);
  return useful_bytes_per_request() * f.block_weights / f.block_bytes;
}
double SectorPrediction::efficiency() const { return double(matrix_bytes) / double(sectors_total * kSectorBytes); }

// ---- report ----

// Integers print bare; fractions with two decimals (averages over a matrix whose rows do not split evenly).
static std::string num(double v) {
  char buf[64];
  if (std::fabs(v - std::round(v)) < 1e-9)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

static std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string sector_table_markdown(const std::vector<SectorPrediction>& rows) {
  std::ostringstream os;
  os << "| mapping | load B | sectors/req | lines/req | useful B/req | weights/req | efficiency % | req/row"
        " | req/matrix | DRAM MB no reuse | DRAM MB perfect reuse | lane stride B |\n";
  os << "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const auto& r : rows) {
    os << "| " << r.mapping << " | " << r.load_bytes << " | " << num(r.sectors_per_request()) << " | "
       << num(r.lines_per_request()) << " | " << num(r.useful_bytes_per_request()) << " | "
       << num(r.weights_per_request()) << " | " << fixed2(100.0 * r.efficiency()) << " | " << r.requests_per_row
       << " | " << r.requests_total << " | " << fixed2(r.dram_bytes_no_reuse() / 1e6) << " | "
       << fixed2(r.dram_bytes_perfect_reuse() / 1e6) << " | " << r.lane_stride_bytes << " |\n";
  }
  return os.str();
}

}  // namespace llm
