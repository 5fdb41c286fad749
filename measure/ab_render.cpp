// Renderings of an A/B run: the markdown report, CSV, JSON (written and read back) and the chart.
#include "measure/ab_render.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>  // JSON writer and reader

#include "core/error.h"       // llm::fail
#include "core/json_parse.h"  // llm::parse_json

extern char** environ;

namespace llm {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "1.234" or "n/a" for NaN.
std::string fmt_or_na(const char* f, double v) { return std::isnan(v) ? "n/a" : fmt(f, v); }

// "-0.000" reads like a sign that means something: a change below the printed precision is "+0.000".
std::string signed_ms(double v) { return fmt("%+.3f", std::fabs(v) < 5e-4 ? 0.0 : v); }

std::string basename_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

// --- markdown ----------------------------------------------------------------------------------------------------

namespace {

std::string pct_of(double part, double whole) { return whole != 0 ? fmt("%.1f%%", 100.0 * part / whole) : "n/a"; }

std::string shape_str(int64_t N, int64_t K) { return std::to_string(N) + "x" + std::to_string(K); }

const AbLaunchStats* launch_of(const AbMappingStats& m, const std::string& projection) {
  for (const auto& l : m.launches)
    if (l.launch.projection == projection) return &l;
  return nullptr;
}

std::string launch_cell(const AbLaunchStats* l) {
  if (!l || !l->known()) return "n/a";
  return std::to_string(l->launch.grid) + "x" + std::to_string(l->launch.block) + ", " +
         fmt("%.1f", l->warps_per_sm) + " warps/SM, " + fmt("%.0f", l->bytes_in_flight_per_sm) + " B/SM";
}

std::string bytes_str(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  return fmt("%.0f B", b);
}

// Whether some entry ran on the persistent path (its name ends in "@persistent").
bool any_persistent(const AbSummary& s) {
  for (const auto& m : s.mappings)
    if (m.decode == "persistent") return true;
  return false;
}

void header(std::ostringstream& os, const AbReportData& d, const AbSummary& s) {
  os << "## A/B run of GEMV mappings\n\n";
  os << "- model: " << d.model << "; device: " << d.device << " (" << d.sm_count << " SMs, " << d.max_warps_per_sm
     << " resident warps/SM at most)\n";
  if (d.depth > 0)
    os << "- protocol: a context of " << d.depth << " tokens (the prompt's " << d.prompt_tokens
       << " ids repeated; prefilled once in " << fmt("%.1f", d.depth_prefill_ms) << " ms = "
       << fmt("%.0f", d.depth_prefill_ms > 0 ? 1e3 * d.depth / d.depth_prefill_ms : 0.0)
       << " tokens/s), then exactly " << d.n_decode << " greedy decode steps from position " << d.depth;
  else
    os << "- protocol: prompt of " << d.prompt_tokens << " tokens, then exactly " << d.n_decode
       << " greedy decode steps";
  os << " (EOS ignored, seed " << d.seed << "); mappings alternate (A B C A B C ...), "
     << d.warmup << " warm-up round(s) excluded, " << d.repeats << " timed repeats each; t/s and ms/token are the "
     << "median ± sd of graph-replayed decode";
  if (any_persistent(s)) os << " (NAME@persistent: one persistent kernel per token)";
  os << ", wall clock\n";
  os << "- GEMV bytes per token: " << bytes_str(double(d.gemv_bytes_per_token)) << "; read roofline measured in this run: "
     << fmt("%.0f", s.roofline_gbps.median) << " GB/s (median of " << s.roofline_gbps.n << ", sd "
     << fmt("%.0f", s.roofline_gbps.sd) << "; " << d.roofline_method << "); weight-streaming ceiling "
     << fmt("%.1f", s.ceiling_tps) << " t/s";
  if (d.kv_bytes_per_token > 0)
    os << "; with the KV cache read at the timed steps (" << bytes_str(double(d.kv_bytes_per_token))
       << " per token) " << fmt("%.1f", s.ceiling_kv_tps) << " t/s";
  os << "\n";
  os << "- GEMV time: " << d.profiling_method << "; other = graphed ms/token - GEMV ms/token (attention, norms, "
     << "sampling, launch gaps)\n";
  os << "- sector model: sectors per warp request and useful/fetched bytes predicted by analysis/sector_model.h (BF16) "
     << "and analysis/quant_sector_model.h (weights kept quantized) over every projection matrix of a token "
     << "(bytes-weighted); launch shape shown for '" << s.launch_shape_of
     << "', the projection with the most bytes per token\n\n";
}

void main_table(std::ostringstream& os, const AbReportData& d, const AbSummary& s) {
  // llama-bench's name of the test: "tg128", or "tg128 @ d8192" at a context depth.
  const std::string test = "tg" + std::to_string(d.n_decode) + (d.depth > 0 ? " @ d" + std::to_string(d.depth) : "");
  os << "| model | mapping | test | t/s | ms/token | GEMV ms/token | other ms/token | GEMV GB/s | % roofline "
        "| sectors/req (pred.) | efficiency (pred.) | launch (" << s.launch_shape_of << ") |\n";
  os << "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& m : s.mappings) {
    os << "| " << basename_of(d.model) << " | " << m.mapping << " | " << test << " | "
       << fmt("%.2f", m.tps.median) << " ± " << fmt("%.2f", m.tps.sd) << " | " << fmt("%.3f", m.ms.median) << " ± "
       << fmt("%.3f", m.ms.sd) << " | " << fmt("%.3f", m.gemv_ms.median) << " | " << fmt("%.3f", m.other_ms) << " | "
       << fmt("%.0f", m.gemv_gbps) << " | " << fmt_or_na("%.1f", m.pct_roofline) << " | "
       << fmt_or_na("%.2f", m.sectors_per_request) << " | "
       << (std::isnan(m.sector_efficiency) ? "n/a" : fmt("%.1f", 100.0 * m.sector_efficiency) + "%") << " | "
       << launch_cell(launch_of(m, s.launch_shape_of)) << " |\n";
  }
  os << "\n";
}

// The parts of `candidates` some mapping timed, in the order given: a part no mapping timed would be a column of
// zeros (a fused run times no q, k, v, gate, up; an unfused one no qkv, gate_up; only the persistent path waits).
std::vector<int> timed_parts(const AbSummary& s, std::initializer_list<int> candidates) {
  std::vector<int> shown;
  for (int p : candidates) {
    bool timed = false;
    for (const auto& m : s.mappings) timed = timed || m.part_ms[p] > 0;
    if (timed) shown.push_back(p);
  }
  return shown;
}

// The GEMV parts shown in the per-projection tables, in step order.
std::vector<int> shown_gemv_parts(const AbSummary& s) {
  using P = ProfileParts;
  return timed_parts(s, {P::kQ, P::kK, P::kV, P::kQKV, P::kO, P::kGate, P::kUp, P::kGateUp, P::kDown, P::kHead});
}

void projection_tables(std::ostringstream& os, const AbReportData& d, const AbSummary& s) {
  // The BF16 bytes of each projection kind: what a mapping reads where its launch does not record it (JSON written
  // before AbLaunch::bytes_read).
  std::map<std::string, double> bf16_bytes;
  for (const auto& p : d.projections) bf16_bytes[p.name] = double(p.bf16_bytes_per_token());
  // The fused matrices read what their parts read.
  const auto sum_of = [&](std::initializer_list<const char*> names) {
    double b = 0;
    for (const char* n : names) {
      const auto it = bf16_bytes.find(n);
      if (it == bf16_bytes.end()) return -1.0;
      b += it->second;
    }
    return b;
  };
  const double qkv = sum_of({"q", "k", "v"}), gate_up = sum_of({"gate", "up"});
  if (qkv >= 0 && !bf16_bytes.count("qkv")) bf16_bytes["qkv"] = qkv;
  if (gate_up >= 0 && !bf16_bytes.count("gate_up")) bf16_bytes["gate_up"] = gate_up;
  // What mapping m reads per token through `part`: its launch's record, else the BF16 bytes; -1 if neither is known.
  const auto bytes_read = [&](const AbMappingStats& m, const char* part) {
    const AbLaunchStats* l = launch_of(m, part);
    if (l && l->launch.bytes_read > 0) return double(l->launch.bytes_read);
    const auto it = bf16_bytes.find(part);
    return it == bf16_bytes.end() ? -1.0 : it->second;
  };
  const std::vector<int> gemv_parts = shown_gemv_parts(s);
  // Then the rest of the step where the profile times it apart from "other", so a row adds up to the profiled
  // device time (the time budget below).
  std::vector<int> parts = gemv_parts;
  using P = ProfileParts;
  for (int p : timed_parts(s, {P::kAttention, P::kNorm, P::kWait})) parts.push_back(p);
  parts.push_back(P::kOther);
  os << "### Per projection: device ms/token (the profiling pass: 'GEMV time' above says how it times)\n\n| mapping |";
  for (int p : parts) os << " " << ProfileParts::part_name(p) << " |";
  os << " GEMV |\n| --- |";
  for (size_t i = 0; i <= parts.size(); ++i) os << " ---: |";
  os << "\n";
  for (const auto& m : s.mappings) {
    os << "| " << m.mapping << " |";
    for (int p : parts) os << " " << fmt("%.3f", m.part_ms[p]) << " |";
    os << " " << fmt("%.3f", m.gemv_ms.median) << " |\n";
  }
  os << "\n### Per projection: achieved GB/s (weight bytes the mapping reads per token: codes + scales where decode "
        "keeps them quantized / device time)\n\n| mapping |";
  for (int p : gemv_parts) os << " " << ProfileParts::part_name(p) << " |";
  os << "\n| --- |";
  for (size_t i = 0; i < gemv_parts.size(); ++i) os << " ---: |";
  os << "\n";
  for (const auto& m : s.mappings) {
    os << "| " << m.mapping << " |";
    for (int p : gemv_parts) {
      const double bytes = bytes_read(m, ProfileParts::part_name(p)), ms = m.part_ms[p];
      os << " " << (bytes < 0 || ms <= 0 ? std::string("n/a") : fmt("%.0f", bytes / (ms * 1e6))) << " |";
    }
    os << "\n";
  }
  os << "\n";
}

// Where a token's measured time goes: the device time the profile accounts for, and the rest.
void budget_table(std::ostringstream& os, const AbSummary& s) {
  os << "### Time budget per token: measured vs profiled device time\n\n";
  os << "Measured: the timed passes (median ms/token, not profiled). Profiled device: the parts above summed (on the "
        "persistent path exactly the kernel's time; on the graph path, when timed by the kernel timeline, exactly the "
        "replay's first-kernel-start to last-kernel-end span). Remainder: measured - profiled device, what the parts do not "
        "cover (launches, sampling, host; negative where the profiling pass spends device time the timed pass "
        "does not). Kernels: the kernel boundaries of one step (the graph's kernel nodes; on the persistent path its "
        "one kernel and, in brackets, the grid-wide waits between its stages, its boundaries).\n\n";
  os << "| mapping | measured ms/token | profiled device ms/token | remainder ms/token | profiled % of measured "
        "| kernels/token |\n";
  os << "| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& m : s.mappings)
    os << "| " << m.mapping << " | " << fmt("%.3f", m.ms.median) << " | " << fmt("%.3f", m.device_ms) << " | "
       << signed_ms(m.rest_ms) << " | " << pct_of(m.device_ms, m.ms.median) << " | "
       << (m.kernels_per_token > 0 ? std::to_string(m.kernels_per_token) : std::string("n/a"))
       << (m.waits_per_token > 0 ? " (" + std::to_string(m.waits_per_token) + " waits)" : std::string()) << " |\n";
  os << "\n";
}

// Decode attention beside the roofline, as the GEMV rows: the KV-cache bytes one timed step reads, and their GB/s
// where the profile times attention apart.
void attention_section(std::ostringstream& os, const AbReportData& d, const AbSummary& s) {
  if (d.kv_bytes_per_token <= 0) return;  // not recorded (JSON written before it)
  os << "### Decode attention: KV-cache bytes per token / device time\n\n";
  os << "KV cache read per token at the timed steps: " << bytes_str(double(d.kv_bytes_per_token)) << " ("
     << d.kv_dtype << " K and V of every layer, " << fmt("%.1f", d.attention_rows) << " cache rows per step on "
     << "average); at the read roofline (" << fmt("%.0f", s.roofline_gbps.median) << " GB/s) that takes "
     << fmt("%.3f", s.kv_roofline_ms) << " ms/token.\n\n";
  bool timed = false;
  for (const auto& m : s.mappings) timed = timed || !std::isnan(m.attention_ms);
  if (!timed) {
    os << "Attention time not measured: the profile does not time attention apart from 'other' (other ms/token "
          "includes it).\n\n";
    return;
  }
  os << "| mapping | attention ms/token | KV GB/s | % roofline |\n| --- | ---: | ---: | ---: |\n";
  for (const auto& m : s.mappings)
    os << "| " << m.mapping << " | " << fmt_or_na("%.3f", m.attention_ms) << " | "
       << fmt_or_na("%.0f", m.attention_gbps) << " | " << fmt_or_na("%.1f", m.attention_pct_roofline) << " |\n";
  os << "\n";
}

void launch_table(std::ostringstream& os, const AbSummary& s) {
  os << "### Launch shapes (kernels/gemv/gemv.h; warps/SM = launched warps / SMs, capped at the resident limit)\n\n";
  os << "| mapping | projections | N x K | grid x block | threads | warps/SM | bytes in flight/thread "
        "| bytes in flight/SM |\n";
  os << "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const auto& m : s.mappings) {
    // Projections of one shape launch identically: one row per shape.
    std::vector<std::pair<std::string, const AbLaunchStats*>> rows;
    for (const auto& l : m.launches) {
      bool merged = false;
      for (auto& r : rows)
        if (r.second->launch.N == l.launch.N && r.second->launch.K == l.launch.K) {
          r.first += ", " + l.launch.projection;
          merged = true;
        }
      if (!merged) rows.push_back({l.launch.projection, &l});
    }
    for (const auto& r : rows) {
      const AbLaunchStats& l = *r.second;
      os << "| " << m.mapping << " | " << r.first << " | " << shape_str(l.launch.N, l.launch.K) << " | ";
      if (!l.known()) {
        // No GEMV kernel of its own: cuBLAS picks its kernels; the persistent path's one kernel walks every projection.
        os << (m.decode == "persistent" ? "n/a (persistent kernel)" : "n/a (library)")
           << " | n/a | n/a | n/a | n/a |\n";
        continue;
      }
      os << l.launch.grid << "x" << l.launch.block << " | " << l.threads << " | " << fmt("%.2f", l.warps_per_sm)
         << " | " << l.launch.bytes_in_flight_per_thread << " | " << fmt("%.0f", l.bytes_in_flight_per_sm) << " |\n";
    }
  }
  os << "\n";
}

