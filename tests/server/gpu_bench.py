"""serve-llama's streamed tokens/s beside run-llama's, and the time to first token of a resent chat history beside a
fresh one-turn prompt's (issue 37's H200 figures). Standard library only (the H200 machine has no openai package).

usage: gpu_bench.py SERVE_LLAMA RUN_LLAMA -- ENGINE ARGS (e.g. --model F --device cuda --gemv warp)
Prints a small markdown table; exit 0 (a benchmark: the figures are the result, the note judges them).
"""
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from server_util import Server  # noqa: E402

serve, runl = sys.argv[1:3]
engine = sys.argv[sys.argv.index("--") + 1:]
N = int(os.environ.get("BENCH_N", "256"))
PROMPT = "Write a long story about a lighthouse keeper and the sea."
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))


def stream(port, path, body):
    """POST a streamed request; returns (seconds to the first content chunk, seconds first -> last chunk, usage,
    text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    first = last = None
    text = ""
    usage = None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        ch = ev.get("choices") or []
        piece = ch and (ch[0].get("text") or (ch[0].get("delta") or {}).get("content"))
        if piece:
            now = time.perf_counter()
            first = first or now
            last = now
            text += piece
    c.close()
    return first - t0, last - first, usage, text


# The server on the engine arguments given (server_util.Server always adds --device cpu): started here.
srv = Server.__new__(Server)
proc_args = [serve, "--port", "0"] + engine
srv.proc = subprocess.Popen(proc_args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
srv.log = []
while True:
    line = srv.proc.stderr.readline()
    if not line:
        sys.exit("serve-llama did not start: " + "".join(srv.log))
    srv.log.append(line)
    m = re.search(r"listening on http://[^ ]*:(\d+)/v1", line)
    if m:
        srv.port = int(m.group(1))
        break
srv.drain = threading.Thread(target=lambda: srv.log.extend(srv.proc.stderr), daemon=True)
srv.drain.start()

# Streamed decode: 256 tokens past the end of text, greedy; t/s over the chunks after the first (one token each).
rates = []
for i in range(REPEATS + 1):
    ttft, span, usage, _ = stream(srv.port, "/v1/completions", {
        "prompt": PROMPT, "max_tokens": N, "temperature": 0, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    if i > 0:  # the first is a warm-up
        rates.append((usage["completion_tokens"] - 1) / span)
server_tps = statistics.median(rates)
# The server's own figure for the last of them (decode tokens/s, /metrics), beside the client's.
mc = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
mc.request("GET", "/metrics")
metrics_text = mc.getresponse().read().decode()
mc.close()
m = re.search(r"^llm_decode_tokens_per_second_last ([\d.eE+-]+)$", metrics_text, re.M)
metrics_tps = float(m.group(1)) if m else float("nan")

# TTFT: a fresh one-turn chat (a new conversation each time: its first words differ) against the same conversation
# resent with one more turn (history reused from the KV cache).
fresh, resent = [], []
history = [{"role": "user", "content": "Tell me about lighthouses."}]
for i in range(REPEATS + 1):
    msgs = [{"role": "user", "content": "Question %d: what is the tallest lighthouse?" % i}]
    t_fresh = stream(srv.port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0,
                                                         "stream": True, "ignore_eos": True})[0]
    reply = stream(srv.port, "/v1/chat/completions", {"messages": history, "max_tokens": 48, "temperature": 0,
                                                      "stream": True})[3]
    history = history + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And question %d?" % i}]
    t_resent = stream(srv.port, "/v1/chat/completions", {"messages": history, "max_tokens": 8, "temperature": 0,
                                                         "stream": True, "ignore_eos": True})
    if i > 0:
        fresh.append(t_fresh)
        resent.append(t_resent[0])
try:
    srv.stop()
    stopped = "exited 0 on SIGTERM"
except RuntimeError as e:  # reported below, after the figures
    stopped = str(e).splitlines()[0]

# run-llama on the same prompt and engine arguments, the same number of tokens.
rl = []
for i in range(3):
    err = subprocess.run([runl] + engine + ["--prompt", PROMPT, "-n", str(N), "--ignore-eos", "--temp", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
    m = re.search(r"eval time =.*?([\d.]+) tokens per second", [l for l in err.splitlines()
                                                                 if " eval time" in l and "prompt" not in l][0])
    rl.append(float(m.group(1)))
run_tps = statistics.median(rl)

print("| engine args | server streamed t/s (client) | server decode t/s (/metrics) | run-llama t/s "
      "| streamed / run-llama | TTFT fresh ms | TTFT resent ms | resent / fresh |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
f, r = statistics.median(fresh) * 1e3, statistics.median(resent) * 1e3
print("| %s | %.1f | %.1f | %.1f | %.3f | %.2f | %.2f | %.3f |" % (" ".join(engine), server_tps, metrics_tps, run_tps,
                                                                 server_tps / run_tps, f, r, r / f))
print("server: " + stopped)
