// Small helpers shared by the GEMV benchmark apps (gemv-bench, gemv-probes, gemv-profile-target): list and shape
// parsing, number formatting. The measurement itself (event and graph timing, the roofline) is in measure/.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"  // llm::fail

namespace llm {

inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// "NxK" -> (N, K), both positive; fails naming the flag's expected form.
inline std::pair<int, int> parse_shape(const std::string& s) {
  const size_t x = s.find('x');
  char* end1 = nullptr;
  char* end2 = nullptr;
  const long n = x == std::string::npos ? 0 : std::strtol(s.c_str(), &end1, 10);
  const long k = x == std::string::npos ? 0 : std::strtol(s.c_str() + x + 1, &end2, 10);
  if (x == std::string::npos || end1 != s.c_str() + x || *end2 != '\0' || n <= 0 || k <= 0 || n > (1L << 30) ||
      k > (1L << 30))
    fail("--shapes: expected NxK with positive integers (e.g. 4096x14336), found '", s, "'");
  return {int(n), int(k)};
}

inline std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// v rounded to `decimals` places: the precision the JSON files keep (nlohmann writes the shortest exact form).
inline double rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

}  // namespace llm
