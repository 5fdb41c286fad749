#!/usr/bin/env bash
# curl against serve-llama (stories260K, CPU): each bad request gets its status and an OpenAI-style JSON error
# ({"error": {"message", "type", "param", "code"}}), and the server still answers afterwards; a non-loopback --host
# without --api-key is refused (exit 2, one line).
# usage: errors_test.sh SERVE_LLAMA SOURCE_DIR
set -uo pipefail
serve=$1
cd "$2"
command -v curl >/dev/null || { echo "errors_test: curl is not installed (scripts/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d)
log=$tmp/server.log
"$serve" --model tests/data/models/stories260K/stories260K.bin --tokenizer tests/data/models/stories260K/tok512.model \
  --device cpu --port 0 --api-key k3y --max-body 1 --ctx-size 64 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/v1.*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || { echo "errors_test: serve-llama did not start:"; cat "$log"; exit 1; }
url=http://127.0.0.1:$port
passed=0
failed=0

# expect NAME STATUS JSON-CHECK(python expression over e = the error object) CURL-ARGS...
expect() {
  local name=$1 status=$2 check=$3
  shift 3
  local got
  got=$(curl -s --max-time 60 -o "$tmp/body" -w '%{http_code}' "$@")
  if [ "$got" = "$status" ] && python3 -c "
import json, sys
e = json.load(open('$tmp/body'))['error']
assert isinstance(e['message'], str) and e['message'] and set(e) == {'message', 'type', 'param', 'code'}, e
assert $check, e
" 2>"$tmp/err"; then
    passed=$((passed + 1)); echo "PASS $name"
  else
    failed=$((failed + 1)); echo "FAIL $name: status $got (want $status): $(head -c 400 "$tmp/body") $(cat "$tmp/err")"
  fi
}
key=(-H "Authorization: Bearer k3y")
chat=$url/v1/chat/completions
cmpl=$url/v1/completions

expect "malformed JSON" 400 "e['type'] == 'invalid_request_error' and 'not valid JSON' in e['message']" \
  "${key[@]}" "$chat" -d '{"messages": [{"role": "user", "content": "hi"}'
expect "body not an object" 400 "'JSON object' in e['message']" "${key[@]}" "$cmpl" -d '[1, 2]'
expect "deep nesting" 400 "'deeper' in e['message']" "${key[@]}" "$cmpl" -d "$(printf '[%.0s' $(seq 40))"
expect "temperature of the wrong type" 400 "e['param'] == 'temperature'" \
  "${key[@]}" "$cmpl" -d '{"prompt": "Once", "temperature": "hot"}'
expect "max_tokens out of range" 400 "e['param'] == 'max_tokens'" "${key[@]}" "$cmpl" -d '{"prompt": "Once", "max_tokens": 0}'
expect "top_p out of range" 400 "e['param'] == 'top_p'" "${key[@]}" "$cmpl" -d '{"prompt": "Once", "top_p": 1.5}'
expect "messages missing" 400 "e['param'] == 'messages'" "${key[@]}" "$chat" -d '{"model": "x"}'
expect "unknown role" 400 "e['param'] == 'messages[0].role'" "${key[@]}" "$chat" \
  -d '{"messages": [{"role": "wizard", "content": "hi"}]}'
expect "five stop strings" 400 "e['param'] == 'stop'" "${key[@]}" "$cmpl" -d '{"prompt": "x", "stop": ["a","b","c","d","e"]}'
expect "n = 2" 400 "e['param'] == 'n'" "${key[@]}" "$cmpl" -d '{"prompt": "x", "n": 2}'
expect "missing key" 401 "e['type'] == 'authentication_error'" "$cmpl" -d '{"prompt": "Once"}'
expect "wrong key" 401 "e['code'] == 'invalid_api_key'" -H "Authorization: Bearer k3z" "$cmpl" -d '{"prompt": "Once"}'
expect "unknown route" 404 "e['type'] == 'not_found_error'" "${key[@]}" "$url/v1/engines"
expect "wrong method" 405 "'GET is not allowed on /v1/completions; use POST' in e['message']" "${key[@]}" "$cmpl"
expect "POST on a GET route" 405 "'POST is not allowed on /v1/models; use GET' in e['message']" "${key[@]}" \
  -X POST "$url/v1/models"
expect "body over --max-body" 413 "'larger' in e['message']" "${key[@]}" "$cmpl" \
  -d "{\"prompt\": \"$(head -c 2000 /dev/zero | tr '\0' a)\"}"
long=$(printf 'Once upon a time %.0s' $(seq 30))
expect "prompt longer than the context" 400 "e['code'] == 'context_length_exceeded' and e['param'] == 'prompt'" \
  "${key[@]}" "$cmpl" -d "{\"prompt\": \"$long\", \"max_tokens\": 4}"
expect "streamed prompt longer than the context" 400 "e['code'] == 'context_length_exceeded'" \
  "${key[@]}" "$chat" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$long\"}], \"stream\": true}"

# /health needs no key; a good request still gets its answer.
if [ "$(curl -s --max-time 10 "$url/health")" = '{"status":"ok"}' ]; then
  passed=$((passed + 1)); echo "PASS health without a key"
else failed=$((failed + 1)); echo "FAIL health"; fi
out=$(curl -s --max-time 60 "${key[@]}" "$cmpl" -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}')
if python3 -c "import json,sys; r=json.loads(sys.argv[1]); assert r['usage']['completion_tokens'] >= 1" "$out"; then
  passed=$((passed + 1)); echo "PASS answers after the errors"
else failed=$((failed + 1)); echo "FAIL answers after the errors: $out"; fi
# Every answer above is counted in /metrics by status.
m=$(curl -s --max-time 10 "${key[@]}" "$url/metrics")
if grep -q 'llm_requests_total{route="/v1/completions",status="400"}' <<<"$m" &&
   grep -q 'status="401"' <<<"$m" && grep -q 'status="413"' <<<"$m" && grep -q '^llm_info{' <<<"$m"; then
  passed=$((passed + 1)); echo "PASS metrics count the statuses"
else failed=$((failed + 1)); echo "FAIL metrics: $m"; fi

# A non-loopback address without a key: refused before anything loads (exit 2, one error line).
rc=0
"$serve" --host 0.0.0.0 --port 1 >/dev/null 2>"$tmp/refused" || rc=$?
if [ "$rc" = 2 ] && grep -q '^error: --host 0.0.0.0 is not a loopback address: serving it needs --api-key KEY$' "$tmp/refused"; then
  passed=$((passed + 1)); echo "PASS non-loopback host without a key refused"
else failed=$((failed + 1)); echo "FAIL non-loopback refusal: exit $rc: $(cat "$tmp/refused")"; fi

kill -TERM $pid
if wait $pid; then passed=$((passed + 1)); echo "PASS stops on SIGTERM with exit 0"
else failed=$((failed + 1)); echo "FAIL exit status on SIGTERM"; fi
trap 'rm -rf "$tmp"' EXIT
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
