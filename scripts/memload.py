#!/usr/bin/env python3
"""Memory-budget load: BIG clients at once each post one large
binary inference request (the emulator's "image" model, ROWS rows of FP32
[3,224,224], 602 112 bytes a row) to the proxy, with "Expect: 100-continue"
as curl and most HTTP clients send for large bodies, while a stream of small
requests (model "simple") runs beside them; the same small stream runs alone
first, as the baseline. Every exchange is on its own loopback connection.

Prints one JSON object: per phase the small stream's sent, ok, success
ratio and latency percentiles; the big requests' statuses (an answer of any
status counts as answered; a connection error or timeout does not); and the
proxy's resident set sampled every 50 ms and its peak (VmHWM) when --pid is
given. With --raw it also writes every small request (phase, status,
latency, when sent) as JSON lines.

--pool DIR summarises the runs scripts/memload.sh made with RUNS > 1 (their
result-N.json and raw-N.jsonl in DIR; with ARMS, one DIR per arm): each
run's ratio; the p99 of every run's small requests taken together, alone
and beside, their ratio and its 90% interval over the runs resampled; and
how many requests beside took longer than 3x the p99 alone, against the 1%
that a p99 within 3x allows. One run's p99
of 500 requests is its fifth slowest, and on a shared machine a hiccup of
the host that reaches a few requests of either phase moves it by 2-4x
(docs/RELIABILITY.md); the pooled p99 estimates the same quantile from
RUNS times the samples, each run carrying the same load.

Standard library only.
"""
import argparse
import asyncio
import glob
import json
import multiprocessing
import os
import random
import time

ROW_BYTES = 3 * 224 * 224 * 4


def big_request(host, rows):
    size = rows * ROW_BYTES
    header = json.dumps({
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [rows, 3, 224, 224],
                    "parameters": {"binary_data_size": size}}],
        "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
    }).encode()
    head = (f"POST /v2/models/image/infer HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(header)}\r\n"
            f"Expect: 100-continue\r\nContent-Length: {len(header) + size}\r\n\r\n").encode()
    return head, header, size


SMALL = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}).encode()


