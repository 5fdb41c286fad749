// Sector model tests: the worked figures of docs/coalescing-notes.txt (BF16, K = 4096, row-major), computed by hand
// there, plus hand-computed cases for misaligned rows, wider loads, quantized rows and bad arguments; then the
// quantized GEMV forms (analysis/quant_sector_model.h) against Nsight Compute's H200 figures and hand derivations.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "analysis/quant_sector_model.h"
#include "analysis/sector_model.h"
#include "core/error.h"
#include "core/gemv_table.h"

namespace llm {
namespace {

constexpr int64_t kK = 4096;
constexpr int64_t kN = 4096;

// The note's numpy counter, rebuilt by hand: lanes * 16 along row 0, and lanes * K * 2 (one row each).
TEST(SectorModel, CountRequestMatchesTheNotesCounter) {
  WarpRequest along_k, per_row;
  for (int j = 0; j < kWarpLanes; ++j) {
    along_k[j] = {int64_t(j) * 16, 16};
    per_row[j] = {int64_t(j) * kK * 2, 2};
  }
  EXPECT_EQ(count_request(along_k).sectors, 16);
  EXPECT_EQ(count_request(per_row).sectors, 32);
  // Lanes in reverse order touch the same sectors.
  WarpRequest reversed;
  for (int j = 0; j < kWarpLanes; ++j) reversed[j] = along_k[kWarpLanes - 1 - j];
  EXPECT_EQ(count_request(reversed).sectors, 16);
  EXPECT_EQ(count_request(reversed).lines, 4);
}

// Mapping A: lane j loads 16 B at column 8j -> one 512 B run, 16 sectors, 4 lines, every byte used.
TEST(SectorModel, NoteWarpAlongKWith16ByteLoads) {
  SectorPrediction p = predict("warp", kN, kK, WeightFormat::BF16, 16);
  EXPECT_EQ(p.first.useful_bytes, 512);
  EXPECT_EQ(p.first.sectors, 16);
  EXPECT_EQ(p.first.lines, 4);
  EXPECT_EQ(p.lane_stride_bytes, 16);
  EXPECT_DOUBLE_EQ(p.efficiency(), 1.0);
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), 16.0);
  EXPECT_EQ(p.requests_per_row, 8192 / 512);
  EXPECT_EQ(p.requests_total, kN * 16);
  EXPECT_EQ(p.matrix_bytes, 33554432);  // the note's 33.6 MB
  EXPECT_EQ(p.dram_bytes_no_reuse(), 33554432);
  EXPECT_EQ(p.dram_bytes_perfect_reuse(), 33554432);
  EXPECT_EQ(p.straddling_lanes_total, 0);
  EXPECT_EQ(p.misaligned_lanes_total, 0);
}

// Mapping B: lanes 8,192 B apart, 32 sectors for 64 useful bytes = 6.25%.
TEST(SectorModel, NoteThreadPerRow) {
  SectorPrediction p = predict("thread", kN, kK, WeightFormat::BF16);  // default: one element per load
  EXPECT_EQ(p.load_bytes, 2);
  EXPECT_EQ(p.lane_stride_bytes, 8192);
  EXPECT_EQ(p.first.sectors, 32);
  EXPECT_EQ(p.first.lines, 32);
  EXPECT_EQ(p.first.useful_bytes, 64);
  EXPECT_DOUBLE_EQ(p.efficiency(), 64.0 / 1024.0);
  EXPECT_EQ(p.requests_per_row, kK);           // one column per instruction
  EXPECT_EQ(p.requests_total, kN / 32 * kK);  // 128 warps x 4096 steps
  // Without L1 reuse every request pays 32 sectors: 16x the matrix.
  EXPECT_EQ(p.dram_bytes_no_reuse(), 16 * p.matrix_bytes);
  EXPECT_EQ(p.dram_bytes_perfect_reuse(), p.matrix_bytes);
}

// Scalar 2 B loads along K coalesce (64 B = 2 sectors, all used) but need 8x the instructions per row.
TEST(SectorModel, NoteWarpWith2ByteLoadsNeeds8xInstructions) {
  SectorPrediction narrow = predict("warp", kN, kK, WeightFormat::BF16, 2);
  SectorPrediction wide = predict("warp", kN, kK, WeightFormat::BF16, 16);
  EXPECT_EQ(narrow.first.useful_bytes, 64);
  EXPECT_EQ(narrow.first.sectors, 2);
  EXPECT_EQ(narrow.first.lines, 1);
  EXPECT_DOUBLE_EQ(narrow.efficiency(), 1.0);
  EXPECT_EQ(narrow.requests_per_row, 8 * wide.requests_per_row);
  EXPECT_EQ(narrow.requests_total, 8 * wide.requests_total);
  EXPECT_EQ(narrow.sectors_total, wide.sectors_total);  // same bytes moved, more instructions
}

