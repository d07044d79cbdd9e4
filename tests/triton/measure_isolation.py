"""Figures of two drop-in promises, measured against the real tritonserver
(conformance.py starts it) straight and through `ratebatch serve`:

  sentinel    CALLS calls to fails_on_sentinel from CALLERS concurrent
              callers, one call in ten holding the value the model refuses
              with Triton's per-request 500: how many good calls failed, how
              many sentinel calls got something else than Triton's own 500,
              and whether the model stayed ready (its /v2/models/M/ready and
              the proxy's /readyz, polled every 50 ms during the run).
              "Triton got" is how many requests Triton executed meanwhile
              (fewer than CALLS: calls were merged; a merged batch that
              fails is split, and its parts count too).
  restricted  Triton run with --http-restricted-api=inference:api-key=k, the
              proxies with --restricted-api and the same value (as its
              operator starts them): CALLS calls carrying the header,
              CALLERS at once: how many were refused.

Each is run straight to Triton, through --policy maxbatch with a 20 ms delay
(forced merging) and through the default policy.

Usage (from the repository root, with the venv that has the PyTriton wheel):
  RATEBATCH_BIN=bin/ratebatch .venv/bin/python tests/triton/measure_isolation.py [--calls 1000] [--callers 16]
Without RATEBATCH_BIN, ./cmd/ratebatch is built into the work directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from conformance import http_infer, http_status, json_input, start_real_triton
from conftest import REPO, TritonServer, http_get, start_ratebatch

SENTINEL = -1
MODEL = "fails_on_sentinel"
KEY, VALUE = "api-key", "k"
RESTRICTED = f"inference:{KEY}={VALUE}"
ARMS = {"maxbatch 20ms": ("--policy", "maxbatch", "--policy-max-queue-delay", "20ms"), "default": ()}


def body(v: int) -> dict:
    return {"inputs": [json_input("IN", [[v] * 4])]}


def run(base: str, calls: int, callers: int, headers: dict | None, sentinel_every: int, ready_urls: list[str]) -> dict:
    """CALLS calls to base from CALLERS threads; call i holds the sentinel
    when sentinel_every and i % sentinel_every == 0."""
    next_call = iter(range(calls))
    lock = threading.Lock()
    good, bad = Counter(), Counter()
    ready = Counter()
    done = threading.Event()

    def caller() -> None:
        while True:
            with lock:
                i = next(next_call, None)
            if i is None:
                return
            poisoned = bool(sentinel_every) and i % sentinel_every == 0
            a = http_infer(base, MODEL, body(SENTINEL if poisoned else i % 1000), headers)
            with lock:
                (bad if poisoned else good)[(a.status, a.error)] += 1

    def watcher() -> None:
        while not done.is_set():
            seen = tuple(http_status(u) for u in ready_urls)
            with lock:
                ready[seen] += 1
            done.wait(0.05)

    w = threading.Thread(target=watcher)
    w.start()
    started = time.monotonic()
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    done.set()
    w.join()
    after = tuple(http_status(u) for u in ready_urls)
    return {"good": good, "bad": bad, "ready": ready, "after": after, "took": took}


def requests_received(triton: TritonServer) -> int:
    """How many requests of MODEL Triton has executed, failed or not: a
    merged batch is one (its statistics' success and fail counts)."""
    _, raw = http_get(f"{triton.base_url}/v2/models/{MODEL}/stats")
    stats = json.loads(raw)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


def measured(triton: TritonServer, *args) -> dict:
    """run(*args), with the requests Triton received meanwhile ("received")."""
    before = requests_received(triton)
    r = run(*args)
    r["received"] = requests_received(triton) - before
    return r


def failed(c: Counter) -> int:
    return sum(n for (status, _), n in c.items() if status != 200)


def describe(c: Counter) -> str:
    return ", ".join(f"{n}x {status} {err or ''}".strip() for (status, err), n in c.most_common())


def binary(workdir: Path) -> str:
    given = os.environ.get("RATEBATCH_BIN")
    if given:
        return str(Path(given).resolve())
    out = workdir / "ratebatch"
    subprocess.run([shutil.which("go") or "go", "build", "-o", str(out), "./cmd/ratebatch"], cwd=REPO, check=True)
    return str(out)


def arms(triton: TritonServer, rb: str, workdir: Path, *common: str):
    """(name, base URL, readiness URLs, proxy or None) for Triton and each
    proxy arm, each proxy started with its arm's flags and COMMON."""
    yield "triton", triton.base_url, [f"{triton.base_url}/v2/models/{MODEL}/ready"], None
    for name, flags in ARMS.items():
        p = start_ratebatch(rb, triton.base_url, workdir / name.replace(" ", "-"), *flags, *common)
        try:
            ready = [f"{p.base_url}/v2/models/{MODEL}/ready", f"{p.admin_url}/readyz"]
            yield name, p.base_url, ready, p
        finally:
            p.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--callers", type=int, default=16)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ratebatch-isolation-"))
    rb = binary(work)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {args.calls} calls, {args.callers} callers, binary {rb}")

    print(f"\n## sentinel: one call in ten holds {SENTINEL} (Triton answers that call 500)")
    print("arm            | Triton got | good failed | sentinel not Triton's 500 | readiness seen (model[, /readyz]):"
          " polls | after")
    triton = start_real_triton(work / "plain", [MODEL])
    try:
        for name, base, ready, _ in arms(triton, rb, work):
            r = measured(triton, base, args.calls, args.callers, None, 10, ready)
            odd = sum(n for (s, e), n in r["bad"].items() if (s, e) != (500, f"IN holds the sentinel {SENTINEL}"))
            seen = ", ".join(f"{k}: {n}" for k, n in sorted(r["ready"].items()))
            print(f"{name:14} | {r['received']:10} | {failed(r['good']):4} of {sum(r['good'].values()):4} | {odd:4} of"
                  f" {sum(r['bad'].values()):4}              | {seen} | {r['after']}")
            if failed(r["good"]):
                print(f"{'':14}   good calls: {describe(r['good'])}")
    finally:
        triton.stop()

    print(f"\n## restricted: Triton with --http-restricted-api={RESTRICTED}, the proxies with --restricted-api"
          f" {RESTRICTED}, every call carries the header")
    print("arm            | Triton got | refused")
    triton = start_real_triton(work / "restricted", [MODEL], f"--http-restricted-api={RESTRICTED}")
    try:
        for name, base, ready, _ in arms(triton, rb, work / "restricted-arms", "--restricted-api", RESTRICTED):
            r = measured(triton, base, args.calls, args.callers, {KEY: VALUE}, 0, ready)
            print(f"{name:14} | {r['received']:10} | {failed(r['good']):4} of {sum(r['good'].values()):4}"
                  f"   {describe(r['good'])}")
    finally:
        triton.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
