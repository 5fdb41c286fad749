// Sector model of the quantized GEMV forms: replays the launch warp by warp and counts every global load request.
//
// Where each address comes from (kernels/quant/gemv_quant_device.cuh unless named):
//   warp, warp-dp4a  quant_gemv_warp_kernel: warp lane j = block * (8 / splits) + warp / splits walks row groups
//                    [j * groups / lanes, (j + 1) * groups / lanes) of R = 4 rows over its K slice; per batch b and
//                    slot u, lane l takes chunk c = c_begin + 64 b + 32 u + l (U = 2). Per row of the group: one
//                    16-byte code load (quant_load_codes) and the scale words (quant_load_scale_raw: fp16 s [and m]
//                    at group c >> group_shift; two-level: the int8 sub-scale [and sub-min] byte and the fp16 super
//                    d [and dmin] at group >> super_shift). Then, shared by the R rows, x: with QuantXGlobal,
//                    quant_chunk_fma's float4 loads (Int4: x[32c + 4q] and x[32c + 16 + 4q], q < 4; Int8:
//                    x[16c + 4q]); with kSmemX (gemv_quant_warp.cu: 4 k bytes fit two blocks per SM) each block first
//                    copies x to shared memory, thread t loading float4 t, t + 256, ... (a warp: 512 contiguous bytes),
//                    and the dots read shared memory. warp-dp4a reads x from shared memory too, after each block's
//                    warps load all of x once to quantize it (quant_x_q8_block_warps: 8 lanes per 32 values, a float4
//                    each, 4 rounds of 32 blocks of 32 per warp).
//   thread           quant_gemv_thread_kernel / quant_thread_row: lane l owns row 32 w + l; per chunk c (4 in flight)
//                    the same code and scale loads as above (lanes a row apart), then the chunk's x loads, one address
//                    for the whole warp.
//   as-stored        quant_gemv_as_stored_kernel / quant_as_stored_lane / quant_block_dot: one warp per (row, K
//                    slice), lane l takes GGUF block b_begin + l + 32 i; per block the type's 2- or 4-byte field loads
//                    (quant_ld16, quant_ld32_a2 = two 2-byte loads, quant_ld32_a4) and float4 loads of its x.
#include "analysis/quant_sector_model.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.h"

namespace llm {

// ---- names ----

namespace {

struct QuantName {
  const char* name;
  int type_id;
};
const QuantName kQuantNames[] = {
    {"q4_0", quant_type_id::kQ4_0}, {"q4_1", quant_type_id::kQ4_1}, {"q5_0", quant_type_id::kQ5_0},
    {"q5_1", quant_type_id::kQ5_1}, {"q8_0", quant_type_id::kQ8_0}, {"q4_k", quant_type_id::kQ4_K},
    {"q5_k", quant_type_id::kQ5_K}, {"q6_k", quant_type_id::kQ6_K},
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string quant_name_of(int type_id) {
  for (const QuantName& q : kQuantNames)
    if (q.type_id == type_id) return q.name;
  fail("quantized sector model: GGML type id ", type_id, " has no name");
}

}  // namespace

const std::vector<std::string>& quant_sector_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const QuantName& q : kQuantNames) v.push_back(q.name);
    return v;
  }();
  return names;
}

int parse_quant_sector_type(const std::string& name) {
  const std::string l = lower(name);
  for (const QuantName& q : kQuantNames)
    if (l == q.name) return q.type_id;
  fail("unsupported quantized type '", name, "': expected one of ", join(quant_sector_type_names()));
}

const std::vector<std::string>& quant_sector_mapping_names() {
  static const std::vector<std::string> names = {
      quant_gemv_kind_name(QuantGemvKind::Warp), quant_gemv_kind_name(QuantGemvKind::WarpDp4a),
      quant_gemv_kind_name(QuantGemvKind::Thread), quant_gemv_kind_name(QuantGemvKind::AsStored)};
  return names;
}

QuantGemvKind parse_quant_sector_mapping(const std::string& name) {
  if (const GemvRow* r = gemv_row(name); r && r->has_quant()) return r->quant;
  fail("unknown quantized mapping '", name, "': known quantized mappings are ", join(quant_sector_mapping_names()));
}