async def read_response(reader):
    """Reads one HTTP/1.1 response; returns (status, body)."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed before a status line")
    status = int(line.split()[1])
    length, chunked = 0, False
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
        if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
    if chunked:
        body = b""
        while True:
            n = int((await reader.readline()).strip(), 16)
            if n == 0:
                await reader.readline()
                break
            body += await reader.readexactly(n)
            await reader.readline()
        return status, body
    return status, (await reader.readexactly(length)) if length else b""


async def big_client(host, port, rows, chunk, timeout, retry_for, out, attempts):
    """Posts one large request; on 503 tries again after Retry-After (1 s,
    jittered) until retry_for seconds have passed. Records the last answer."""
    start = time.monotonic()
    while True:
        status = await big_attempt(host, port, rows, chunk, timeout)
        attempts.append(status)
        if status != "503" or time.monotonic() - start >= retry_for:
            out.append((status, time.monotonic() - start))
            return
        await asyncio.sleep(1 + random.random())


async def big_attempt(host, port, rows, chunk, timeout):
    head, header, size = big_request(f"{host}:{port}", rows)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(head)
        await writer.drain()
        status, _ = await asyncio.wait_for(read_response(reader), timeout)
        if status == 100:  # go on: send the body, then read the answer
            writer.write(header)
            zeros = memoryview(bytes(chunk))
            left = size
            while left > 0:
                n = min(left, chunk)
                writer.write(zeros[:n])
                await writer.drain()
                left -= n
            status, _ = await asyncio.wait_for(read_response(reader), timeout)
        writer.close()
        return str(status)
    except Exception as e:  # not answered
        return type(e).__name__


async def small_stream(host, port, rate, duration, timeout, out):
    req = (f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(SMALL)}\r\nConnection: close\r\n\r\n").encode() + SMALL

    t0 = time.monotonic()

    async def one():
        start = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            writer.write(req)
            status, _ = await asyncio.wait_for(read_response(reader), timeout)
            writer.close()
            out.append((status, time.monotonic() - start, start - t0))
        except Exception as e:
            out.append((type(e).__name__, time.monotonic() - start, start - t0))

    tasks = []
    for i in range(int(rate * duration)):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)


def small_process(host, port, rate, duration, timeout, q):
    out = []
    asyncio.run(small_stream(host, port, rate, duration, timeout, out))
    q.put(out)


def run_small(ctx, host, port, a):
    q = ctx.Queue()
    p = ctx.Process(target=small_process, args=(host, port, a.rate, a.duration, a.timeout, q))
    p.start()
    out = q.get()
    p.join()
    return out


def rss_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None


async def sample_rss(pid, stop, out):
    while not stop.is_set():
        v = rss_kib(pid, "VmRSS")
        if v is not None:
            out.append(v)
        await asyncio.sleep(0.05)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None


def write_raw(path, phases):
    with open(path, "w") as f:
        for phase, rec in phases.items():
            for status, latency, at in rec:
                f.write(json.dumps({"phase": phase, "status": status, "latency_s": latency, "sent_at_s": at}) + "\n")


def pool(d):
    """Summarises the runs in d (result-N.json, raw-N.jsonl)."""
    runs = sorted(glob.glob(os.path.join(d, "result-*.json")), key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    if not runs:
        raise SystemExit(f"memload: no result-N.json in {d}")
    phases = {"alone": [], "beside": []}
    per_run, statuses, hwm, by_run = [], {}, [], []
    for path in runs:
        with open(path) as f:
            r = json.load(f)
        per_run.append(r.get("p99_ratio"))
        for s, n in r["big"]["final_statuses"].items():
            statuses[s] = statuses.get(s, 0) + n
        if "proxy_rss_mib" in r:
            hwm.append(r["proxy_rss_mib"]["vmhwm"])
        run = {"alone": [], "beside": []}
        with open(path.replace("result-", "raw-").replace(".json", ".jsonl")) as f:
            for line in f:
                x = json.loads(line)
                run[x["phase"]].append((x["status"], x["latency_s"], x["sent_at_s"]))
        by_run.append(run)
        for k, v in run.items():
            phases[k] += v
    alone, beside = summary_small(phases["alone"]), summary_small(phases["beside"])
    for s in (alone, beside):
        del s["slowest_1pct_sent_at_s"]
    # How far the pooled ratio moves with the runs drawn: the runs resampled
    # with replacement (a run is one load event, its requests not
    # independent of each other), the 5th and 95th percentile of the ratio.
    rng = random.Random(1)
    ok = [(answered(rec["alone"]), answered(rec["beside"])) for rec in by_run]
    boot = []
    for _ in range(1000 if len(ok) > 1 else 0):
        draw = [rng.choice(ok) for _ in ok]
        a, b = pct([t for x, _ in draw for t in x], 99), pct([t for _, y in draw for t in y], 99)
        if a and b:
            boot.append(b / a)
    res = {"runs": len(runs), "big_final_statuses": dict(sorted(statuses.items())),
           "small_alone": alone, "small_beside_big": beside,
           "pooled_p99_ratio": round(beside["p99_ms"] / alone["p99_ms"], 2) if alone["p99_ms"] and beside["p99_ms"] else None,
           "pooled_beside": over(phases["alone"], phases["beside"]),
           "pooled_p99_ratio_90pct_over_runs": [round(pct(boot, 5), 2), round(pct(boot, 95), 2)] if boot else None,
           "per_run_p99_ratio": per_run,
           "runs_within_3x": sum(1 for x in per_run if x is not None and x <= 3),
           "proxy_vmhwm_mib_max": max(hwm) if hwm else None}
    print(json.dumps(res, indent=1))


def answered(rec, since=0.0, until=float("inf")):
    """The latencies of rec's requests answered 200, sent in [since, until) s."""
    return [t for s, t, at in rec if s == 200 and since <= at < until]