void overhead_table(std::ostringstream& os, const AbSummary& s) {
  os << "### Profiling pass overhead (a separate pass of the same steps, one extra sync per token)\n\n";
  os << "| mapping | measured ms/token | profiled ms/token | overhead ms/token | overhead % "
        "| profiled device ms/token | GEMV ms/token (sd) |\n";
  os << "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& m : s.mappings) {
    os << "| " << m.mapping << " | " << fmt("%.3f", m.ms.median) << " | " << fmt("%.3f", m.profiled_ms.median)
       << " | " << signed_ms(m.overhead_ms) << " | "
       << fmt_or_na("%+.1f", m.ms.median > 0 ? 100.0 * m.overhead_ms / m.ms.median : kNaN) << " | "
       << fmt("%.3f", m.device_ms) << " | " << fmt("%.3f", m.gemv_ms.median) << " (" << fmt("%.3f", m.gemv_ms.sd)
       << ") |\n";
  }
  os << "\n";
}

void attribution_table(std::ostringstream& os, const AbSummary& s) {
  if (s.attributions.empty()) return;
  os << "### Attribution against " << s.mappings[0].mapping
     << ": is the change in total time the change in GEMV time?\n\n";
  os << "Tolerance = 2 (sd_a + sd_b) of graphed ms/token + 2 (sd_a + sd_b) of GEMV ms/token + |overhead_a - "
        "overhead_b|.\n\n";
  os << "| change | Δ total ms/token | Δ GEMV ms/token | Δ rest ms/token | tolerance ms/token | GEMV share "
        "| verdict |\n";
  os << "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& a : s.attributions) {
    os << "| " << a.base << " -> " << a.mapping << " | " << signed_ms(a.d_total_ms) << " | "
       << signed_ms(a.d_gemv_ms) << " | " << signed_ms(a.d_rest_ms) << " | " << fmt("%.3f", a.tolerance_ms) << " | "
       << fmt_or_na("%.1f", 100.0 * a.gemv_share) << "% | " << (a.agrees ? "agrees" : "does NOT agree") << " |\n";
  }
  os << "\n";
}

