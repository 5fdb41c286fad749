#!/usr/bin/env bash
# run-llama --chat end to end on the CPU path with a real model: in a real pseudo-terminal driven through tmux
# (streamed reply on screen, Ctrl-C stops a long reply and the prompt returns, /stats, /reset, Ctrl-D exits 0,
# Ctrl-C at the prompt exits 0) and through a pipe (the line protocol of chat/repl.h: one stdout record per turn).
# usage: chat_pty_test.sh RUN_LLAMA SOURCE_DIR   (exit 77 = skipped: no tmux or no model)
set -euo pipefail
bin=$1
src=$2
smol=$src/models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
stories=$src/tests/data/models/stories260K
wait_s=${LLM_CHAT_TEST_WAIT_S:-300}  # per wait: the CPU reference runs SmolLM2 at a few tokens/s (slower sanitized)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${screen_file:-}" ] && [ -f "$screen_file" ] && cat "$screen_file" >&2; exit 1; }

command -v tmux >/dev/null || skip "tmux is not installed"
if [ -f "$smol" ] && [ "${LLM_CHAT_TEST_SMALL_MODEL:-0}" != 1 ]; then
  model=(--model "$smol")
  smol_present=1
elif [ "${LLM_REQUIRE_MODELS:-0}" = 1 ] && [ "${LLM_CHAT_TEST_SMALL_MODEL:-0}" != 1 ]; then
  fail "$smol is missing (LLM_REQUIRE_MODELS=1): run scripts/setup.sh to fetch SmolLM2"
elif [ -f "$stories/stories260K.bin" ]; then
  echo "note: $smol absent (run scripts/setup.sh to fetch SmolLM2); using stories260K with the zephyr template"
  model=(--model "$stories/stories260K.bin" --tokenizer "$stories/tok512.model" --chat-template zephyr)
  smol_present=0
else
  fail "neither SmolLM2 (run scripts/setup.sh) nor the committed stories260K ($stories) is present"
fi

work=$(mktemp -d)
export TMUX_TMPDIR=$work  # the tmux sockets live (and are removed) with the scratch directory
sock=llm-chat-test-$$-0  # a private tmux server; each start_chat gets a fresh one (a new session on a server that is
                         # shutting down fails with "server exited unexpectedly")