// Weight stored [K, N], one thread per column: at step k the lanes read W[k, n0..n0+31] = 64 contiguous bytes.
TEST(SectorModel, NoteColumnMajorOneThreadPerColumn) {
  SectorPrediction p = predict("colmajor", kN, kK, WeightFormat::BF16);
  EXPECT_EQ(p.load_bytes, 2);
  EXPECT_EQ(p.lane_stride_bytes, 2);
  EXPECT_EQ(p.first.useful_bytes, 64);
  EXPECT_EQ(p.first.sectors, 2);
  EXPECT_DOUBLE_EQ(p.efficiency(), 1.0);
  EXPECT_EQ(p.layout.rows, kK);  // stored rows are the K rows of N weights
  EXPECT_EQ(p.requests_total, kK * (kN * 2 / 64));
}

// INT4 nibbles: one 16 B lane load carries 32 weights; a warp covers 1,024 weights of a row per instruction.
TEST(SectorModel, NoteInt4SixteenByteLoadCarries32Weights) {
  SectorPrediction p = predict("warp", kN, kK, WeightFormat::INT4, 16);
  EXPECT_EQ(p.first.useful_bytes, 512);
  EXPECT_DOUBLE_EQ(p.weights_per_request() / kWarpLanes, 32.0);
  EXPECT_DOUBLE_EQ(p.weights_per_request(), 1024.0);
  EXPECT_EQ(p.requests_per_row, kK / 1024);
  EXPECT_EQ(p.first.sectors, 16);
}

// q4_0 carries its fp16 scale inline: a row of 4096 weights is 128 blocks x 18 B = 2304 B = 4.5 warp loads.
TEST(SectorModel, Q4_0RowIsBlocksOf18Bytes) {
  SectorPrediction p = predict("warp", kN, kK, WeightFormat::Q4_0);
  EXPECT_EQ(p.load_bytes, 16);
  EXPECT_EQ(p.layout.row_bytes, 2304);
  EXPECT_EQ(p.requests_per_row, 5);  // 4 full runs of 512 B + one of 256 B
  EXPECT_NEAR(p.first.useful_bytes * 32.0 / 18.0, 910.22, 0.01);
  // Row 1 starts at 2304 = 72 x 32: rows stay sector-aligned, so nothing is fetched twice.
  EXPECT_DOUBLE_EQ(p.efficiency(), 1.0);
  SectorPrediction q8 = predict("warp", kN, kK, WeightFormat::Q8_0);
  EXPECT_EQ(q8.layout.row_bytes, 128 * 34);
}

// K = 172 BF16, packed: row 1 starts at 344 B (24 B into a sector), so every other 16 B lane load of row 1 crosses a
// sector boundary. Hand count for row 1, bytes [344, 688): lanes 0, 2, ..., 20 straddle (11), sectors 10..21 = 12.
TEST(SectorModel, MisalignedRowStartStraddlesSectors) {
  AccessPattern a = sector_access_pattern("warp", 2, 172, WeightFormat::BF16, 16);
  std::vector<RequestStats> reqs;
  for_each_request(a, [&](const WarpRequest& r) { reqs.push_back(count_request(r)); });
  ASSERT_EQ(reqs.size(), 2u);  // 344 B per row < 512 B: one request per row
  EXPECT_EQ(reqs[0].straddling_lanes, 0);
  EXPECT_EQ(reqs[0].sectors, 11);
  EXPECT_EQ(reqs[1].active_lanes, 22);  // 21 full lanes + one 8 B tail
  EXPECT_EQ(reqs[1].straddling_lanes, 11);
  EXPECT_EQ(reqs[1].sectors, 12);
  // 344 + 16j is 8 mod 16: no 16 B vector load could issue lanes 0..20; the 8 B tail at 680 is 8-aligned.
  EXPECT_EQ(reqs[1].misaligned_lanes, 21);

  SectorPrediction packed = predict("warp", 64, 172, WeightFormat::BF16, 16);
  EXPECT_GT(packed.straddling_lanes_total, 0);
  EXPECT_LT(packed.efficiency(), 1.0);
  // Padding the row to 176 elements (352 B = 11 sectors) puts every row start on a sector again.
  SectorPrediction padded = predict("warp", 64, 172, WeightFormat::BF16, 16, 352);
  EXPECT_EQ(padded.straddling_lanes_total, 0);
  EXPECT_EQ(padded.misaligned_lanes_total, 0);
  EXPECT_EQ(padded.sectors_total, 64 * 11);
}

// One thread per row with 4 B loads: 32 sectors for 128 useful bytes = 12.5%.
TEST(SectorModel, ThreadWith4ByteLoads) {
  SectorPrediction p = predict("thread", kN, kK, WeightFormat::BF16, 4);
  EXPECT_EQ(p.first.sectors, 32);
  EXPECT_EQ(p.first.useful_bytes, 128);
  EXPECT_DOUBLE_EQ(p.efficiency(), 0.125);
  EXPECT_EQ(p.requests_per_row, kK / 2);
}