void causes_section(std::ostringstream& os, const AbSummary& s) {
  os << "### Why `thread` is slow: uncoalesced loads vs too little parallelism\n\n";
  if (!s.causes_total.present) {
    os << "Not measured: run with `--ab thread,thread-splitk,warp-few,warp` (thread-splitk keeps thread's loads but "
          "fills the GPU; warp-few keeps warp's loads with as few warps as thread).\n\n";
    return;
  }
  const AbCauses& t = s.causes_total;
  const AbCauses& g = s.causes_gemv;
  os << "Gap thread -> warp: " << fmt("%.3f", t.gap) << " ms/token total (" << fmt("%.3f", g.gap)
     << " ms/token of GEMV). Split two ways; each sums to the whole gap.\n\n";
  os << "| decomposition | step | cause | total ms/token | % of gap | GEMV ms/token | % of GEMV gap |\n";
  os << "| --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  auto row = [&](const char* dec, const char* step, const char* cause, double vt, double vg) {
    os << "| " << dec << " | " << step << " | " << cause << " | " << fmt("%.3f", vt) << " | " << pct_of(vt, t.gap)
       << " | " << fmt("%.3f", vg) << " | " << pct_of(vg, g.gap) << " |\n";
  };
  row("A", "thread -> thread-splitk", "parallelism", t.a_parallelism, g.a_parallelism);
  row("A", "thread-splitk -> warp", "coalescing", t.a_coalescing, g.a_coalescing);
  row("B", "thread -> warp-few", "coalescing", t.b_coalescing, g.b_coalescing);
  row("B", "warp-few -> warp", "parallelism", t.b_parallelism, g.b_parallelism);
  row("mean of A and B", "", "parallelism", t.parallelism(), g.parallelism());
  row("mean of A and B", "", "coalescing", t.coalescing(), g.coalescing());
  os << "\nInteraction (A's parallelism - B's parallelism): " << fmt("%.3f", t.interaction())
     << " ms/token total; near 0 means the two causes add, large means each matters only once the other is "
        "fixed.\n\n";
}