QuantWarpX parse_quant_warp_x(const std::string& name) {
  if (name == "kernel") return QuantWarpX::Kernel;
  if (name == "global") return QuantWarpX::Global;
  if (name == "shared") return QuantWarpX::Shared;
  fail("unknown x source '", name, "' for warp: expected kernel, global or shared");
}

bool quant_warp_stages_x(int64_t k) { return quant_x_smem_bytes_f32(k) <= kQuantMaxSmemBytes / kQuantWarpMinBlocks; }

// ---- the replay ----

namespace {

// Address spaces: every plane is its own allocation starting at 0 (the device planes start 256-byte aligned,
// kernels/quant/gemv_quant.cu, so sector and line counts are the same).
enum Plane : int { kCodes, kScales, kMins, kSubScales, kSuperD, kKHeads, kBlocks, kX, kCodeHi, kPlaneCount };

// Counts requests per class and the distinct bytes every plane has had read (one bit per byte, 32 per sector).
class Recorder {
 public:
  Recorder(QuantSectorPrediction* p, const int64_t (&plane_bytes)[kPlaneCount]) : p_(p) {
    for (int i = 0; i < kPlaneCount; ++i) {
      bytes_[i] = plane_bytes[i];
      masks_[i].assign(size_t((plane_bytes[i] + kSectorBytes - 1) / kSectorBytes), 0u);
    }
  }

  // Registers a class (in the order the report lists them); returns its id.
  int add_class(const char* name, Plane plane, int load_bytes) {
    QuantLoadClass c;
    c.name = name;
    c.weight = plane != kX;
    c.load_bytes = load_bytes;
    p_->classes.push_back(c);
    plane_of_.push_back(plane);
    return int(p_->classes.size()) - 1;
  }

  // One warp-level load instruction of class `cls`; no request when no lane is active.
  void issue(int cls, const WarpRequest& req) {
    int active = 0;
    for (const LaneLoad& l : req) active += l.bytes > 0;
    if (active == 0) return;
    const RequestStats s = count_request(req);
    QuantLoadClass& c = p_->classes[size_t(cls)];
    if (c.requests == 0) {
      c.first = s;
      c.lane_stride_bytes = req[0].bytes > 0 && req[1].bytes > 0 ? req[1].addr - req[0].addr : 0;
    }
    c.requests++;
    c.sectors += s.sectors;
    c.lines += s.lines;
    c.useful_bytes += distinct_bytes(req);
    c.lane_bytes += s.useful_bytes;
    c.lane_loads += s.active_lanes;
    c.straddling_lanes += s.straddling_lanes;
    c.misaligned_lanes += s.misaligned_lanes;
    const Plane plane = plane_of_[size_t(cls)];
    for (const LaneLoad& l : req)
      if (l.bytes > 0) mark(plane, l.addr, l.bytes);
  }

  // Kernel-wide totals and the distinct bytes and sectors; drops classes the launch never issued.
  void finish() {
    QuantSectorPrediction& p = *p_;
    std::vector<QuantLoadClass> kept;
    for (const QuantLoadClass& c : p.classes) {
      if (c.requests == 0) continue;
      kept.push_back(c);
      p.requests_total += c.requests;
      p.sectors_total += c.sectors;
      p.lines_total += c.lines;
      p.useful_bytes_total += c.useful_bytes;
      p.lane_bytes_total += c.lane_bytes;
      p.straddling_lanes_total += c.straddling_lanes;
      p.misaligned_lanes_total += c.misaligned_lanes;
      p.lane_loads_total += c.lane_loads;
    }
    p.classes = kept;
    for (int i = 0; i < kPlaneCount; ++i) {
      int64_t bytes = 0, sectors = 0;
      for (uint32_t m : masks_[i]) {
        bytes += __builtin_popcount(m);
        sectors += m != 0;
      }
      if (i == kX) {
        p.x_bytes_touched += bytes;
        p.x_sectors_touched += sectors;
      } else {
        p.weight_bytes_touched += bytes;
        p.weight_sectors_touched += sectors;
      }
    }
  }

 private:
  // Distinct bytes of a request (lanes that read the same address count once: broadcast).
  static int64_t distinct_bytes(const WarpRequest& req) {
    std::array<std::pair<int64_t, int64_t>, kWarpLanes> spans;
    int n = 0;
    for (const LaneLoad& l : req)
      if (l.bytes > 0) spans[size_t(n++)] = {l.addr, l.addr + l.bytes};
    if (!std::is_sorted(spans.begin(), spans.begin() + n)) std::sort(spans.begin(), spans.begin() + n);
    int64_t bytes = 0, top = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t from = std::max(spans[size_t(i)].first, top), to = spans[size_t(i)].second;
      if (to > from) bytes += to - from;
      top = std::max(top, to);
    }
    return bytes;
  }