// Every useful byte is read exactly once and no padding byte is read, for every mapping, on an awkward shape
// (N not a multiple of 32, K not a multiple of the warp's run, padded stride).
TEST(SectorModel, EveryUsefulByteReadExactlyOnce) {
  const int64_t N = 37, K = 172, ld = 400;
  for (const auto& m : sector_mappings()) {
    AccessPattern a = sector_access_pattern(m.name, N, K, WeightFormat::BF16, 0, ld);
    const StoredLayout& L = a.layout;
    std::vector<int> reads(size_t(L.rows * L.ld_bytes), 0);
    for_each_request(a, [&](const WarpRequest& r) {
      for (const auto& lane : r)
        for (int b = 0; b < lane.bytes; ++b) reads.at(size_t(lane.addr + b))++;
    });
    for (int64_t i = 0; i < int64_t(reads.size()); ++i) {
      bool useful = i % L.ld_bytes < L.row_bytes;
      ASSERT_EQ(reads[size_t(i)], useful ? 1 : 0) << m.name << " byte " << i;
    }
  }
}

// One table of mappings: every row of core/gemv_table.h with a BF16 form has an access pattern the sector model knows,
// in the table's order, with the table's one-line why, and no row without a BF16 form has one. A row whose access
// pattern the model does not describe fails this test.
TEST(SectorModel, EveryRegisteredMappingHasARow) {
  EXPECT_EQ(sector_mappings_missing(), std::vector<std::string>{}) << "registered in core/gemv_table.h but without "
                                                                      "an access pattern in analysis/sector_model.cpp";
  EXPECT_EQ(sector_patterns_unregistered(), std::vector<std::string>{}) << "an access pattern for a mapping "
                                                                           "core/gemv_table.h does not register";
  const auto& rows = sector_mappings();
  ASSERT_EQ(int(rows.size()), kGemvBf16Forms);
  size_t i = 0;
  for (const GemvRow& m : kGemvTable) {
    if (!m.has_bf16()) continue;
    SCOPED_TRACE(m.name);
    EXPECT_STREQ(rows[i++].name, m.name);
    const SectorMappingInfo* row = nullptr;
    EXPECT_NO_THROW(row = &find_sector_mapping(m.name));
    if (!row) continue;
    EXPECT_EQ(row, &find_sector_mapping(m.bf16));  // by name and by form: the same row
    EXPECT_EQ(row->access, m.access);
    EXPECT_STREQ(row->why, m.why);  // the table's line, not a copy
    EXPECT_TRUE(std::string(row->layout) == "row-major [N, K]" || std::string(row->layout) == "column-major [K, N]")
        << row->layout;
    EXPECT_NO_THROW(predict(m.name, 64, 256, WeightFormat::BF16));
  }
}

// The thread mapping's last warp covers rows 32..36 only: 5 active lanes.
TEST(SectorModel, PartialLastWarp) {
  SectorPrediction p = predict("thread", 37, 64, WeightFormat::BF16);
  EXPECT_EQ(p.requests_total, 2 * 64);
  EXPECT_EQ(p.lane_loads_total, 37 * 64);
  EXPECT_EQ(p.sectors_total, 37 * 64);  // rows 128 B apart: each lane its own sector
}

TEST(SectorModel, ControlVariantsMatchTheirBase) {
  auto same = [](const SectorPrediction& a, const SectorPrediction& b) {
    EXPECT_EQ(a.requests_total, b.requests_total);
    EXPECT_EQ(a.sectors_total, b.sectors_total);
    EXPECT_EQ(a.lines_total, b.lines_total);
    EXPECT_EQ(a.lane_stride_bytes, b.lane_stride_bytes);
  };
  same(predict("thread-splitk", kN, kK, WeightFormat::BF16), predict("thread", kN, kK, WeightFormat::BF16));
  same(predict("warp-few", kN, kK, WeightFormat::BF16), predict("warp", kN, kK, WeightFormat::BF16));
  same(predict("cublas", kN, kK, WeightFormat::BF16), predict("warp", kN, kK, WeightFormat::BF16, 16));
}

TEST(SectorModel, RejectsBadArguments) {
  try {
    predict("diagonal", kN, kK, WeightFormat::BF16);
    FAIL() << "unknown mapping accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warp, thread, colmajor, cublas"), std::string::npos) << e.what();
  }
  EXPECT_THROW(predict("warp", kN, kK, WeightFormat::BF16, 3), Error);
  EXPECT_THROW(predict("warp", kN, kK, WeightFormat::BF16, 32), Error);
  EXPECT_THROW(predict("thread", kN, kK, WeightFormat::BF16, 1), Error);  // half a bf16
  EXPECT_THROW(predict("cublas", kN, kK, WeightFormat::BF16, 8), Error);
  EXPECT_THROW(predict("warp", kN, 100, WeightFormat::Q4_0), Error);      // not whole blocks
  EXPECT_THROW(predict("colmajor", kN, kK, WeightFormat::Q8_0), Error);   // no [K, N] layout of blocks
  EXPECT_THROW(predict("warp", 0, kK, WeightFormat::BF16), Error);
  EXPECT_THROW(predict("warp", kN, kK, WeightFormat::BF16, 16, 100), Error);  // stride shorter than a row
  EXPECT_THROW(parse_weight_format("fp8"), Error);
  EXPECT_EQ(parse_weight_format("q4_0"), WeightFormat::Q4_0);
}