void tokens_note(std::ostringstream& os, const AbReportData& d, const AbSummary& s) {
  os << "Tokens: ";
  for (size_t i = 0; i < s.mappings.size(); ++i) {
    const auto& m = s.mappings[i];
    os << (i ? "; " : "") << m.mapping << " "
       << (m.tokens_matching_first < 0 ? std::string("n/a")
                                       : std::to_string(m.tokens_matching_first) + "/" + std::to_string(d.n_decode + 1));
  }
  os << " leading sampled tokens (after the prompt, then after each step) equal to " << s.mappings[0].mapping
     << "'s in the last round (different summation orders may flip a near-tie).\n";
}

// --spec: the speculative passes beside the plain ones (llama.cpp's draft line, then the speed-up).
void spec_section(std::ostringstream& os, const AbReportData& d) {
  for (const auto& sp : d.spec) {
    os << "\nSpeculative decoding (--spec " << sp.drafter << ", " << sp.mapping << ", graph path; medians of "
       << d.repeats << "): " << fmt("%.1f", 1e3 / sp.ms_per_token) << " tokens/s against "
       << fmt("%.1f", 1e3 / sp.plain_ms_per_token) << " plain ("
       << fmt("%.2f", sp.plain_ms_per_token / sp.ms_per_token) << "x); n_drafted = " << sp.drafted
       << ", n_accept = " << sp.accepted << ", accept = "
       << fmt("%.3f", sp.drafted > 0 ? 100.0 * double(sp.accepted) / double(sp.drafted) : 0.0) << "%, " << sp.steps
       << " steps for " << sp.tokens << " tokens; " << sp.tokens_matching_plain << "/" << sp.tokens
       << " leading tokens equal to the plain pass's.\n";
  }
}

}  // namespace