def over(alone, beside):
    """How many of beside's answered requests took longer than 3x alone's
    p99, against the 1% of them that a p99 within 3x allows."""
    a = pct(answered(alone), 99)
    ok = answered(beside)
    if a is None or not ok:
        return None
    return {"slower_than_3x_alone_p99": sum(1 for t in ok if t > 3 * a), "allowed": len(ok) // 100}


def summary_small(rec):
    ok = answered(rec)
    first = answered(rec, until=1)
    slow = sorted(rec, key=lambda r: -r[1])[:max(1, len(rec) // 100)]
    return {"sent": len(rec), "ok": len(ok), "success": round(len(ok) / len(rec), 4) if rec else None,
            "statuses": dict(sorted({str(s): sum(1 for x, _, _ in rec if x == s) for s, _, _ in rec}.items())),
            "slowest_1pct_sent_at_s": sorted(round(r[2], 2) for r in slow),
            "p50_ms": round(1000 * pct(ok, 50), 2) if ok else None,
            "p99_ms": round(1000 * pct(ok, 99), 2) if ok else None,
            "max_ms": round(1000 * max(ok), 2) if ok else None,
            "p99_after_1s_ms": round(1000 * pct(answered(rec, since=1), 99), 2)
            if any(at >= 1 for _, _, at in rec) else None,
            # The large bodies cross in the first second (docs/RELIABILITY.md).
            "first_1s": {"sent": len(first), "p50_ms": round(1000 * pct(first, 50), 2) if first else None,
                         "p90_ms": round(1000 * pct(first, 90), 2) if first else None}}


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--addr", default="127.0.0.1:9000")
    ap.add_argument("--small-addr", default="", help="where the small stream goes (default: --addr)")
    ap.add_argument("--pid", type=int, default=0, help="the proxy's pid, for its resident set")
    ap.add_argument("--big", type=int, default=400, help="large requests, all started at once")
    ap.add_argument("--rows", type=int, default=100, help="rows per large request (100: 60.2 MB)")
    ap.add_argument("--rate", type=float, default=50, help="small requests per second")
    ap.add_argument("--duration", type=float, default=10, help="seconds of the small stream in each phase")
    ap.add_argument("--retry-for", type=float, default=0, help="seconds a large request refused 503 keeps trying (0: one attempt)")
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--big-nice", type=int, default=0,
                    help="run the large clients at this nice value (the small stream keeps its own): their "
                         "CPU is the clients', which in a deployment is other hosts'")
    ap.add_argument("--raw", default="", help="write every small request to this file (JSON lines)")
    ap.add_argument("--pool", default="", metavar="DIR", help="summarise the runs in DIR instead of running")
    a = ap.parse_args()
    if a.pool:
        pool(a.pool)
        return
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    shost, sport = (a.small_addr or a.addr).rsplit(":", 1)
    sport = int(sport)

    # The small stream runs in a process of its own: the large bodies'
    # writes would otherwise delay its sends and its timing in this loop.
    ctx = multiprocessing.get_context("spawn")
    base = run_small(ctx, shost, sport, a)

    rss, stop = [], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(a.pid, stop, rss)) if a.pid else None
    big, attempts = [], []
    t0 = time.monotonic()
    q = ctx.Queue()
    proc = ctx.Process(target=small_process, args=(shost, sport, a.rate, a.duration, a.timeout, q))
    proc.start()
    if a.big_nice:
        # After the small stream's process has started, so that only the
        # large clients run at the lower priority.
        os.nice(a.big_nice)
    bigs = [asyncio.create_task(big_client(host, port, a.rows, a.chunk, a.timeout, a.retry_for, big, attempts))
            for _ in range(a.big)]
    await asyncio.gather(*bigs)
    small = await asyncio.get_running_loop().run_in_executor(None, q.get)
    proc.join()
    took = time.monotonic() - t0
    stop.set()
    if sampler:
        await sampler

    if a.raw:
        write_raw(a.raw, {"alone": base, "beside": small})
    statuses = {}
    for s, _ in big:
        statuses[s] = statuses.get(s, 0) + 1
    answered = sum(n for s, n in statuses.items() if s.isdigit())
    tries = {}
    for s_ in attempts:
        tries[s_] = tries.get(s_, 0) + 1
    res = {
        "big": {"clients": len(big), "answered": answered, "final_statuses": statuses, "attempts": tries,
                "bytes_each": a.rows * ROW_BYTES, "seconds": round(took, 1)},
        "small_alone": summary_small(base),
        "small_beside_big": summary_small(small),
    }
    if res["small_alone"]["p99_ms"] and res["small_beside_big"]["p99_ms"]:
        res["p99_ratio"] = round(res["small_beside_big"]["p99_ms"] / res["small_alone"]["p99_ms"], 2)
        res["beside"] = over(base, small)
    if a.pid:
        res["proxy_rss_mib"] = {"peak_sampled": round(max(rss) / 1024, 1) if rss else None,
                                "vmhwm": round((rss_kib(a.pid, "VmHWM") or 0) / 1024, 1)}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