TEST(SectorModel, MarkdownTableRow) {
  std::string t = sector_table_markdown({predict("warp", kN, kK, WeightFormat::BF16),
                                         predict("thread", kN, kK, WeightFormat::BF16)});
  EXPECT_NE(t.find("| warp | 16 | 16 | 4 | 512 | 256 | 100.00 | 16 | 65536 | 33.55 | 33.55 | 16 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| thread | 2 | 32 | 32 | 64 | 32 | 6.25 | 4096 | 524288 | 536.87 | 33.55 | 8192 |"),
            std::string::npos)
      << t;
}

// The command line: bad options exit 2 with one line on stderr. Needs the gemv-sectors binary of the same build.
TEST(SectorModel, CommandLineErrorsExit2) {
  const std::string bin = std::string(LLM_BINARY_DIR) + "/gemv-sectors";
  if (!std::ifstream(bin).good()) FAIL() <<  "(every tree that runs this test builds it) " << bin << " not built (build the gemv-sectors target)";
  const std::string err = std::string(LLM_BINARY_DIR) + "/sector_model_test.stderr";
  auto status = [&](const std::string& args) {
    int rc = std::system((bin + " " + args + " >/dev/null 2>" + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  auto stderr_text = [&] {
    std::ifstream f(err);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(status("--shape 4096x4096 --dtype bf16"), 0);
  EXPECT_EQ(status("--mapping nope --shape 4096x4096 --dtype bf16"), 2);
  EXPECT_NE(stderr_text().find("known mappings are warp-r2, warp, thread"), std::string::npos) << stderr_text();
  EXPECT_EQ(status("--shape 4096by4096 --dtype bf16"), 2);
  EXPECT_NE(stderr_text().find("malformed"), std::string::npos) << stderr_text();
  EXPECT_EQ(status("--shape 4096x4096 --dtype fp8"), 2);
  EXPECT_NE(stderr_text().find("unsupported dtype 'fp8'"), std::string::npos) << stderr_text();
  EXPECT_EQ(status("--shape 4096x4096 --dtype bf16 --load-bytes 3"), 2);
  EXPECT_NE(stderr_text().find("expected one of 1, 2, 4, 8, 16"), std::string::npos) << stderr_text();
  EXPECT_EQ(status("--help"), 0);
}

}  // namespace
}  // namespace llm

// ---- the quantized GEMV forms (analysis/quant_sector_model.h) ----

namespace llm {
namespace {

// Nsight Compute on the H200, one cold launch at 14336x4096 (docs/results/gemv-bench-quant.md, tools/ncu-quant.sh,
// commit bacc727: "warp" read every chunk's x from global memory then, --warp-x global here):
// l1tex__t_sectors_pipe_lsu_mem_global_op_ld / l1tex__t_requests_pipe_lsu_mem_global_op_ld over the whole kernel.
struct NcuFigure {
  const char* quant;
  const char* mapping;
  double measured;
};
const NcuFigure kNcu[] = {
    {"q4_0", "warp", 20.50},     {"q4_0", "warp-dp4a", 9.48}, {"q4_0", "thread", 7.20},
    {"q4_0", "as-stored", 24.59}, {"q8_0", "warp", 16.33},    {"q8_0", "warp-dp4a", 8.77},
};

TEST(QuantSectorModel, ReproducesNcuAt14336x4096) {
  for (const NcuFigure& f : kNcu) {
    SCOPED_TRACE(std::string(f.quant) + " " + f.mapping);
    const QuantSectorPrediction p =
        predict_quant(f.mapping, 14336, 4096, f.quant, kQuantSectorDefaultSms, QuantWarpX::Global);
    EXPECT_NEAR(p.sectors_per_request(), f.measured, 0.01 * f.measured);
    EXPECT_EQ(p.dram_bytes(), p.bytes_read);  // ncu: DRAM bytes = the form's bytes within 0.2%
  }
}

// The kernels of today (x staged for "warp", commit 0f00c51), one cold launch each under tools/ncu-quant.sh on the H200
// (2026-12-01, docs/results/gemv-bench-quant.md "Sector model vs ncu"): the model's request and sector counts are the
// counters' exactly, split-K (4096x14336: 2 warps per row group) and the K-quants' two-level scales included.
struct NcuCounts {
  const char* quant;
  const char* mapping;
  int64_t n, k, requests, sectors;
};
const NcuCounts kNcuCounts[] = {
    {"q4_0", "warp", 14336, 4096, 123136, 1167360},       {"q4_0", "warp-dp4a", 14336, 4096, 123136, 1167360},
    {"q4_0", "thread", 14336, 4096, 573440, 4128768},     {"q4_0", "as-stored", 14336, 4096, 974848, 23969792},
    {"q8_0", "warp", 14336, 4096, 237824, 2084864},       {"q8_0", "warp-dp4a", 14336, 4096, 237824, 2084864},
    {"q8_0", "thread", 14336, 4096, 688128, 7798784},     {"q8_0", "as-stored", 14336, 4096, 1433600, 45875200},
    // Q4_K with its 16-byte heads (2026-12-06): one head load per chunk, the counts of Q4_0 (whose scale request also
    // spans 2 sectors); ncu on an H100 (tools/ncu-quant.sh) read 9.48 and 10.40 sectors per request for warp and
    // warp-dp4a, as these. The four scale planes before measured 295168 / 1282048 here (warp) and 315392 / 1605632 at
    // 4096x14336.
    {"q4_k", "warp", 14336, 4096, 123136, 1167360},       {"q4_k", "warp-dp4a", 14336, 4096, 123136, 1167360},
    {"q4_k", "thread", 14336, 4096, 573440, 4128768},     {"q4_k", "as-stored", 14336, 4096, 1433600, 22937600},
    {"q4_0", "warp", 4096, 14336, 143360, 1490944},       {"q4_0", "warp-dp4a", 4096, 14336, 143360, 1490944},
    {"q4_k", "warp", 4096, 14336, 143360, 1490944},       {"q4_k", "warp-dp4a", 4096, 14336, 143360, 1490944},
};

TEST(QuantSectorModel, CountsEqualNcuOnTodaysKernels) {
  for (const NcuCounts& f : kNcuCounts) {
    SCOPED_TRACE(std::string(f.quant) + " " + f.mapping + " " + std::to_string(f.n) + "x" + std::to_string(f.k));
    const QuantSectorPrediction p = predict_quant(f.mapping, f.n, f.k, f.quant);
    EXPECT_EQ(p.requests_total, f.requests);
    EXPECT_EQ(p.sectors_total, f.sectors);
  }
}

// Q4_0 "warp" with x from global memory, per 16-byte chunk slot and 4 rows: 4 code requests (lanes on consecutive
// chunks: 512 B = 16 sectors), 4 scale requests (consecutive fp16: 64 B = 2 sectors), 8 x requests (float4, lanes
// 128 B apart: 32 sectors).
TEST(QuantSectorModel, Q4_0WarpByHand) {
  const QuantSectorPrediction p =
      predict_quant("warp", 14336, 4096, "q4_0", kQuantSectorDefaultSms, QuantWarpX::Global);
  EXPECT_EQ(p.x_path, "global");
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), (64.0 + 8.0 + 256.0) / 16.0);
  ASSERT_EQ(p.classes.size(), 3u);
  const QuantLoadClass* codes = p.find_class("codes");
  const QuantLoadClass* scales = p.find_class("scales");
  const QuantLoadClass* x = p.find_class("x");
  ASSERT_TRUE(codes && scales && x);
  EXPECT_DOUBLE_EQ(codes->sectors_per_request(), 16.0);
  EXPECT_DOUBLE_EQ(codes->bytes_per_request(), 512.0);
  EXPECT_EQ(codes->lane_stride_bytes, 16);
  EXPECT_EQ(codes->requests, 14336 * 128 / 32);  // one per row and 32 chunks
  EXPECT_DOUBLE_EQ(scales->sectors_per_request(), 2.0);
  EXPECT_EQ(scales->requests, codes->requests);
  EXPECT_DOUBLE_EQ(x->sectors_per_request(), 32.0);
  EXPECT_EQ(x->lane_stride_bytes, 128);
  EXPECT_EQ(x->requests, 2 * codes->requests);  // 8 per slot, shared by the 4 rows
  EXPECT_EQ(p.plan.grid, 264);
  EXPECT_EQ(p.weight_bytes_touched, p.bytes_read);
  EXPECT_EQ(p.x_dram_bytes(), 4096 * 4);
}

// "thread": lanes a row apart. Per chunk: 1 code request (32 sectors), 1 scale request (32 sectors), 8 x requests at
// one address (1 sector): 72 / 10.
TEST(QuantSectorModel, Q4_0ThreadByHand) {
  const QuantSectorPrediction p = predict_quant("thread", 14336, 4096, "q4_0");
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), 7.2);
  EXPECT_DOUBLE_EQ(p.find_class("codes")->sectors_per_request(), 32.0);
  EXPECT_EQ(p.find_class("codes")->lane_stride_bytes, 2048);
  EXPECT_DOUBLE_EQ(p.find_class("scales")->sectors_per_request(), 32.0);
  EXPECT_DOUBLE_EQ(p.find_class("x")->sectors_per_request(), 1.0);
  EXPECT_DOUBLE_EQ(p.find_class("x")->bytes_per_request(), 16.0);  // a broadcast: 16 distinct bytes
  EXPECT_DOUBLE_EQ(p.find_class("x")->lane_bytes_per_request(), 512.0);
  EXPECT_EQ(p.find_class("x")->requests, 8 * p.find_class("codes")->requests);
  EXPECT_LE(p.efficiency(), 1.0);
}

