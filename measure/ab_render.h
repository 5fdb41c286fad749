// Renderings of an A/B run (measure/ab_data.h) and its statistics (measure/ab_stats.h): the llama-bench-style
// markdown report, one CSV row per mapping, the JSON that keeps every measurement (read back by ab_data_from_json)
// and is the chart's data, and the PNG chart drawn from that JSON by tools/ab_chart.py. Host code only.
#pragma once
#include <string>

#include "measure/ab_data.h"
#include "measure/ab_stats.h"

namespace llm {

// The whole report: the llama-bench-style table, per-projection breakdown, launch shapes, attribution, two causes.
std::string ab_markdown(const AbReportData& d, const AbSummary& s);
// One row per mapping, a header line first.
std::string ab_csv(const AbReportData& d, const AbSummary& s);
// {"data": <every measurement>, "summary": <what the report derives>}; ab_data_from_json reads "data" back.
std::string ab_json(const AbReportData& d, const AbSummary& s);
AbReportData ab_data_from_json(const std::string& text);

// Writes text to path; throws llm::Error naming the path on failure.
void ab_write_file(const std::string& path, const std::string& text);
// Runs `python3 script json_path png_path` (tools/ab_chart.py); throws llm::Error with the script's message when it
// fails (e.g. matplotlib missing). script "" = found beside the executable's tree or the working directory.
void ab_draw_chart(const std::string& json_path, const std::string& png_path, const std::string& script = "");

}  // namespace llm
