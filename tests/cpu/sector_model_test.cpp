// Sector model tests: the worked figures of docs/coalescing-notes.txt (BF16, K = 4096, row-major), computed by hand
// there, plus hand-computed cases for misaligned rows, wider loads, quantized rows and bad arguments.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "analysis/sector_model.h"
#include "core/error.h"
#include "core/gemv_names.h"

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

// One list of mappings: every mapping registered in core/gemv_names.h has a sector-model row (its access pattern),
// in the registry's order, and the sector model describes nothing that is not registered. Adding a mapping without
// a row here fails this test.
TEST(SectorModel, EveryRegisteredMappingHasARow) {
  EXPECT_EQ(sector_mappings_missing(), std::vector<std::string>{}) << "registered in core/gemv_names.h but without "
                                                                      "an access pattern in analysis/sector_model.cpp";
  EXPECT_EQ(sector_patterns_unregistered(), std::vector<std::string>{}) << "an access pattern for a mapping "
                                                                           "core/gemv_names.h does not register";
  const auto& rows = sector_mappings();
  ASSERT_EQ(int(rows.size()), kGemvMappingCount);
  for (int i = 0; i < kGemvMappingCount; ++i) {
    const GemvMappingName& m = kGemvMappingNames[i];
    SCOPED_TRACE(m.name);
    EXPECT_STREQ(rows[size_t(i)].name, m.name);
    const SectorMappingInfo* row = nullptr;
    EXPECT_NO_THROW(row = &find_sector_mapping(m.name));
    if (!row) continue;
    EXPECT_GT(std::string(row->why).size(), 10u);
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
