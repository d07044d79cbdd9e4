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

Short by default (one rho, 6 s: the fit's tau(4), mid-range, within 25% of
the profiled line's); RATEBATCH_LONG=1 runs the figures of docs/LEARNING.md
(rho 0.2, 0.5, 0.8, 30 s each: alpha and tau0 within 10%). Run with -s to see
the table.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import http_get, start_ratebatch, start_triton

TAU0_MS, ALPHA_MS, BMAX = 4.0, 0.5, 8
FLAGS = ("--dynamic-batching", "off", "--tau0-ms", str(TAU0_MS), "--alpha-ms", str(ALPHA_MS))
LONG = bool(os.environ.get("RATEBATCH_LONG"))
STEP_S = 30 if LONG else 6
TOL = 0.10 if LONG else 0.25
RHOS = (0.2, 0.5, 0.8) if LONG else (0.5,)


@pytest.fixture(scope="module")
def profiled(ratebatch_bin, tmp_path_factory) -> dict:
    """`ratebatch profile` of the model on a Triton of its own."""
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
    print(
        f"\nprofile: round trip tau(b) = {p['alpha_ms']:.4f}*b + {p['tau0_ms']:.4f} ms;"
        f" server's own compute {p['server_alpha_ms']:.4f}*b + {p['server_tau0_ms']:.4f} ms"
    )
    return p


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
        proxy = start_ratebatch(ratebatch_bin, server.base_url, work / "proxy")
        load = subprocess.run(
            [ratebatch_bin, "load", "--target", proxy.base_url, "--model", "simple", "--rate", f"{rate:.1f}",
             "--duration", f"{STEP_S}s", "--binary", "--seed", "1", "--json"],
            capture_output=True, text=True, timeout=STEP_S + 120, check=True,
        ).stdout  # fmt: skip
        summary = json.loads(load)
        m = status_model(proxy.admin_url)
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
    assert r["fit_source"] == "server statistics", r
    if LONG:
        assert abs(ea) <= TOL and abs(et) <= TOL, (
            f"fit {r['alpha_ms']:.4f}*b + {r['tau0_ms']:.4f}, want {alpha:.4f}*b + {tau0:.4f} within {100 * TOL:.0f}%"
        )
    else:
        got, want = 4 * r["alpha_ms"] + r["tau0_ms"], 4 * alpha + tau0
        assert abs(got / want - 1) <= TOL, f"fit's tau(4) {got:.3f} ms, profiled {want:.3f} ms: not within {100 * TOL:.0f}%"