  void mark(Plane plane, int64_t addr, int bytes) {
    if (addr < 0 || addr + bytes > bytes_[plane])
      fail("quantized sector model: a load of ", bytes, " B at ", addr, " falls outside its plane (", bytes_[plane],
           " B): the model's addresses are wrong");
    const int64_t end = addr + bytes;
    while (addr < end) {
      const int off = int(addr & 31);
      const int n = int(std::min<int64_t>(end - addr, 32 - off));
      masks_[plane][size_t(addr >> 5)] |= (n == 32 ? 0xffffffffu : ((1u << n) - 1u) << off);
      addr += n;
    }
  }

  QuantSectorPrediction* p_;
  int64_t bytes_[kPlaneCount] = {};
  std::vector<uint32_t> masks_[kPlaneCount];
  std::vector<Plane> plane_of_;
};

constexpr int kLanes = kWarpLanes;

// One lane's (row, chunk) in a prepacked-plane load instruction.
struct LaneChunk {
  int64_t row = 0;
  int64_t c = 0;
  bool on = false;
};
using LaneChunks = std::array<LaneChunk, kLanes>;

// The prepacked forms' classes and loads (warp, warp-dp4a, thread).
struct PackedLoads {
  const QuantGemvWeight& w;
  Recorder& rec;
  int group_shift, super_shift;
  int codes = -1, code_hi = -1, scales = -1, mins = -1, sub_scales = -1, super_d = -1, k_heads = -1, x = -1,
      x_stage = -1, x_quant = -1;
  int hi_bits = 0;  // Q5_K, Q6_K: 8 bytes of nibbles and 2 or 4 of high bits per chunk (QuantCodeSlot)

  // x_from_global: the dots read x from global memory; stage: "warp" copies x to shared memory first; dp4a: x loaded
  // to be quantized.
  PackedLoads(const QuantGemvWeight& weight, Recorder& r, bool x_from_global, bool stage, bool dp4a)
      : w(weight), rec(r) {
    // As quant_packed_args: chunk c's group is c >> 1 for Int8 codes with groups of 32 (Q8_0, Q5_0, Q5_1).
    group_shift = (w.family == QuantCodeFamily::Int8 && w.group == 32) ? 1 : 0;
    super_shift = !w.two_level ? 0 : w.groups_per_super == 8 ? 3 : 4;
    hi_bits = quant_gemv_hi_bits(w);
    codes = rec.add_class("codes", kCodes, hi_bits > 0 ? 8 : 16);
    if (hi_bits > 0) code_hi = rec.add_class("code_hi", kCodeHi, 2 * hi_bits);
    if (!w.two_level) {
      scales = rec.add_class("scales", kScales, 2);
      if (w.has_min) mins = rec.add_class("mins", kMins, 2);
    } else if (w.has_min) {  // Q4_K, Q5_K: one 16-byte head load (quant_load_scale_raw)
      k_heads = rec.add_class("k_heads", kKHeads, 16);
    } else {  // Q6_K, quant_load_scale_raw's order: sub-scale byte, then super d
      sub_scales = rec.add_class("sub_scales", kSubScales, 1);
      super_d = rec.add_class("super_d", kSuperD, 2);
    }
    if (x_from_global) x = rec.add_class("x", kX, 16);
    if (stage) x_stage = rec.add_class("x_stage", kX, 16);
    if (dp4a) x_quant = rec.add_class("x_quant", kX, 16);
  }