std::string ab_markdown(const AbReportData& d, const AbSummary& s) {
  std::ostringstream os;
  header(os, d, s);
  main_table(os, d, s);
  projection_tables(os, d, s);
  budget_table(os, s);
  attention_section(os, d, s);
  launch_table(os, s);
  overhead_table(os, s);
  attribution_table(os, s);
  causes_section(os, s);
  tokens_note(os, d, s);
  spec_section(os, d);
  return os.str();
}

// --- CSV ---------------------------------------------------------------------------------------------------------

namespace {

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_num(double v) { return std::isnan(v) ? "" : fmt("%.6g", v); }

}  // namespace

std::string ab_csv(const AbReportData& d, const AbSummary& s) {
  std::ostringstream os;
  os << "model,device,mapping,n_prompt,n_decode,repeats,tps_median,tps_sd,ms_median,ms_sd,gemv_ms,gemv_ms_sd,"
        "other_ms,profiled_ms,overhead_ms,gemv_bytes_per_token,gemv_gbps,token_gbps,roofline_gbps,pct_roofline,"
        "sectors_per_request_pred,sector_efficiency_pred";
  for (int p = 0; p < ProfileParts::kParts; ++p) os << ",ms_" << ProfileParts::part_name(p);
  os << ",d_total_ms,d_gemv_ms,tolerance_ms,agrees,tokens_matching_first,depth,decode,device_ms,rest_ms\n";
  for (size_t i = 0; i < s.mappings.size(); ++i) {
    const AbMappingStats& m = s.mappings[i];
    os << csv_field(d.model) << "," << csv_field(d.device) << "," << csv_field(m.mapping) << "," << d.prompt_tokens
       << "," << d.n_decode << "," << d.repeats << "," << csv_num(m.tps.median) << "," << csv_num(m.tps.sd) << ","
       << csv_num(m.ms.median) << "," << csv_num(m.ms.sd) << "," << csv_num(m.gemv_ms.median) << ","
       << csv_num(m.gemv_ms.sd) << "," << csv_num(m.other_ms) << "," << csv_num(m.profiled_ms.median) << ","
       << csv_num(m.overhead_ms) << "," << d.gemv_bytes_per_token << "," << csv_num(m.gemv_gbps) << ","
       << csv_num(m.token_gbps) << "," << csv_num(s.roofline_gbps.median) << "," << csv_num(m.pct_roofline) << ","
       << csv_num(m.sectors_per_request) << "," << csv_num(m.sector_efficiency);
    for (int p = 0; p < ProfileParts::kParts; ++p) os << "," << csv_num(m.part_ms[p]);
    if (i == 0) {
      os << ",0,0,,,";
    } else {
      const AbAttribution& a = s.attributions[i - 1];
      os << "," << csv_num(a.d_total_ms) << "," << csv_num(a.d_gemv_ms) << "," << csv_num(a.tolerance_ms) << ","
         << (a.agrees ? "true" : "false") << ",";
    }
    os << (m.tokens_matching_first < 0 ? std::string() : std::to_string(m.tokens_matching_first)) << "," << d.depth
       << "," << m.decode << "," << csv_num(m.device_ms) << "," << csv_num(m.rest_ms) << "\n";
  }
  return os.str();
}