// "as-stored": lane j takes 18-byte block j; 9 two-byte loads per block each spanning 32 x 18 B = 18 sectors, and 8
// float4 x loads with lanes 128 B apart (32 sectors): (9 * 18 + 8 * 32) / 17.
TEST(QuantSectorModel, Q4_0AsStoredByHand) {
  const QuantSectorPrediction p = predict_quant("as-stored", 14336, 4096, "q4_0");
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), (9.0 * 18 + 8.0 * 32) / 17.0);
  EXPECT_DOUBLE_EQ(p.find_class("d")->sectors_per_request(), 18.0);
  EXPECT_DOUBLE_EQ(p.find_class("qs")->sectors_per_request(), 18.0);
  EXPECT_EQ(p.find_class("qs")->requests, 8 * p.find_class("d")->requests);
  EXPECT_EQ(p.find_class("d")->lane_stride_bytes, 18);
  EXPECT_EQ(p.find_class("x")->requests, 8 * p.find_class("d")->requests);
  EXPECT_EQ(p.bytes_read, 14336ll * 128 * 18);
}

// "warp-dp4a": warp's code and scale requests (x comes from shared memory) plus, in each of the plan's 264 blocks,
// 32 requests of 512 contiguous bytes (16 sectors) that read all of x before quantizing it.
TEST(QuantSectorModel, WarpDp4aAddsTheBlocksXLoads) {
  const QuantSectorPrediction p = predict_quant("warp-dp4a", 14336, 4096, "q4_0");
  const QuantSectorPrediction w = predict_quant("warp", 14336, 4096, "q4_0");
  EXPECT_EQ(p.find_class("x"), nullptr);
  const QuantLoadClass* xq = p.find_class("x_quant");
  ASSERT_NE(xq, nullptr);
  EXPECT_EQ(xq->requests, int64_t(p.plan.grid) * 32);
  EXPECT_DOUBLE_EQ(xq->sectors_per_request(), 16.0);
  EXPECT_EQ(p.find_class("codes")->requests, w.find_class("codes")->requests);
  EXPECT_EQ(p.find_class("scales")->sectors, w.find_class("scales")->sectors);
  const double want = (14336.0 * 128 / 32 * (16 + 2) + 264.0 * 32 * 16) / (14336.0 * 128 / 32 * 2 + 264.0 * 32);
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), want);
  // A GPU with fewer SMs runs fewer blocks: fewer x_quant requests (16 sectors, above the weights' 9 per request),
  // so a lower average.
  const QuantSectorPrediction small = predict_quant("warp-dp4a", 14336, 4096, "q4_0", 66);
  EXPECT_LT(small.plan.grid, p.plan.grid);
  EXPECT_EQ(small.find_class("x_quant")->requests, int64_t(small.plan.grid) * 32);
  EXPECT_LT(small.sectors_per_request(), p.sectors_per_request());
}

