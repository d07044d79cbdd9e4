"""The adaptive core against a real Triton (issue 14): the proxy, started with
no profile, learns tau(b) from Triton's own batch statistics, and its fit
matches the server line `ratebatch profile` measures.

The model sleeps 4 ms + 0.5 ms per row (server.py --tau0-ms 4 --alpha-ms 0.5),
batching off in Triton, max_batch_size 8. For each load rho (of the most
Triton can serve, 8 rows per tau(8)), a fresh Triton and a fresh proxy with the
default policy get Poisson load from `ratebatch load` for STEP seconds; then
the proxy's /status is read and its alpha and tau0 scored against the profile's
server line (measured on a Triton of its own, so the proxy never starts from
statistics a profile left behind).

Each step also reads Triton's own per-size means over the step (after a
direct warm-up) and prints them against the profile: under load on a 2-core
box the server itself runs off its profiled line, and the proxy is then held
to the line the server measured (docs/LEARNING.md).

Short by default (one rho, 6 s: the fit accounts for Triton's reported
compute within 25%); RATEBATCH_LONG=1 runs the figures of docs/LEARNING.md
(rho 0.2, 0.5, 0.8, 30 s each: within 10%, and alpha and tau0 within 10% of
the profile where the loaded server itself stayed near it). Run with -s to see
the table.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import http_get, start_ratebatch, start_triton

# A profile's slope and the proxy's fitted line, measured on this machine:
# nothing else may run meanwhile (conftest.py, markers).
pytestmark = pytest.mark.timing

TAU0_MS, ALPHA_MS, BMAX = 4.0, 0.5, 8
FLAGS = ("--dynamic-batching", "off", "--tau0-ms", str(TAU0_MS), "--alpha-ms", str(ALPHA_MS))
LONG = bool(os.environ.get("RATEBATCH_LONG"))
STEP_S = 30 if LONG else 6
TOL = 0.10 if LONG else 0.25
RHOS = (0.2, 0.5, 0.8) if LONG else (0.5,)


@pytest.fixture(scope="module")
def profiled(ratebatch_bin, tmp_path_factory) -> dict:
    """`ratebatch profile` of the model on a Triton of its own."""
    # The model sleeps ALPHA_MS per row: a profile whose slope reads well
    # below that was tilted by the machine (see profiler: sizes in rounds),
    # as a CI run on the shared two-core host once read (0.359 against 0.5;
    # the rerun in the same clone read it right). Such a profile is
    # measured once more, on a fresh server, before the tests score the
    # proxy's fit against it.
    min_slope = 0.9 * ALPHA_MS
    for attempt in (1, 2):
        server = start_triton(tmp_path_factory.mktemp("triton-profile"), *FLAGS)
        try:
            out = subprocess.run(
                [ratebatch_bin, "profile", "--upstream", server.base_url, "--model", "simple", "--samples", "20", "--json"],
                capture_output=True, text=True, timeout=300, check=True,
            ).stdout  # fmt: skip
        finally:
            server.stop()
        p = json.loads(out)
        assert p["server_alpha_ms"] is not None, f"Triton kept no batch statistics: {p}"
        if p["server_alpha_ms"] >= min_slope:
            break
        print(f"\nprofile {attempt}: slope {p['server_alpha_ms']:.4f} below the model's {ALPHA_MS} ms per row")
    assert p["server_alpha_ms"] >= min_slope, f"profiled slope {p['server_alpha_ms']:.4f} below the model's {ALPHA_MS} ms per row, twice"
    print(
        f"\nprofile: round trip tau(b) = {p['alpha_ms']:.4f}*b + {p['tau0_ms']:.4f} ms;"
        f" server's own compute {p['server_alpha_ms']:.4f}*b + {p['server_tau0_ms']:.4f} ms"
    )
    return p


def batch_means(base_url: str) -> dict[int, tuple[int, float]]:
    """Triton's own per-batch-size account: {size: (batches, mean ms of compute)}."""
    status, body = http_get(base_url + "/v2/models/simple/stats")
    assert status == 200, body
    out = {}
    for st in json.loads(body)["model_stats"][0].get("batch_stats") or []:
        n = int(st["compute_infer"]["count"])
        ns = sum(int(st[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
        if n:
            out[int(st["batch_size"])] = (n, ns / n / 1e6)
    return out


def warm_up(ratebatch_bin: str, base_url: str) -> None:
    """A second of light load straight to Triton: the first executions
    (PyTriton's first call takes hundreds of ms) are warm-up, not the line."""
    subprocess.run(
        [ratebatch_bin, "load", "--target", base_url, "--model", "simple", "--rate", "50", "--duration", "1s", "--binary"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


def delta(before: dict, after: dict) -> dict[int, tuple[int, float]]:
    """The batches run between two batch_means reads: {size: (batches, mean ms)}."""
    out = {}
    for b, (n1, ms1) in after.items():
        n0, ms0 = before.get(b, (0, 0.0))
        if n1 > n0:
            out[b] = (n1 - n0, (n1 * ms1 - n0 * ms0) / (n1 - n0))
    return out


def line_of(sizes: dict, least: int = 20) -> tuple[float, float]:
    """The least-squares line through the per-size means of the sizes seen at
    least `least` times, each weighted by its batches (a size formed once or
    twice, in an overload, is no point of a line)."""
    sizes = {b: v for b, v in sizes.items() if v[0] >= least}
    sw = sum(n for n, _ in sizes.values())
    sx = sum(n * b for b, (n, _) in sizes.items())
    sy = sum(n * ms for n, ms in sizes.values())
    sxx = sum(n * b * b for b, (n, _) in sizes.items())
    sxy = sum(n * b * ms for b, (n, ms) in sizes.items())
    a = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return a, (sy - a * sx) / sw


def print_sizes(label: str, seen: dict, profiled: dict) -> None:
    """Per size: what the loaded server measured (its own statistics, warm-up
    included) against the profile's server line, measured one request at a time."""
    line = lambda b: profiled["server_alpha_ms"] * b + profiled["server_tau0_ms"]  # noqa: E731
    for b in sorted(seen):
        n, ms = seen[b]
        print(f"  {label} b={b}: {n:6d} batches, mean {ms:7.3f} ms; profiled line {line(b):7.3f} ms ({100 * (ms / line(b) - 1):+.1f}%)")


def status_model(admin_url: str) -> dict:
    status, body = http_get(admin_url + "/status")
    assert status == 200, body
    for m in json.loads(body).get("models") or []:
        if m.get("model") == "simple":
            return m
    raise AssertionError(f"simple not in /status: {body[:500]!r}")


@pytest.mark.parametrize("rho", RHOS)
def test_learns_the_profiled_line(rho, profiled, ratebatch_bin, tmp_path_factory):
    alpha, tau0 = profiled["server_alpha_ms"], profiled["server_tau0_ms"]
    rate = rho * 1000 * BMAX / (alpha * BMAX + tau0)
    work = tmp_path_factory.mktemp(f"learn-{rho}")
    server = start_triton(work / "triton", *FLAGS)
    proxy = None
    try:
        # Warm Triton first, straight: the step's own server line below is
        # then the batches the proxy formed, without PyTriton's first call.
        warm_up(ratebatch_bin, server.base_url)
        before = batch_means(server.base_url)
        proxy = start_ratebatch(ratebatch_bin, server.base_url, work / "proxy")
        load = subprocess.run(
            [ratebatch_bin, "load", "--target", proxy.base_url, "--model", "simple", "--rate", f"{rate:.1f}",
             "--duration", f"{STEP_S}s", "--binary", "--seed", "1", "--json"],
            capture_output=True, text=True, timeout=STEP_S + 120, check=True,
        ).stdout  # fmt: skip
        summary = json.loads(load)
        m = status_model(proxy.admin_url)
        seen = delta(before, batch_means(server.base_url))
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
    r = m["rule"]
    ea = r["alpha_ms"] / alpha - 1 if alpha > 1e-3 else float("inf")
    et = r["tau0_ms"] / tau0 - 1
    print(
        f"rho {rho:.1f} rate {rate:7.1f}/s: alpha {r['alpha_ms']:.4f} vs {alpha:.4f} ({100 * ea:+.1f}%),"
        f" tau0 {r['tau0_ms']:.4f} vs {tau0:.4f} ({100 * et:+.1f}%), overhead {r.get('overhead_ms')} ms,"
        f" source {r['fit_source']!r}, doubt {r.get('fit_doubt', '')!r},"
        f" {summary['ok']} ok of {summary['scheduled']}, mean {summary['mean_latency_ms']:.2f} ms"
    )
    print_sizes(f"rho {rho:.1f}", seen, profiled)
    # What the proxy is responsible for: learning the line the server
    # itself measured during the step (Triton's own per-size means, fitted).
    sa, st = line_of(seen) if sum(1 for n, _ in seen.values() if n >= 20) >= 2 else (float("nan"), float("nan"))
    sa_err, st_err = r["alpha_ms"] / sa - 1, r["tau0_ms"] / st - 1
    print(
        f"  rho {rho:.1f}: Triton's own line during the step {sa:.4f}*b + {st:.4f} ms"
        f" ({100 * (sa / alpha - 1):+.1f}%, {100 * (st / tau0 - 1):+.1f}% off the profile);"
        f" the proxy's fit against it: alpha {100 * sa_err:+.1f}%, tau0 {100 * st_err:+.1f}%"
    )
    assert r["fit_source"] == "server statistics", r
    # The proxy must learn what the server did: its line accounts for the
    # compute Triton spent on the step's batches. The profile is the issue's
    # reference for the coefficients; where the loaded server itself ran off
    # it (on a 2-core box the load generator, proxy and Python backend share
    # the cores, and the larger batches form when the box is busiest:
    # docs/LEARNING.md), the gap is the machine's. The short run checked
    # tau(4) against the profile once, and failed when a busy CI host slowed
    # the server itself by a quarter.
    spent = sum(n * ms for n, ms in seen.values())
    predicted = sum(n * (r["alpha_ms"] * b + r["tau0_ms"]) for b, (n, _) in seen.items())
    print(f"  rho {rho:.1f}: the fit accounts for {100 * predicted / spent:.1f}% of the compute Triton reported for the step")
    assert spent > 0 and abs(predicted / spent - 1) <= TOL, (
        f"the fit {r['alpha_ms']:.4f}*b + {r['tau0_ms']:.4f} predicts {predicted:.0f} ms of compute, Triton spent {spent:.0f} ms"
    )
    if LONG and abs(sa / alpha - 1) <= TOL / 2 and abs(st / tau0 - 1) <= TOL / 2:
        assert abs(ea) <= TOL and abs(et) <= TOL, (
            f"fit {r['alpha_ms']:.4f}*b + {r['tau0_ms']:.4f}, want {alpha:.4f}*b + {tau0:.4f} within {100 * TOL:.0f}%"
        )


@pytest.mark.skipif(not LONG, reason="a figure for docs/LEARNING.md; RATEBATCH_LONG=1")
def test_server_line_under_direct_load(profiled, ratebatch_bin, tmp_path_factory):
    """The reference, checked: Poisson load straight to a fresh Triton (no
    proxy, batching off, so every batch is one row; 0.6 of what it serves at
    b=1) and Triton's own mean for b=1 against the profiled line. Where the server is slower
    under load than one request at a time, the difference is the machine's
    (the load generator, HTTP and the Python backend share its cores), not
    the proxy's fit."""
    alpha, tau0 = profiled["server_alpha_ms"], profiled["server_tau0_ms"]
    rate = 0.6 * 1000 / (alpha + tau0)
    server = start_triton(tmp_path_factory.mktemp("direct") / "triton", *FLAGS)
    try:
        warm_up(ratebatch_bin, server.base_url)
        before = batch_means(server.base_url)
        load = subprocess.run(
            [ratebatch_bin, "load", "--target", server.base_url, "--model", "simple", "--rate", f"{rate:.1f}",
             "--duration", "15s", "--binary", "--seed", "1", "--json"],
            capture_output=True, text=True, timeout=180, check=True,
        ).stdout  # fmt: skip
        summary = json.loads(load)
        after = batch_means(server.base_url)
    finally:
        server.stop()
    n, mean = delta(before, after)[1]
    want = alpha + tau0
    print(f"direct at {rate:.1f}/s: Triton's own b=1 mean {mean:.3f} ms over {n} batches; profiled line {want:.3f} ms ({100 * (mean / want - 1):+.1f}%); client mean {summary['mean_latency_ms']:.2f} ms")
    assert n == summary["ok"], f"Triton counted {n} batches of 1 for {summary['ok']} answered requests"