  // The code loads and the scale loads of one slot (QuantCodeSlot::load, quant_load_scale_raw).
  void weights(const LaneChunks& lanes) {
    WarpRequest req;
    auto one = [&](int cls, auto addr_of, int bytes) {
      for (int l = 0; l < kLanes; ++l)
        req[size_t(l)] = lanes[size_t(l)].on ? LaneLoad{addr_of(lanes[size_t(l)]), bytes} : LaneLoad{};
      rec.issue(cls, req);
    };
    if (hi_bits > 0) {  // QuantCodeSlot<1 or 2>::load: the nibbles, then the high bits
      one(codes, [&](const LaneChunk& a) { return a.row * w.ld_codes + 8 * a.c; }, 8);
      one(code_hi, [&](const LaneChunk& a) { return a.row * w.ld_hi + 2 * hi_bits * a.c; }, 2 * hi_bits);
    } else {
      one(codes, [&](const LaneChunk& a) { return a.row * w.ld_codes + 16 * a.c; }, 16);
    }
    if (!w.two_level) {
      auto at = [&](const LaneChunk& a) { return 2 * (a.row * w.ld_groups + (a.c >> group_shift)); };
      one(scales, at, 2);
      if (w.has_min) one(mins, at, 2);
    } else if (w.has_min) {
      one(k_heads, [&](const LaneChunk& a) { return a.row * w.ld_heads + 16 * ((a.c >> group_shift) >> 3); }, 16);
    } else {
      auto sub = [&](const LaneChunk& a) { return a.row * w.ld_sub + (a.c >> group_shift); };
      auto sup = [&](const LaneChunk& a) { return 2 * (a.row * w.ld_super + ((a.c >> group_shift) >> super_shift)); };
      one(sub_scales, sub, 1);
      one(super_d, sup, 2);
    }
  }

  // quant_chunk_fma's x loads of each lane's chunk (kVecX: float4 loads), in its order.
  void x_loads(const LaneChunks& lanes) {
    WarpRequest req;
    auto one = [&](int64_t (*float_of)(int64_t c, int q), int q) {
      for (int l = 0; l < kLanes; ++l)
        req[size_t(l)] = lanes[size_t(l)].on ? LaneLoad{4 * float_of(lanes[size_t(l)].c, q), 16} : LaneLoad{};
      rec.issue(x, req);
    };
    for (int q = 0; q < 4; ++q) {
      if (w.family == QuantCodeFamily::Int4) {
        one([](int64_t c, int qq) { return 32 * c + 4 * qq; }, q);       // xl: low nibbles
        one([](int64_t c, int qq) { return 32 * c + 16 + 4 * qq; }, q);  // xh: high nibbles
      } else {
        one([](int64_t c, int qq) { return 16 * c + 4 * qq; }, q);
      }
    }
  }

  // warp-dp4a: warp `warp`'s loads of all of x before quantizing it (quant_x_q8_block_warps): rounds of 32 blocks
  // of 32 values per block of threads, a warp taking 4 of them (8 lanes each), kUnroll = 4 rounds per iteration.
  void x_quant_loads(int warp) {
    const int64_t nb = w.k / 32;
    constexpr int kStep = kQuantWarpsPerBlock * 4, kUnroll = 4;
    WarpRequest req;
    for (int64_t base = int64_t(warp) * 4; base < nb; base += kStep * kUnroll) {
      for (int u = 0; u < kUnroll; ++u) {
        for (int l = 0; l < kLanes; ++l) {
          const int64_t b = base + u * kStep + (l >> 3);
          req[size_t(l)] = b < nb ? LaneLoad{4 * (32 * b + 4 * (l & 7)), 16} : LaneLoad{};
        }
        rec.issue(x_quant, req);
      }
    }
  }

  // "warp" with kSmemX: warp `warp`'s loads of x into shared memory (thread t of the block loads float4 t, t + 256,
  // ... of the k / 4).
  void x_stage_loads(int warp) {
    const int64_t words = w.k / 4;
    WarpRequest req;
    for (int64_t i0 = int64_t(warp) * kLanes; i0 < words; i0 += kQuantGemvThreads) {
      for (int l = 0; l < kLanes; ++l) req[size_t(l)] = i0 + l < words ? LaneLoad{16 * (i0 + l), 16} : LaneLoad{};
      rec.issue(x_stage, req);
    }
  }
};