// Today's "warp" (commit 0f00c51) stages x in shared memory while 4 k bytes fit two blocks per SM: its global loads
// are the codes, the scales and, per block, k / 4 float4 of x in requests of 512 contiguous bytes (16 sectors): the
// same requests as "warp-dp4a" at this shape. Past k = 29,056 it reads x from global memory as before.
TEST(QuantSectorModel, WarpStagesXUpToTwoBlocksPerSm) {
  for (const char* q : {"q4_0", "q8_0"}) {
    SCOPED_TRACE(q);
    const QuantSectorPrediction w = predict_quant("warp", 14336, 4096, q);
    const QuantSectorPrediction d = predict_quant("warp-dp4a", 14336, 4096, q);
    EXPECT_EQ(w.x_path, "shared");
    EXPECT_EQ(w.find_class("x"), nullptr);
    ASSERT_NE(w.find_class("x_stage"), nullptr);
    EXPECT_EQ(w.find_class("x_stage")->requests, int64_t(w.plan.grid) * 4096 / 4 / 32);
    EXPECT_DOUBLE_EQ(w.find_class("x_stage")->sectors_per_request(), 16.0);
    EXPECT_EQ(w.requests_total, d.requests_total);
    EXPECT_EQ(w.sectors_total, d.sectors_total);
  }
  EXPECT_TRUE(quant_warp_stages_x(29056));
  EXPECT_FALSE(quant_warp_stages_x(29056 + 32));
  const QuantSectorPrediction longrow = predict_quant("warp", 512, 32768, "q4_0");
  EXPECT_EQ(longrow.x_path, "global");
  EXPECT_NE(longrow.find_class("x"), nullptr);
  EXPECT_EQ(longrow.find_class("x_stage"), nullptr);
  EXPECT_EQ(predict_quant("warp", 512, 32768, "q4_0", 132, QuantWarpX::Shared).x_path, "shared");
  EXPECT_THROW(parse_quant_warp_x("l2"), Error);
}

