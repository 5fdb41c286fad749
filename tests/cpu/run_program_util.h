// The built programs as child processes, for the tests that check what a user sees: one spawn-and-capture helper
// (no shell: arguments pass through unquoted) and the one check of a run-llama refusal.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "models_test_util.h"  // TempDir, read_file

extern char** environ;

namespace llm_test {

struct ProgramRun {
  bool exited = false;  // false: killed by a signal (a crash, an abort, a sanitizer trap)
  int code = -1;        // exit status, or -signal
  std::string out, err;
  double seconds = 0;   // wall time of the child
};

// Runs `exe` with `args`, stdin from `stdin_path`, capturing stdout and stderr through files in `tmp`.
inline ProgramRun run_program(const std::string& exe, const std::vector<std::string>& args, const TempDir& tmp,
                              const std::string& stdin_path = "/dev/null") {
  const std::string out_path = tmp.str("stdout.txt"), err_path = tmp.str("stderr.txt");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, stdin_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ProgramRun r;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return r;
  int st = 0;
  waitpid(pid, &st, 0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exited = WIFEXITED(st);
  r.code = r.exited ? WEXITSTATUS(st) : -WTERMSIG(st);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

// --help text with each wrapped line joined to the one before (a line break and the indentation after it read as one
// space): --help wraps its options' help where apps/cli.h's table says, so tests look for wording, not line breaks.
inline std::string unwrapped(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] == ' ') {
      out += ' ';
      while (i + 1 < s.size() && s[i + 1] == ' ') ++i;
      continue;
    }
    out += s[i];
  }
  return out;
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// A run-llama refusal: exit `code` (1 = bad model or input, 2 = bad command line), nothing on stdout, and on stderr
// exactly one "error: " line holding every needle. Besides it only run-llama's own "run-llama: " progress lines may
// appear (and, for usage errors, the fixed hint after it): a sanitizer report or a second message fails the test.
inline void expect_run_llama_refused(const std::string& exe, const std::vector<std::string>& args, int code,
                                     std::initializer_list<std::string> needles, const TempDir& tmp) {
  std::string cmd = "run-llama";
  for (const std::string& a : args) cmd += " " + a;
  SCOPED_TRACE(cmd);
  const ProgramRun r = run_program(exe, args, tmp);
  ASSERT_TRUE(r.exited) << "killed by signal " << -r.code << "\n" << r.err;
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.out, "");
  std::vector<std::string> err = lines(r.err);
  if (code == 2) {
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.back(), "run 'run-llama --help' for the options") << r.err;
    err.pop_back();
  }
  ASSERT_FALSE(err.empty()) << r.err;
  const std::string msg = err.back();
  EXPECT_EQ(msg.rfind("error: ", 0), 0u) << r.err;
  err.pop_back();
  for (const std::string& l : err) EXPECT_EQ(l.rfind("run-llama: ", 0), 0u) << "unexpected stderr line: " << l;
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

}  // namespace llm_test