void replay_warp(const QuantGemvWeight& w, const QuantGemvPlan& plan, bool dp4a, bool stage, Recorder& rec) {
  PackedLoads loads(w, rec, !dp4a && !stage, stage, dp4a);
  constexpr int R = kQuantWarpRows;
  const int U = quant_warp_unroll(quant_gemv_hi_bits(w));  // the kernel's ring slots per row
  const int64_t chunks = quant_gemv_chunks(w);
  const int splits = plan.splits;
  for (int64_t block = 0; block < plan.grid; ++block) {
    for (int warp = 0; warp < kQuantWarpsPerBlock; ++warp) {
      const int64_t j = block * (kQuantWarpsPerBlock / splits) + warp / splits;
      const int64_t slice = warp % splits;
      const int64_t c_begin = std::min<int64_t>(chunks, slice * plan.slice_units);
      const int64_t c_end = std::min<int64_t>(chunks, c_begin + plan.slice_units);
      const int64_t batches = std::max<int64_t>(1, (c_end - c_begin + 32 * U - 1) / (32 * U));
      const int64_t g_begin = j < plan.lanes ? j * plan.row_groups / plan.lanes : 0;
      const int64_t g_end = j < plan.lanes ? (j + 1) * plan.row_groups / plan.lanes : 0;
      if (dp4a) loads.x_quant_loads(warp);  // every warp of every block, its ring's first loads in flight
      if (stage) loads.x_stage_loads(warp);
      for (int64_t g = g_begin; g < g_end; ++g) {
        for (int64_t b = 0; b < batches; ++b) {
          for (int u = 0; u < U; ++u) {
            LaneChunks lanes;
            for (int l = 0; l < kLanes; ++l) {
              lanes[size_t(l)].c = c_begin + b * 32 * U + 32 * u + l;
              lanes[size_t(l)].on = lanes[size_t(l)].c < c_end;
            }
            for (int i = 0; i < R; ++i) {  // fill: rows past n load nothing
              const int64_t row = g * R + i;
              if (row >= w.n) continue;
              LaneChunks r = lanes;
              for (LaneChunk& a : r) a.row = row;
              loads.weights(r);
            }
            if (!dp4a && !stage) loads.x_loads(lanes);  // the chunk's x from global memory, shared by the R rows
          }
        }
      }
    }
  }
}

void replay_thread(const QuantGemvWeight& w, Recorder& rec) {
  PackedLoads loads(w, rec, true, false, false);
  constexpr int U = kQuantThreadUnroll;
  const int64_t chunks = quant_gemv_chunks(w);
  for (int64_t row0 = 0; row0 < w.n; row0 += kLanes) {  // one warp per 32 rows; threads past n return at once
    for (int64_t c0 = 0; c0 < chunks; c0 += U) {
      for (int u = 0; u < U && c0 + u < chunks; ++u) {
        LaneChunks lanes;
        for (int l = 0; l < kLanes; ++l) lanes[size_t(l)] = {row0 + l, c0 + u, row0 + l < w.n};
        loads.weights(lanes);
      }
      for (int u = 0; u < U && c0 + u < chunks; ++u) {
        LaneChunks lanes;
        for (int l = 0; l < kLanes; ++l) lanes[size_t(l)] = {row0 + l, c0 + u, row0 + l < w.n};
        loads.x_loads(lanes);  // one address across the warp
      }
    }
  }
}

// One field load of a GGUF block in quant_block_dot: `bytes` at byte `offset` of the block.
struct FieldLoad {
  const char* field;
  int offset;
  int bytes;
};

