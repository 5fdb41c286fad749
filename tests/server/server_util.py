"""Starting and stopping serve-llama for the server tests (standard library only)."""
import os
import re
import signal
import subprocess
import threading
import time

STORIES = ["--model", "tests/data/models/stories260K/stories260K.bin",
           "--tokenizer", "tests/data/models/stories260K/tok512.model"]


class Server:
    """serve-llama on a free loopback port (--port 0; the port is read from its "listening on" line)."""

    def __init__(self, serve, args, cwd, timeout=300):
        self.proc = subprocess.Popen([serve, "--port", "0", "--device", "cpu"] + args, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + timeout
        self.port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)/v1", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("serve-llama did not start: " + "".join(self.log))
        # Keep draining stderr so the server never blocks on a full pipe.
        self.drain = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self.drain.start()
        self.base = "http://127.0.0.1:%d" % self.port

    def stop(self):
        """SIGTERM; the server must exit 0 within 30 s."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise RuntimeError("serve-llama did not stop within 30 s of SIGTERM")
        self.drain.join(timeout=5)
        if rc != 0:
            raise RuntimeError("serve-llama exited %d: %s" % (rc, "".join(self.log)))

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


class Results:
    """Counts checks; prints 'N passed, N failed' at the end (ctest reads the exit code)."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, fn, *args):
        t0 = time.time()
        try:
            fn(*args)
            self.passed += 1
            print("PASS %s (%.1f s)" % (name, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported the same way
            self.failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e), flush=True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0


def run_llama(run_llama_path, args, cwd, stdin=None):
    r = subprocess.run([run_llama_path, "--device", "cpu"] + args, cwd=cwd, input=stdin, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("run-llama failed: " + r.stderr)
    return r.stdout


def small_model():
    return os.environ.get("LLM_SERVER_TEST_SMALL_MODEL") == "1"
