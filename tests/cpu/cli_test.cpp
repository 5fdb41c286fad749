// apps/cli.h, the command-line helper of every app: option values, number ranges and their messages, and which
// failures are bad usage (exit 2, with the --help hint). The apps' own runs are in user_errors_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/cli.h"

namespace llm::cli {
namespace {

// The message of the UsageError f throws ("" and a test failure when it throws none or another type).
template <typename F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  } catch (...) {
    ADD_FAILURE() << "not a UsageError";
    return "";
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

TEST(Cli, ValueTakesTheNextArgumentOrSaysItIsMissing) {
  std::vector<std::string> args = {"prog", "-n", "5", "--seed"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  int i = 1;
  EXPECT_EQ(value(int(argv.size()), argv.data(), i, "-n"), "5");
  EXPECT_EQ(i, 2);
  i = 3;
  EXPECT_EQ(usage_message([&] { value(int(argv.size()), argv.data(), i, "--seed"); }), "--seed needs a value");
}

TEST(Cli, ParseIntChecksTheWholeTextAndTheRange) {
  EXPECT_EQ(parse_int("-n", "42", 1, 1000000), 42);
  EXPECT_EQ(parse_int("-s", "4611686018427387904", 0, 1LL << 62), 1LL << 62);
  EXPECT_EQ(usage_message([] { parse_int("-n", "0", 1, 1000000); }), "-n: invalid value '0' (allowed: 1 to 1000000)");
  EXPECT_EQ(usage_message([] { parse_int("--top-k", "-3", 0, 1 << 24, "0 to 16777216, 0 = all"); }),
            "--top-k: invalid value '-3' (allowed: 0 to 16777216, 0 = all)");
  for (const char* bad : {"", "5x", "1.0", "99999999999999999999999"})
    EXPECT_NE(usage_message([&] { parse_int("-r", bad, 1, 1000); }).find("-r: invalid value '"), std::string::npos)
        << bad;
}

TEST(Cli, ParseFloatChecksTheRangeAndItsOpenEnd) {
  EXPECT_DOUBLE_EQ(parse_float("--temp", "0", 0.0, 100.0, "0 to 100"), 0.0);
  EXPECT_DOUBLE_EQ(parse_float("--top-p", "1", 0.0, 1.0, "greater than 0, at most 1", Lower::open), 1.0);
  EXPECT_EQ(usage_message([] { parse_float("--top-p", "1.5", 0.0, 1.0, "greater than 0, at most 1", Lower::open); }),
            "--top-p: invalid value '1.5' (allowed: greater than 0, at most 1)");
  EXPECT_EQ(usage_message([] { parse_float("--top-p", "0", 0.0, 1.0, "greater than 0, at most 1", Lower::open); }),
            "--top-p: invalid value '0' (allowed: greater than 0, at most 1)");
  EXPECT_EQ(usage_message([] { parse_float("--temp", "-1", 0.0, 100.0, "0 to 100"); }),
            "--temp: invalid value '-1' (allowed: 0 to 100)");
  for (const char* bad : {"", "nan", "1e999", "0.5x"})
    EXPECT_NE(usage_message([&] { parse_float("--temp", bad, 0.0, 100.0, "0 to 100"); }), "") << bad;
}

TEST(Cli, ErrorsWhileParsingAreBadUsageAndOthersAreNot) {
  EXPECT_EQ(usage_message([] { as_usage([] { fail("--ab: unknown GEMV mapping 'x'"); }); }),
            "--ab: unknown GEMV mapping 'x'");
  EXPECT_EQ(as_usage([] { return 7; }), 7);
  std::vector<std::string> args = {"prog"};
  std::vector<char*> argv = {args[0].data()};
  const auto parse_fails = [](int, char**) -> int { fail("--shape NxK is required"); };
  const auto parse_ok = [](int, char**) { return 3; };
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_fails, [](int) { return 0; }), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "error: --shape NxK is required\nrun 'prog --help' for the options\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_ok, [](int) -> int { fail("model\x1b[31m gone"); }), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "error: model\\x1b[31m gone\n");
  EXPECT_EQ(run_main("prog", 1, argv.data(), parse_ok, [](int v) { return v; }), 3);
}

}  // namespace
}  // namespace llm::cli
