"""Bounded load test of serve-llama on 127.0.0.1 (stories260K, CPU): 16 concurrent clients, 200 requests in all,
mixed streamed and not, some cancelled mid-stream, some malformed. Every well-formed request gets a complete, correct
answer (its text equals the one the idle server gave for the same request) or a 503 with Retry-After; malformed ones
get 400; nothing hangs (every socket has a timeout); the server's RSS after the run is within the tolerance of its
RSS after a warm-up at the same concurrency; a cancelled stream stops its generation; the server then still answers.
Standard library only. Prints requests/s, p50/p95 latency, the 503 count and RSS before/after.

usage: load_test.py SERVE_LLAMA SOURCE_DIR
"""
import http.client
import json
import os
import random
import socket
import statistics
import sys
import threading
import time

from server_util import STORIES, Results, Server

CLIENTS = 16
TOTAL = 200
WARMUP = 48
BACKOFF = 0.05  # seconds a client waits after a 503 before its next request
TIMEOUT = 60  # seconds for any one request: a hang fails the test
# RSS tolerance: the warm-up runs the same mix at the same concurrency, so every HTTP thread, malloc arena and buffer
# the run needs exists before the first measurement; what remains is allocator noise (a few hundred KiB here). 8 MiB
# + 5% is exceeded by a leak of about 45 KiB a request (a streamed reply's buffers, a job and its text); smaller
# leaks are LeakSanitizer's to find: the sanitized tree runs this test with detect_leaks=1, and the server must exit 0.
RSS_SLACK_KIB = 8 * 1024
RSS_SLACK_FRACTION = 0.05

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a bird"]


def request_body(kind, i):
    p = PROMPTS[i % len(PROMPTS)]
    n = 8 + (i % 3) * 4
    if kind in ("chat", "chat_stream"):
        return {"messages": [{"role": "user", "content": p}], "max_tokens": n, "temperature": 0,
                "stream": kind == "chat_stream"}
    if kind == "cancel":
        return {"prompt": p, "max_tokens": 400, "temperature": 0, "stream": True}
    return {"prompt": p, "max_tokens": n, "temperature": 0, "stream": kind == "cmpl_stream"}


def post(port, path, body_bytes):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request("POST", path, body=body_bytes, headers={"Content-Type": "application/json"})
    return c, c.getresponse()