// Q8_0 "warp" with x from global memory: 16 weights per chunk; chunk c's scale is group c >> 1, so 32 lanes read 16
// distinct fp16 = 32 B = 1 sector; x: 4 float4 per chunk, lanes 64 B apart = 32 sectors:
// (4 * 16 + 4 * 1 + 4 * 32) / 12.
TEST(QuantSectorModel, Q8_0WarpByHand) {
  const QuantSectorPrediction p =
      predict_quant("warp", 14336, 4096, "q8_0", kQuantSectorDefaultSms, QuantWarpX::Global);
  EXPECT_DOUBLE_EQ(p.sectors_per_request(), (64.0 + 4.0 + 128.0) / 12.0);
  EXPECT_DOUBLE_EQ(p.find_class("scales")->sectors_per_request(), 1.0);
  EXPECT_DOUBLE_EQ(p.find_class("scales")->bytes_per_request(), 32.0);  // 2 lanes per fp16
  EXPECT_EQ(p.find_class("x")->lane_stride_bytes, 64);
  EXPECT_EQ(p.find_class("x")->requests, p.find_class("codes")->requests);  // 4 per slot of 4 rows
}

// Every form of every type reads exactly the bytes the kernels say it reads (quant_gemv_bytes_read): the distinct
// weight bytes its loads touch, and (rows sector-aligned here) the DRAM bytes; no load leaves its plane (the model
// fails otherwise). The K-quants included.
TEST(QuantSectorModel, EveryFormReadsItsBytesOnce) {
  for (const std::string& q : quant_sector_type_names()) {
    for (const std::string& m : quant_sector_mapping_names()) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1024, 4096}, {1, 14336}, {37, 768}}) {
        SCOPED_TRACE(q + " " + m + " " + std::to_string(n) + "x" + std::to_string(k));
        const QuantSectorPrediction p = predict_quant(m, n, k, q);
        EXPECT_EQ(p.weight_bytes_touched, p.bytes_read);
        EXPECT_GE(p.dram_bytes(), p.bytes_read);
        if (n == 1024) {  // rows a whole number of sectors in every plane: no sector holds padding
          EXPECT_EQ(p.dram_bytes(), p.bytes_read);
        }
        EXPECT_EQ(p.x_bytes_touched, 4 * k);
        EXPECT_GT(p.requests_total, 0);
        EXPECT_GE(p.sectors_per_request(), 1.0);
        EXPECT_LE(p.sectors_per_request(), 32.0);
        EXPECT_GT(p.efficiency(), 0.0);
        EXPECT_LE(p.efficiency(), 1.0);
      }
    }
  }
  for (const char* q : {"q4_k", "q6_k"}) {
    for (const std::string& m : quant_sector_mapping_names()) {
      SCOPED_TRACE(std::string(q) + " " + m);
      const QuantSectorPrediction p = predict_quant(m, 14336, 4096, q);
      EXPECT_EQ(p.dram_bytes(), p.bytes_read);
      EXPECT_EQ(p.weight_bytes_touched, p.bytes_read);
    }
  }
}

// The K-quants' two-level scales on "warp": Q4_K's 32 chunks read 4 distinct 16-byte heads (8 groups each) in one
// request of 2 sectors, and nothing else per chunk; Q6_K's share 1 sector of sub-scales (32 bytes) and 1 of super d; as
// stored, Q4_K's 144-byte blocks at K = 4096 give only 16 lanes a block.
TEST(QuantSectorModel, KQuantScalesAndBlocks) {
  for (const char* type : {"q4_k", "q5_k"}) {
    const QuantSectorPrediction p = predict_quant("warp", 4096, 4096, type);
    ASSERT_NE(p.find_class("k_heads"), nullptr) << type;
    // Q4_K: 32 chunks = 4 super-blocks, 64 bytes; Q5_K (int8 codes): 16 groups = 2 heads, 32 bytes.
    EXPECT_DOUBLE_EQ(p.find_class("k_heads")->sectors_per_request(), std::string(type) == "q4_k" ? 2.0 : 1.0) << type;
    EXPECT_EQ(p.find_class("k_heads")->requests, p.find_class("codes")->requests) << type;
    for (const char* c : {"sub_scales", "super_d", "scales", "mins"}) EXPECT_EQ(p.find_class(c), nullptr) << c;
  }
  const QuantSectorPrediction q6k = predict_quant("warp", 4096, 4096, "q6_k");
  EXPECT_EQ(q6k.find_class("mins"), nullptr);
  EXPECT_EQ(q6k.find_class("k_heads"), nullptr);
  EXPECT_DOUBLE_EQ(q6k.find_class("sub_scales")->sectors_per_request(), 1.0);
  EXPECT_DOUBLE_EQ(q6k.find_class("super_d")->sectors_per_request(), 1.0);
  const QuantSectorPrediction stored = predict_quant("as-stored", 4096, 4096, "q4_k");
  EXPECT_EQ(stored.find_class("qs")->first.active_lanes, 16);
  EXPECT_DOUBLE_EQ(stored.find_class("qs")->sectors_per_request(), 16.0);  // 144 B apart: a sector each
  EXPECT_EQ(stored.find_class("qs")->requests, 32 * stored.find_class("dm")->requests);
}

