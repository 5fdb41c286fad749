// The quantized sector model's reports (analysis/quant_sector_model.h): the kernel-wide markdown table, the
// per-load-class table, and one JSON line per prediction (gemv-sectors --quant).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/quant_sector_model.h"

namespace llm {

// ---- reports ----

namespace {

std::string f2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// The load width the form is known by: 16-byte code loads, or the as-stored blocks' 2/4-byte loads.
int form_load_bytes(const QuantSectorPrediction& p) { return p.plan.bytes_per_load; }

int64_t first_weight_lane_stride(const QuantSectorPrediction& p) {
  for (const QuantLoadClass& c : p.classes)
    if (c.weight) return c.lane_stride_bytes;
  return 0;
}

}  // namespace

std::string quant_sector_summary_markdown(const std::vector<QuantSectorPrediction>& rows) {
  std::ostringstream os;
  os << "| type | mapping | x read from | grid x 256 | splits | requests | sectors/req (all loads) | lines/req "
        "| bytes/req "
        "| efficiency % | DRAM MB (weight sectors) | bytes read MB (form) | x DRAM KB | DRAM MB no reuse |\n";
  os << "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const auto& r : rows) {
    os << "| " << upper(r.quant) << " | " << r.mapping << " | " << r.x_path << " | " << r.plan.grid << " | "
       << r.plan.splits << " | "
       << r.requests_total << " | " << f2(r.sectors_per_request()) << " | " << f2(r.lines_per_request()) << " | "
       << f2(r.bytes_per_request()) << " | " << f2(100.0 * r.efficiency()) << " | " << f2(r.dram_bytes() / 1e6)
       << " | " << f2(r.bytes_read / 1e6) << " | " << f2(r.x_dram_bytes() / 1e3) << " | "
       << f2(r.dram_bytes_no_reuse() / 1e6) << " |\n";
  }
  return os.str();
}

std::string quant_sector_class_markdown(const std::vector<QuantSectorPrediction>& rows) {
  std::ostringstream os;
  os << "| type | mapping | class | load B | requests | sectors/req | lines/req | bytes/req | lane bytes/req "
        "| lane stride B | % of requests | % of sectors |\n";
  os << "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const auto& r : rows) {
    for (const auto& c : r.classes) {
      os << "| " << upper(r.quant) << " | " << r.mapping << " | " << c.name << " | " << c.load_bytes << " | "
         << c.requests << " | " << f2(c.sectors_per_request()) << " | " << f2(c.lines_per_request()) << " | "
         << f2(c.bytes_per_request()) << " | " << f2(c.lane_bytes_per_request()) << " | " << c.lane_stride_bytes
         << " | "
         << f2(100.0 * double(c.requests) / double(r.requests_total)) << " | "
         << f2(100.0 * double(c.sectors) / double(r.sectors_total)) << " |\n";
    }
    os << "| " << upper(r.quant) << " | " << r.mapping << " | **all loads** | | " << r.requests_total << " | **"
       << f2(r.sectors_per_request()) << "** | " << f2(r.lines_per_request()) << " | " << f2(r.bytes_per_request())
       << " | " << f2(r.lane_bytes_per_request()) << " | | 100.00 | 100.00 |\n";
  }
  return os.str();
}

std::string quant_sector_json_line(const QuantSectorPrediction& p) {
  nlohmann::ordered_json j;
  // The BF16 lines' fields first, same names and meanings (weight -> the whole launch's loads; matrix_bytes -> the
  // bytes the form reads; perfect reuse -> every weight sector fetched once).
  j["mapping"] = p.mapping;
  j["dtype"] = p.quant;
  j["N"] = p.N;
  j["K"] = p.K;
  j["load_bytes"] = form_load_bytes(p);
  j["sectors_per_request"] = p.sectors_per_request();
  j["lines_per_request"] = p.lines_per_request();
  j["useful_bytes_per_request"] = p.bytes_per_request();
  j["lane_bytes_per_request"] = p.lane_bytes_per_request();
  j["efficiency"] = p.efficiency();
  j["requests_total"] = p.requests_total;
  j["sectors_total"] = p.sectors_total;
  j["matrix_bytes"] = p.bytes_read;
  j["dram_bytes_no_reuse"] = p.dram_bytes_no_reuse();
  j["dram_bytes_perfect_reuse"] = p.dram_bytes();
  j["lane_stride_bytes"] = first_weight_lane_stride(p);
  // The quantized forms' own.
  j["quantized"] = true;
  j["x_path"] = p.x_path;
  j["sm_count"] = p.sm_count;
  j["grid"] = p.plan.grid;
  j["block"] = p.plan.block;
  j["splits"] = p.plan.splits;
  j["rows_per_warp"] = p.plan.rows_per_warp;
  j["dram_bytes"] = p.dram_bytes();
  j["x_dram_bytes"] = p.x_dram_bytes();
  j["bytes_read"] = p.bytes_read;
  j["weight_bytes_touched"] = p.weight_bytes_touched;
  nlohmann::ordered_json classes = nlohmann::ordered_json::array();
  for (const QuantLoadClass& c : p.classes) {
    nlohmann::ordered_json k;
    k["class"] = c.name;
    k["weight"] = c.weight;
    k["load_bytes"] = c.load_bytes;
    k["requests"] = c.requests;
    k["sectors"] = c.sectors;
    k["sectors_per_request"] = c.sectors_per_request();
    k["lines_per_request"] = c.lines_per_request();
    k["bytes_per_request"] = c.bytes_per_request();
    k["lane_bytes_per_request"] = c.lane_bytes_per_request();
    k["lane_stride_bytes"] = c.lane_stride_bytes;
    classes.push_back(k);
  }
  j["classes"] = classes;
  return j.dump();
}

}  // namespace llm