screen_file=$work/screen
cleanup() { tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# ---- the pipe: two user turns around a command give two replies, no terminal decoration ----
printf 'Hello\n/stats\n/help\nWhat is 2+2?\n' |
  timeout "$wait_s" "$bin" "${model[@]}" --device cpu --chat --temp 0 -n 48 -c 512 >"$work/out" 2>"$work/err" ||
  { cat "$work/err" >&2; fail "piped chat exited with status $?"; }
notes=$(grep -cE '^\[([a-z]+: )?[0-9]+ tokens?, [0-9.]+ tokens/s\]$' "$work/err" || true)
[ "$notes" = 2 ] || { cat "$work/err" >&2; fail "piped chat: expected 2 reply notes on stderr, found $notes"; }
grep -q '^last reply: prompt [0-9]* token' "$work/err" || fail "piped chat: /stats printed no rates"
[ -s "$work/out" ] || fail "piped chat: no reply text on stdout"
if grep -q $'\033' "$work/out" "$work/err"; then fail "piped chat: ANSI escapes without a terminal"; fi
if grep -q 'Ctrl-' "$work/err"; then cat "$work/err" >&2; fail "piped chat: terminal key hints without a terminal"; fi
if [ "$smol_present" = 1 ]; then
  # SmolLM2 answers each of these greetings and sums in one line: two records.
  [ "$(wc -l <"$work/out")" = 2 ] || { cat "$work/out" >&2; fail "piped chat: expected 2 reply lines on stdout"; }
  grep -q 4 "$work/out" || { cat "$work/out" >&2; fail "piped chat: no 4 in the answer to 2+2"; }
fi
echo "ok: piped chat gave two replies"

# ---- the terminal ----
screen() { tmux -L "$sock" capture-pane -p -J -S -2000 -t chat 2>/dev/null | sed 's/[[:space:]]*$//' >"$screen_file" || true; }
# wait_for DESCRIPTION COMMAND...: re-captures the screen until COMMAND succeeds, at most wait_s seconds.
wait_for() {
  local what=$1; shift
  local end=$((SECONDS + wait_s))
  while ((SECONDS < end)); do
    screen
    if "$@"; then return 0; fi
    [ -f "$work/status" ] && fail "run-llama exited (status $(cat "$work/status")) while waiting for $what"
    sleep 0.2
  done
  fail "timed out after ${wait_s}s waiting for $what"
}
notes_on_screen() { grep -cE '\[([a-z]+: )?[0-9]+ tokens?, [0-9.]+ tokens/s\]' "$screen_file" || true; }
at_prompt() { [ "$(grep -v '^$' "$screen_file" | tail -n 1)" = ">" ]; }  # trailing spaces stripped
alive() { [ ! -f "$work/status" ] && [ "$(tmux -L "$sock" list-panes -t chat -F '#{pane_dead}')" = 0 ]; }
type_line() { tmux -L "$sock" send-keys -t chat -l "$1"; tmux -L "$sock" send-keys -t chat Enter; }

starts=0
start_chat() {
  tmux -L "$sock" kill-server 2>/dev/null || true
  starts=$((starts + 1))
  sock=llm-chat-test-$$-$starts
  rm -f "$work/status"
  printf '%q ' "$bin" "${model[@]}" --device cpu --chat --temp 0 -n 2000 -c 512 >"$work/cmd"
  echo '; echo $? >'"$work/status"'; sleep 600' >>"$work/cmd"
  tmux -L "$sock" -f /dev/null new-session -d -s chat -x 160 -y 50 "bash $work/cmd"
  wait_for "the banner and the prompt" eval 'grep -q "^chat: template" "$screen_file" && at_prompt'
}
exit_status() {
  local end=$((SECONDS + 30))
  while [ ! -f "$work/status" ] && ((SECONDS < end)); do sleep 0.2; done
  [ -f "$work/status" ] || fail "run-llama did not exit after $1"
  cat "$work/status"
}

start_chat
grep -q $'\033' <(tmux -L "$sock" capture-pane -p -e -t chat) || fail "terminal: no ANSI style (dim) in the banner"

# A question: its reply streams onto the screen, then a dim note.
type_line "What is the capital of France?"
wait_for "the first reply's note" eval '[ "$(notes_on_screen)" -ge 1 ] && at_prompt'
reply=$(sed -n '/^> What is the capital of France?$/,/tokens\/s\]/p' "$screen_file" | sed '1d;$d')
[ -n "$(echo "$reply" | tr -d '[:space:]')" ] || fail "terminal: no reply text between the question and its note"
if [ "$smol_present" = 1 ]; then echo "$reply" | grep -q Paris || fail "terminal: no 'Paris' in the reply"; fi
echo "ok: terminal reply streamed: $(echo "$reply" | head -n 1)"

# A long reply, stopped by Ctrl-C once its first bytes are on screen: the prompt returns, the process lives on.
# stories260K writes a whole context in a fraction of a second, so a Ctrl-C would land at the prompt (and quit).
if [ "$smol_present" = 1 ]; then
  type_line "Write a very long story about a dragon who learns to cook."
  wait_for "the long reply's first bytes" eval \
    'sed -n "/^> Write a very long story/,\$p" "$screen_file" | tail -n +2 | grep -q "[[:alnum:]]"'
  tmux -L "$sock" send-keys -t chat C-c
  wait_for "the prompt after Ctrl-C" eval '[ "$(notes_on_screen)" -ge 2 ] && at_prompt'
  alive || fail "terminal: run-llama died on Ctrl-C during a reply"
  grep -q '\[interrupted: [0-9]* token' "$screen_file" || fail "terminal: the long reply was not marked interrupted"
  echo "ok: Ctrl-C stopped the long reply; prompt back, process alive"
else
  echo "note: Ctrl-C during a reply is checked with SmolLM2 only (stories260K replies too fast to interrupt)"
fi

type_line "/stats"
wait_for "/stats" eval 'grep -q "^last reply: prompt [0-9]* token" "$screen_file" && at_prompt'
type_line "/reset"
wait_for "/reset" eval 'grep -q "^conversation cleared" "$screen_file" && at_prompt'
type_line "/stats"
wait_for "/stats after /reset" eval 'grep -q "^context: 0 of 512 positions in use" "$screen_file" && at_prompt'
echo "ok: /stats and /reset"

tmux -L "$sock" send-keys -t chat C-d
st=$(exit_status "Ctrl-D")
[ "$st" = 0 ] || fail "terminal: Ctrl-D exit status $st, expected 0"
echo "ok: Ctrl-D exits 0"

# Ctrl-C at the prompt quits cleanly too.
start_chat
tmux -L "$sock" send-keys -t chat C-c
st=$(exit_status "Ctrl-C at the prompt")
[ "$st" = 0 ] || fail "terminal: Ctrl-C at the prompt exit status $st, expected 0"
echo "ok: Ctrl-C at the prompt exits 0"