// The quantized forms the model replays are the registered ones (core/gemv_table.h), and the kernels' names.
TEST(QuantSectorModel, FormsAreTheRegisteredQuantizedMappings) {
  std::vector<std::string> registered, modelled = quant_sector_mapping_names();
  for (const GemvRow& m : kGemvTable)
    if (m.has_quant()) registered.push_back(m.name);
  std::sort(registered.begin(), registered.end());
  std::sort(modelled.begin(), modelled.end());
  EXPECT_EQ(modelled, registered);
  for (const std::string& m : quant_sector_mapping_names())
    EXPECT_EQ(quant_gemv_kind_name(parse_quant_sector_mapping(m)), m);
}

TEST(QuantSectorModel, RejectsBadArguments) {
  EXPECT_THROW(predict_quant("warp", 64, 100, "q4_0"), Error);  // not whole blocks
  EXPECT_THROW(predict_quant("warp", 64, 512 + 32, "q4_k"), Error);
  EXPECT_THROW(predict_quant("warp", 0, 4096, "q4_0"), Error);
  EXPECT_THROW(predict_quant("warp", 64, 4096, "q4_0", 0), Error);
  try {
    predict_quant("colmajor", 64, 4096, "q4_0");
    FAIL() << "colmajor accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warp, warp-dp4a, thread, as-stored"), std::string::npos) << e.what();
  }
  try {
    predict_quant("warp", 64, 4096, "q3_k");
    FAIL() << "q3_k accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_quant_sector_type("Q4_K"), 12);
}

TEST(QuantSectorModel, CommandLine) {
  const std::string bin = std::string(LLM_BINARY_DIR) + "/gemv-sectors";
  if (!std::ifstream(bin).good()) FAIL() << bin << " not built (build the gemv-sectors target)";
  const std::string out = std::string(LLM_BINARY_DIR) + "/sector_model_test.quant.out";
  auto status = [&](const std::string& args) {
    int rc = std::system((bin + " " + args + " >" + out + " 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  auto text = [&] {
    std::ifstream f(out);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(status("--quant q4_0 --shape 14336x4096 --warp-x global"), 0);
  for (const char* m : {"| Q4_0 | warp | global | 264 |", "| Q4_0 | warp-dp4a | shared-int8 |", "| Q4_0 | thread |",
                        "| Q4_0 | as-stored |", "| Q4_0 | warp | codes | 16 |", "| **20.50** |"})
    EXPECT_NE(text().find(m), std::string::npos) << m << " missing from\n" << text();
  EXPECT_EQ(status("--quant q4_0 --shape 14336x4096 --mapping warp"), 0);
  EXPECT_NE(text().find("| Q4_0 | warp | x_stage | 16 |"), std::string::npos) << text();
  EXPECT_EQ(status("--dtype bf16 --shape 64x64 --warp-x global"), 2);
  EXPECT_EQ(status("--quant q4_0 --shape 64x64 --warp-x l2"), 2);
  EXPECT_EQ(status("--quant q4_0 --dtype bf16 --shape 64x64"), 2);
  EXPECT_NE(text().find("--quant and --dtype exclude each other"), std::string::npos) << text();
  EXPECT_EQ(status("--quant q4_0 --mapping colmajor --shape 64x64"), 2);
  EXPECT_NE(text().find("known quantized mappings are warp, warp-dp4a, thread, as-stored"), std::string::npos)
      << text();
  EXPECT_EQ(status("--quant q3_k --shape 64x64"), 2);
  EXPECT_EQ(status("--quant q4_0 --shape 64x64 --load-bytes 4"), 2);
  EXPECT_EQ(status("--dtype bf16 --shape 64x64 --sms 66"), 2);
  EXPECT_EQ(status("--quant q4_k --shape 64x100"), 2);
  EXPECT_EQ(status("--help"), 0);
  EXPECT_NE(text().find("--quant T"), std::string::npos);
  EXPECT_NE(text().find("--warp-x S"), std::string::npos) << text();
}

}  // namespace
}  // namespace llm