def read_sse(resp, chat):
    """The text of a stream and its finish reason; asserts the event format and the closing [DONE]."""
    text, finish, done = "", None, False
    raw = resp.read().decode()
    for event in raw.split("\n\n"):
        if not event:
            continue
        assert event.startswith("data: "), repr(event)
        data = event[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        assert not done, "event after [DONE]"
        ch = json.loads(data)["choices"][0]
        text += (ch["delta"].get("content") or "") if chat else ch["text"]
        finish = ch["finish_reason"] or finish
    assert done and finish in ("stop", "length"), (done, finish, raw[-200:])
    return text, finish


def one(port, kind, i):
    """Runs one request; returns (outcome, key, text) with outcome 'ok', '503', '400' or 'cancelled'."""
    path = "/v1/chat/completions" if kind.startswith("chat") else "/v1/completions"
    if kind == "malformed":
        body = [b'{"prompt": "Once", "max_tokens": ', b'{"prompt": 5}', b'{"messages": []}'][i % 3]
        path = "/v1/chat/completions" if i % 3 == 2 else "/v1/completions"
        c, r = post(port, path, body)
        data = r.read()
        c.close()
        assert r.status == 400 and "error" in json.loads(data), (r.status, data)
        return "400", None, None
    body = request_body(kind, i)
    c, r = post(port, path, json.dumps(body).encode())
    try:
        if r.status == 503:
            assert r.getheader("Retry-After"), "503 without Retry-After"
            assert json.loads(r.read())["error"]["code"] == "queue_full"
            return "503", None, None
        assert r.status == 200, (r.status, r.read()[:300])
        if kind == "cancel":
            r.fp.readline()  # the first event's line, then hang up
            c.sock.shutdown(socket.SHUT_RDWR)
            return "cancelled", None, None
        key = json.dumps({k: v for k, v in body.items() if k != "stream"}, sort_keys=True)
        if body["stream"]:
            text, _ = read_sse(r, kind.startswith("chat"))
        else:
            ch = json.loads(r.read())["choices"][0]
            text = ch["message"]["content"] if kind.startswith("chat") else ch["text"]
        return "ok", key, text
    finally:
        c.close()


def plan(n, seed):
    rng = random.Random(seed)
    kinds = ["cmpl"] * 6 + ["cmpl_stream"] * 4 + ["chat"] * 3 + ["chat_stream"] * 4 + ["cancel"] * 2 + ["malformed"]
    return [(rng.choice(kinds), i) for i in range(n)]


def run_load(port, jobs, reference, stats):
    lock = threading.Lock()
    it = iter(jobs)

    def worker():
        while True:
            with lock:
                job = next(it, None)
            if job is None:
                return
            kind, i = job
            t0 = time.time()
            try:
                outcome, key, text = one(port, kind, i)
                with lock:
                    if outcome == "ok":
                        stats["latency"].append(time.time() - t0)
                    stats[outcome] = stats.get(outcome, 0) + 1
                if outcome == "503":
                    time.sleep(BACKOFF)  # as a client would back off (Retry-After), briefly: the run stays short
                    if outcome == "ok":
                        want = reference.setdefault(key, text)
                        if text != want:
                            stats["errors"].append("%s %d: %r != %r" % (kind, i, text, want))
            except Exception as e:  # noqa: BLE001
                with lock:
                    stats["errors"].append("%s %d: %s: %s" % (kind, i, type(e).__name__, e))

    threads = [threading.Thread(target=worker) for _ in range(CLIENTS)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=TOTAL * TIMEOUT)
        assert not t.is_alive(), "a client thread hung"
    return time.time() - t0


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def main():
    serve, src = sys.argv[1:3]
    res = Results()
    srv = Server(serve, STORIES + ["--queue", "8"], src)
    reference = {}
    try:
        # The reference answers, one at a time on the idle server.
        for kind in ("cmpl", "chat"):
            for i in range(len(PROMPTS) * 3):
                outcome, key, text = one(srv.port, kind, i)
                assert outcome == "ok"
                reference[key] = text

        def cancel_stops_generation():
            before = metric(srv.port, "llm_completion_tokens_total")
            gens = metric(srv.port, "llm_generations_total")
            assert one(srv.port, "cancel", 7)[0] == "cancelled"
            deadline = time.time() + TIMEOUT
            while metric(srv.port, "llm_generations_total") == gens and time.time() < deadline:
                time.sleep(0.01)
            produced = metric(srv.port, "llm_completion_tokens_total") - before
            print("  cancelled stream: %d of 400 tokens generated" % produced)
            assert produced < 100, "a cancelled stream generated %d tokens" % produced

        res.run("a client that hangs up mid-stream stops its generation", cancel_stops_generation)
        warm = {"latency": [], "errors": []}
        run_load(srv.port, plan(WARMUP, 1), reference, warm)
        rss_before = srv.rss_kib()
        stats = {"latency": [], "errors": []}
        wall = run_load(srv.port, plan(TOTAL, 2), reference, stats)
        rss_after = srv.rss_kib()
        lat = sorted(stats["latency"])
        p50 = statistics.median(lat)
        p95 = lat[int(0.95 * (len(lat) - 1))]
        print("load: %d requests, %d clients, %.1f s: %.1f requests/s; latency of the answered p50 %.0f ms, p95 %.0f ms; "
              "%d ok, %d x 503, %d x 400 (malformed), %d cancelled mid-stream; RSS %d KiB after warm-up, %d KiB "
              "after the run (%+d KiB)" % (TOTAL, CLIENTS, wall, TOTAL / wall, p50 * 1e3, p95 * 1e3,
                                           stats.get("ok", 0), stats.get("503", 0), stats.get("400", 0),
                                           stats.get("cancelled", 0), rss_before, rss_after,
                                           rss_after - rss_before), flush=True)

        def every_request_answered():
            assert not stats["errors"] and not warm["errors"], (stats["errors"] + warm["errors"])[:5]
            n = sum(stats.get(k, 0) for k in ("ok", "503", "400", "cancelled"))
            assert n == TOTAL, "%d of %d requests accounted for" % (n, TOTAL)
            assert stats.get("ok", 0) > 0 and stats.get("400", 0) > 0

        def memory_flat():
            if os.environ.get("LLM_SERVER_TEST_NO_RSS") == "1":
                print("  RSS not checked: AddressSanitizer's quarantine keeps freed memory (the main tree checks it)")
                return
            limit = RSS_SLACK_KIB + RSS_SLACK_FRACTION * rss_before
            assert rss_after - rss_before <= limit, "RSS grew %d KiB (limit %d)" % (rss_after - rss_before, limit)

        def still_answers():
            outcome, key, text = one(srv.port, "cmpl", 0)
            assert outcome == "ok" and text == reference[key]
            deadline = time.time() + TIMEOUT
            while metric(srv.port, "llm_queue_depth") != 0 and time.time() < deadline:
                time.sleep(0.05)
            assert metric(srv.port, "llm_queue_depth") == 0

        res.run("every well-formed request answered correctly or 503; malformed 400; none hung",
                every_request_answered)
        res.run("RSS flat across the run", memory_flat)
        res.run("the server still answers, queue empty", still_answers)
    finally:
        srv.stop()
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