// quant_block_dot's loads per type: the block's field loads, then the float offsets (within the block's x) of its
// float4 x loads. quant_ld32_a2 is two 2-byte loads; quant_ld16 one; quant_ld32_a4 one 4-byte load.
void as_stored_loads(int type_id, std::vector<FieldLoad>* f, std::vector<int>* xs) {
  using namespace quant_type_id;
  auto a2 = [&](const char* field, int off) {  // quant_ld32_a2
    f->push_back({field, off, 2});
    f->push_back({field, off + 2, 2});
  };
  auto x_q4 = [&] {  // xl = x[4q], xh = x[16 + 4q]
    for (int q = 0; q < 4; ++q) {
      xs->push_back(4 * q);
      xs->push_back(16 + 4 * q);
    }
  };
  switch (type_id) {
    case kQ4_0:  // fp16 d, qs[16]
      f->push_back({"d", 0, 2});
      for (int q = 0; q < 4; ++q) a2("qs", 2 + 4 * q);
      x_q4();
      return;
    case kQ4_1:  // fp16 d, fp16 m, qs[16]
      f->push_back({"dm", 0, 4});
      for (int q = 0; q < 4; ++q) f->push_back({"qs", 4 + 4 * q, 4});
      x_q4();
      return;
    case kQ5_0:  // fp16 d, qh[4], qs[16]
      f->push_back({"d", 0, 2});
      a2("qh", 2);
      for (int q = 0; q < 4; ++q) a2("qs", 6 + 4 * q);
      x_q4();
      return;
    case kQ5_1:  // fp16 d, fp16 m, qh[4], qs[16]
      f->push_back({"dm", 0, 4});
      f->push_back({"qh", 4, 4});
      for (int q = 0; q < 4; ++q) f->push_back({"qs", 8 + 4 * q, 4});
      x_q4();
      return;
    case kQ8_0:  // fp16 d, qs[32]
      f->push_back({"d", 0, 2});
      for (int q = 0; q < 8; ++q) a2("qs", 2 + 4 * q);
      for (int q = 0; q < 8; ++q) xs->push_back(4 * q);
      return;
    case kQ4_K:  // fp16 d, fp16 dmin, scales[12], qs[128]
      f->push_back({"dm", 0, 4});
      for (int i = 0; i < 3; ++i) f->push_back({"scales", 4 + 4 * i, 4});
      for (int c = 0; c < 4; ++c)
        for (int t = 0; t < 8; ++t) {
          f->push_back({"qs", 16 + 32 * c + 4 * t, 4});
          xs->push_back(64 * c + 4 * t);
          xs->push_back(64 * c + 32 + 4 * t);
        }
      return;
    case kQ5_K:  // fp16 d, fp16 dmin, scales[12], qh[32], qs[128]: per code word its qh word (the kernel's order)
      f->push_back({"dm", 0, 4});
      for (int i = 0; i < 3; ++i) f->push_back({"scales", 4 + 4 * i, 4});
      for (int c = 0; c < 4; ++c)
        for (int t = 0; t < 8; ++t) {
          f->push_back({"qs", 48 + 32 * c + 4 * t, 4});
          f->push_back({"qh", 16 + 4 * t, 4});
          xs->push_back(64 * c + 4 * t);
          xs->push_back(64 * c + 32 + 4 * t);
        }
      return;
    case kQ6_K:  // ql[128], qh[64], int8 scales[16], fp16 d
      f->push_back({"d", 208, 2});
      for (int i = 0; i < 4; ++i) a2("scales", 192 + 4 * i);
      for (int h = 0; h < 2; ++h)
        for (int is = 0; is < 2; ++is)
          for (int l4 = 0; l4 < 4; ++l4) {
            const int l = 16 * is + 4 * l4;
            a2("ql", 64 * h + l);
            a2("ql", 64 * h + 32 + l);
            a2("qh", 128 + 32 * h + l);
            for (int t = 0; t < 4; ++t) xs->push_back(128 * h + 32 * t + l);
          }
      return;
  }
  fail("quantized sector model 'as-stored': no block loads for GGML type id ", type_id);
}

void replay_as_stored(const QuantGemvWeight& w, const QuantGemvPlan& plan, Recorder& rec) {
  std::vector<FieldLoad> fields;
  std::vector<int> xs;
  as_stored_loads(w.type_id, &fields, &xs);
  // Classes in the order of the fields' first appearance in the block, then x.
  std::vector<std::string> names;
  std::vector<int> ids;
  std::vector<int> cls(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    auto it = std::find(names.begin(), names.end(), fields[i].field);
    if (it == names.end()) {
      names.push_back(fields[i].field);
      ids.push_back(rec.add_class(fields[i].field, kBlocks, fields[i].bytes));
      it = names.end() - 1;
    }
    cls[i] = ids[size_t(it - names.begin())];
  }
  const int x = rec.add_class("x", kX, 16);
  const int splits = plan.splits;
  WarpRequest req;
  for (int64_t block = 0; block < plan.grid; ++block) {
    for (int warp = 0; warp < kQuantWarpsPerBlock; ++warp) {
      // quant_warp_coords with one row per warp
      const int64_t row = block * (kQuantWarpsPerBlock / splits) + warp / splits;
      const int64_t slice = warp % splits;
      const int64_t begin = std::min<int64_t>(plan.units, slice * plan.slice_units);
      const int64_t end = plan.units - begin < plan.slice_units ? plan.units : begin + plan.slice_units;
      if (row >= w.n) continue;
      for (int64_t j0 = begin; j0 < end; j0 += kLanes) {
        for (size_t i = 0; i < fields.size(); ++i) {
          for (int l = 0; l < kLanes; ++l) {
            const int64_t j = j0 + l;
            req[size_t(l)] = j < end ? LaneLoad{row * w.row_bytes + j * w.block_bytes + fields[i].offset,
                                                fields[i].bytes}
                                     : LaneLoad{};
          }
          rec.issue(cls[i], req);
        }
        for (int xo : xs) {
          for (int l = 0; l < kLanes; ++l) {
            const int64_t j = j0 + l;
            req[size_t(l)] = j < end ? LaneLoad{4 * (j * w.block_weights + xo), 16} : LaneLoad{};
          }
          rec.issue(x, req);
        }
      }
    }
  }
}

}  // namespace