// --- JSON --------------------------------------------------------------------------------------------------------

namespace {

using nlohmann::json;

json num_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

json spread_json(const AbSpread& s) {
  return {{"median", s.median}, {"sd", s.sd}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

json data_json(const AbReportData& d) {
  json j;
  j["model"] = d.model;
  j["device"] = d.device;
  j["sm_count"] = d.sm_count;
  j["max_warps_per_sm"] = d.max_warps_per_sm;
  j["prompt_tokens"] = d.prompt_tokens;
  j["depth"] = d.depth;
  j["depth_prefill_ms"] = d.depth_prefill_ms;
  j["n_decode"] = d.n_decode;
  j["repeats"] = d.repeats;
  j["warmup"] = d.warmup;
  j["seed"] = d.seed;
  j["gemv_bytes_per_token"] = d.gemv_bytes_per_token;
  j["kv_dtype"] = d.kv_dtype;
  j["attention_rows"] = d.attention_rows;
  j["kv_bytes_per_token"] = d.kv_bytes_per_token;
  j["roofline_gbps"] = d.roofline_gbps;
  j["roofline_method"] = d.roofline_method;
  j["profiling_method"] = d.profiling_method;
  j["projections"] = json::array();
  for (const auto& p : d.projections)
    j["projections"].push_back({{"name", p.name}, {"N", p.N}, {"K", p.K}, {"count", p.count}, {"quant", p.quant}});
  j["runs"] = json::array();
  for (const auto& r : d.runs) {
    json jr;
    jr["mapping"] = r.mapping;
    jr["ms_per_token"] = r.ms_per_token;
    jr["profiled_ms_per_token"] = r.profiled_ms_per_token;
    jr["part_names"] = json::array();
    for (int p = 0; p < ProfileParts::kParts; ++p) jr["part_names"].push_back(ProfileParts::part_name(p));
    jr["part_ms"] = r.part_ms;
    jr["launches"] = json::array();
    for (const auto& l : r.launches)
      jr["launches"].push_back({{"projection", l.projection}, {"N", l.N}, {"K", l.K}, {"grid", l.grid},
                                {"block", l.block}, {"bytes_in_flight_per_thread", l.bytes_in_flight_per_thread},
                                {"bytes_read", l.bytes_read}});
    jr["attention_ms_per_token"] = r.attention_ms_per_token;
    jr["tokens_matching_first"] = r.tokens_matching_first;
    jr["kernels_per_token"] = r.kernels_per_token;
    jr["waits_per_token"] = r.waits_per_token;
    j["runs"].push_back(jr);
  }
  j["verify"] = json::array();
  for (const auto& v : d.verify) j["verify"].push_back({{"k", v.k}, {"ms", v.ms}, {"step_ms", v.step_ms}});
  j["spec"] = json::array();
  for (const auto& sp : d.spec)
    j["spec"].push_back({{"drafter", sp.drafter}, {"mapping", sp.mapping}, {"ms_per_token", sp.ms_per_token},
                         {"plain_ms_per_token", sp.plain_ms_per_token}, {"drafted", sp.drafted},
                         {"accepted", sp.accepted}, {"steps", sp.steps}, {"tokens", sp.tokens},
                         {"tokens_matching_plain", sp.tokens_matching_plain}});
  return j;
}

json summary_json(const AbSummary& s) {
  json j;
  j["roofline_gbps"] = spread_json(s.roofline_gbps);
  j["ceiling_tps"] = s.ceiling_tps;
  j["kv_roofline_ms"] = s.kv_roofline_ms;
  j["ceiling_kv_tps"] = s.ceiling_kv_tps;
  j["launch_shape_of"] = s.launch_shape_of;
  j["mappings"] = json::array();
  for (const auto& m : s.mappings) {
    json jm;
    jm["mapping"] = m.mapping;
    jm["decode"] = m.decode;
    jm["ms"] = spread_json(m.ms);
    jm["tps"] = spread_json(m.tps);
    jm["gemv_ms"] = spread_json(m.gemv_ms);
    jm["profiled_ms"] = spread_json(m.profiled_ms);
    jm["other_ms"] = m.other_ms;
    jm["profiled_other_ms"] = m.profiled_other_ms;
    jm["overhead_ms"] = m.overhead_ms;
    jm["device_ms"] = m.device_ms;
    jm["rest_ms"] = m.rest_ms;
    jm["kernels_per_token"] = m.kernels_per_token;
    jm["waits_per_token"] = m.waits_per_token;
    jm["part_ms"] = json::object();
    for (int p = 0; p < ProfileParts::kParts; ++p) jm["part_ms"][ProfileParts::part_name(p)] = m.part_ms[p];
    jm["gemv_gbps"] = m.gemv_gbps;
    jm["token_gbps"] = m.token_gbps;
    jm["pct_roofline"] = num_or_null(m.pct_roofline);
    jm["attention_ms"] = num_or_null(m.attention_ms);
    jm["attention_gbps"] = num_or_null(m.attention_gbps);
    jm["attention_pct_roofline"] = num_or_null(m.attention_pct_roofline);
    jm["sectors_per_request_pred"] = num_or_null(m.sectors_per_request);
    jm["sector_efficiency_pred"] = num_or_null(m.sector_efficiency);
    jm["launches"] = json::array();
    for (const auto& l : m.launches)
      jm["launches"].push_back({{"projection", l.launch.projection}, {"threads", l.threads},
                                {"warps_per_sm", l.warps_per_sm}, {"bytes_in_flight_per_sm", l.bytes_in_flight_per_sm}});
    j["mappings"].push_back(jm);
  }
  j["attributions"] = json::array();
  for (const auto& a : s.attributions)
    j["attributions"].push_back({{"base", a.base}, {"mapping", a.mapping}, {"d_total_ms", a.d_total_ms},
                                 {"d_gemv_ms", a.d_gemv_ms}, {"d_rest_ms", a.d_rest_ms},
                                 {"tolerance_ms", a.tolerance_ms}, {"gemv_share", num_or_null(a.gemv_share)},
                                 {"agrees", a.agrees}});
  auto causes_json = [](const AbCauses& c) {
    if (!c.present) return json(nullptr);
    return json{{"gap", c.gap},
                {"a_parallelism", c.a_parallelism},
                {"a_coalescing", c.a_coalescing},
                {"b_coalescing", c.b_coalescing},
                {"b_parallelism", c.b_parallelism},
                {"parallelism", c.parallelism()},
                {"coalescing", c.coalescing()},
                {"interaction", c.interaction()}};
  };
  j["causes_total_ms"] = causes_json(s.causes_total);
  j["causes_gemv_ms"] = causes_json(s.causes_gemv);
  return j;
}

}  // namespace

std::string ab_json(const AbReportData& d, const AbSummary& s) {
  json j;
  j["data"] = data_json(d);
  j["summary"] = summary_json(s);
  return j.dump(2) + "\n";
}

namespace {

// part_ms rows, matched to parts by "part_names" (files written before the fused parts have 9 columns; missing
// parts read as zero).
std::vector<PartMs> parts_from_json(const json& jr) {
  std::vector<int> index;
  if (jr.contains("part_names")) {
    for (const auto& n : jr.at("part_names")) {
      const std::string name = n.get<std::string>();
      const int found = ProfileParts::part_of(name);
      if (found < 0) fail("A/B JSON: unknown part name '", name, "'");
      index.push_back(found);
    }
  } else {
    for (int p = 0; p < ProfileParts::kParts; ++p) index.push_back(p);
  }
  std::vector<PartMs> out;
  for (const auto& row : jr.at("part_ms")) {
    const std::vector<double> v = row.get<std::vector<double>>();
    if (v.size() != index.size())
      fail("A/B JSON: a part_ms row has ", v.size(), " values, expected ", index.size(), " (one per part name)");
    PartMs a{};
    for (size_t i = 0; i < v.size(); ++i) a[size_t(index[i])] = v[i];
    out.push_back(a);
  }
  return out;
}

}  // namespace

AbReportData ab_data_from_json(const std::string& text) {
  AbReportData d;
  try {
    const json j = parse_json(text, "A/B JSON").at("data");
    d.model = j.at("model").get<std::string>();
    d.device = j.at("device").get<std::string>();
    d.sm_count = j.at("sm_count").get<int>();
    d.max_warps_per_sm = j.at("max_warps_per_sm").get<int>();
    d.prompt_tokens = j.at("prompt_tokens").get<int>();
    d.depth = j.value("depth", 0);  // absent in JSON written before --depth: no depth
    d.depth_prefill_ms = j.value("depth_prefill_ms", 0.0);
    d.n_decode = j.at("n_decode").get<int>();
    d.repeats = j.at("repeats").get<int>();
    d.warmup = j.at("warmup").get<int>();
    d.seed = j.at("seed").get<uint64_t>();
    d.gemv_bytes_per_token = j.at("gemv_bytes_per_token").get<int64_t>();
    d.kv_dtype = j.value("kv_dtype", std::string());  // absent in JSON written before the attention figures
    d.attention_rows = j.value("attention_rows", 0.0);
    d.kv_bytes_per_token = j.value("kv_bytes_per_token", int64_t(0));
    d.roofline_gbps = j.at("roofline_gbps").get<std::vector<double>>();
    d.roofline_method = j.at("roofline_method").get<std::string>();
    d.profiling_method = j.at("profiling_method").get<std::string>();
    for (const auto& p : j.at("projections"))
      d.projections.push_back({p.at("name").get<std::string>(), p.at("N").get<int64_t>(), p.at("K").get<int64_t>(),
                               p.at("count").get<int>(), p.value("quant", 0u)});  // "quant": absent before it, BF16
    for (const auto& jr : j.at("runs")) {
      AbMappingRun r;
      r.mapping = jr.at("mapping").get<std::string>();
      r.ms_per_token = jr.at("ms_per_token").get<std::vector<double>>();
      r.profiled_ms_per_token = jr.at("profiled_ms_per_token").get<std::vector<double>>();
      r.part_ms = parts_from_json(jr);
      for (const auto& l : jr.at("launches"))
        r.launches.push_back({l.at("projection").get<std::string>(), l.at("N").get<int64_t>(),
                              l.at("K").get<int64_t>(), l.at("grid").get<int>(), l.at("block").get<int>(),
                              l.at("bytes_in_flight_per_thread").get<int>(),
                              l.value("bytes_read", int64_t(0))});  // absent before it: BF16 bytes
      r.attention_ms_per_token = jr.value("attention_ms_per_token", std::vector<double>());
      r.tokens_matching_first = jr.at("tokens_matching_first").get<int>();
      r.kernels_per_token = jr.value("kernels_per_token", 0);  // absent before it: unknown
      r.waits_per_token = jr.value("waits_per_token", 0);
      d.runs.push_back(std::move(r));
    }
    if (j.contains("verify"))  // absent before it: no --verify-k
      for (const auto& v : j.at("verify"))
        d.verify.push_back({v.at("k").get<int>(), v.at("ms").get<double>(), v.at("step_ms").get<double>()});
    if (j.contains("spec"))  // absent before it: no --spec
      for (const auto& sp : j.at("spec")) {
        AbReportData::SpecRun r;
        r.drafter = sp.at("drafter").get<std::string>();
        r.mapping = sp.at("mapping").get<std::string>();
        r.ms_per_token = sp.at("ms_per_token").get<double>();
        r.plain_ms_per_token = sp.at("plain_ms_per_token").get<double>();
        r.drafted = sp.at("drafted").get<int64_t>();
        r.accepted = sp.at("accepted").get<int64_t>();
        r.steps = sp.at("steps").get<int64_t>();
        r.tokens = sp.at("tokens").get<int>();
        r.tokens_matching_plain = sp.at("tokens_matching_plain").get<int>();
        d.spec.push_back(std::move(r));
      }
  } catch (const json::exception& e) {
    fail("A/B JSON: ", printable(e.what(), 300));
  }
  return d;
}

// --- files and the chart -----------------------------------------------------------------------------------------

void ab_write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot open ", path, " for writing");
  f << text;
  f.close();
  if (!f) fail("cannot write ", path);
}

namespace {

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// tools/ab_chart.py beside the tree the executable was built in (build dirs sit in the repository), or in the
// working directory's tree.
std::string find_chart_script() {
  std::vector<std::string> candidates;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir = exe;
    for (int up = 0; up < 3; ++up) {
      const size_t slash = dir.find_last_of('/');
      if (slash == std::string::npos) break;
      dir = dir.substr(0, slash);
      candidates.push_back(dir + "/tools/ab_chart.py");
    }
  }
  candidates.push_back("tools/ab_chart.py");
  for (const auto& c : candidates)
    if (readable(c)) return c;
  fail("tools/ab_chart.py not found beside the executable or in the working directory (pass its path)");
}

}  // namespace

void ab_draw_chart(const std::string& json_path, const std::string& png_path, const std::string& script) {
  const std::string py = script.empty() ? find_chart_script() : script;
  if (!readable(py)) fail("chart script ", py, " is not readable");
  std::vector<std::string> args = {"python3", py, json_path, png_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ) != 0)
    fail("chart not drawn: cannot start python3 (install python3 and python3-matplotlib)");
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0) fail("chart not drawn: lost track of python3 ", py);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("chart not drawn: python3 ", py, " failed (status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         "; its message is above)");
}

}  // namespace llm