// ---- prediction ----

QuantSectorPrediction predict_quant(const std::string& mapping, int64_t N, int64_t K, const std::string& quant,
                                    int sm_count, QuantWarpX warp_x) {
  return predict_quant(parse_quant_sector_mapping(mapping), N, K, parse_quant_sector_type(quant), sm_count, warp_x);
}

QuantSectorPrediction predict_quant(QuantGemvKind kind, int64_t N, int64_t K, int type_id, int sm_count,
                                    QuantWarpX warp_x) {
  QuantSectorPrediction p;
  p.kind = kind;
  p.type_id = type_id;
  p.mapping = quant_gemv_kind_name(p.kind);
  p.quant = quant_name_of(p.type_id);
  if (N <= 0 || K <= 0) fail("shape ", N, "x", K, ": expected positive N and K");
  if (N >= (int64_t(1) << 31) || K >= (int64_t(1) << 31)) fail("shape ", N, "x", K, ": N and K must be below 2^31");
  if (sm_count <= 0) fail("SM count ", sm_count, ": expected a positive number");
  const QuantTypeTraits t = quant_type_traits(p.type_id);
  if (K % t.block_weights != 0)
    fail("shape ", N, "x", K, ": ", p.quant, " needs K to be a multiple of ", t.block_weights, " (its block size)");
  p.N = N;
  p.K = K;
  p.sm_count = sm_count;
  p.weight = quant_gemv_describe(p.type_id, N, K);
  p.plan = quant_gemv_plan(p.kind, p.weight, sm_count);
  p.bytes_read = quant_gemv_bytes_read(p.kind, p.weight);

  const QuantGemvPlaneBytes pb = quant_gemv_plane_bytes(p.weight);
  const bool stored = p.kind == QuantGemvKind::AsStored;
  int64_t planes[kPlaneCount] = {};
  planes[kCodes] = stored ? 0 : int64_t(pb.codes);
  planes[kCodeHi] = stored ? 0 : int64_t(pb.code_hi);
  planes[kScales] = stored ? 0 : int64_t(pb.scales);
  planes[kMins] = stored ? 0 : int64_t(pb.mins);
  planes[kSubScales] = stored ? 0 : int64_t(pb.sub_scales);
  planes[kSuperD] = stored ? 0 : int64_t(pb.super_d);
  planes[kKHeads] = stored ? 0 : int64_t(pb.k_heads);
  planes[kBlocks] = stored ? int64_t(pb.blocks) : 0;
  planes[kX] = 4 * K;
  Recorder rec(&p, planes);
  const bool stage = warp_x == QuantWarpX::Shared || (warp_x == QuantWarpX::Kernel && quant_warp_stages_x(K));
  switch (p.kind) {
    case QuantGemvKind::Warp:
      p.x_path = stage ? "shared" : "global";
      replay_warp(p.weight, p.plan, false, stage, rec);
      break;
    case QuantGemvKind::WarpDp4a:
      p.x_path = "shared-int8";
      replay_warp(p.weight, p.plan, true, false, rec);
      break;
    case QuantGemvKind::Thread:
      p.x_path = "global";
      replay_thread(p.weight, rec);
      break;
    case QuantGemvKind::AsStored:
      p.x_path = "global";
      replay_as_stored(p.weight, p.plan, rec);
      break;
  }
  rec.finish();
  return p;
}

double QuantSectorPrediction::efficiency() const {
  return sectors_total ? double(useful_bytes_total) / double(sectors_total * kSectorBytes) : 0.0;
}

const QuantLoadClass* QuantSectorPrediction::find_class(const std::string& name) const {
  for (const QuantLoadClass& c : classes)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace llm
