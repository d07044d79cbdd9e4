"""The proxy really batches in front of a real Triton; client calls beyond
test_clients.py get the same answers through it; and the bench works.

Triton here runs its default scheduler (dynamic batching off: every request
Triton receives executes alone) with a GPU-like cost per execution (see
conftest.SESSION_SERVER_FLAGS). So Triton's own statistics count one execution
per request the proxy sends: fewer executions than client requests means the
proxy merged them, and Triton's batch_stats say into which sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import bench
from conftest import HERE, RatebatchProxy, Target, TritonServer, http_get, start_ratebatch
from server import VECTOR_LEN

# adhoc and batchmonitor are the built-ins; the others are skipped (with the
# proxy's reason) while the binary does not know them.
POLICIES = ["adhoc", "batchmonitor", "batchmonitor+", "smdp"]
BUILT_IN = {"adhoc", "batchmonitor"}
CALLERS = 32


@pytest.fixture(scope="module", params=POLICIES)
def proxy(request, ratebatch_bin, triton: TritonServer, tmp_path_factory) -> RatebatchProxy:
    """A proxy with the given policy in front of the session's Triton."""
    # debug: the proxy logs why a model is not batched only at that level
    p = start_ratebatch(
        ratebatch_bin,
        triton.base_url,
        tmp_path_factory.mktemp("proxy-" + request.param.replace("+", "plus")),
        "--policy", request.param, "--log-level", "debug",
    )  # fmt: skip
    yield p
    p.stop()


def triton_stats(triton: TritonServer) -> dict:
    """Triton's own statistics for `simple`, read from Triton, not through the proxy."""
    status, body = http_get(triton.base_url + "/v2/models/simple/versions/1/stats")
    assert status == 200, body
    (s,) = json.loads(body)["model_stats"]
    return {
        "inferences": s["inference_count"],
        "executions": s["execution_count"],
        "batches": {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]},
    }


def proxy_metric(proxy: RatebatchProxy, name: str) -> float:
    """One sample of a ratebatch series for model simple (0 before the first)."""
    status, body = http_get(proxy.admin_url + "/metrics")
    assert status == 200, body
    values = bench.metric_values(body.decode(), name)
    assert len(values) <= 1, (name, values)
    return values[0] if values else 0.0


def proxy_status_model(proxy: RatebatchProxy, model: str = "simple") -> dict | None:
    status, body = http_get(proxy.admin_url + "/status")
    assert status == 200, body
    for m in json.loads(body).get("models") or []:
        if m.get("model") == model:
            return m
    return None


def one_request(k: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Caller k's inputs (1 or 2 rows, values unique to k) and its encoding."""
    rows = 2 if k % 3 == 0 else 1
    a = (np.arange(rows * VECTOR_LEN, dtype=np.int32).reshape(rows, VECTOR_LEN) + 1000 * k).astype(np.int32)
    b = np.full((rows, VECTOR_LEN), 7 * k + 1, dtype=np.int32)
    return a, b, k % 2 == 0


def call_concurrently(url: str, n: int) -> list[BaseException]:
    """n callers, released together, each checking it gets exactly its own answer."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def caller(k: int) -> None:
        try:
            a, b, binary = one_request(k)
            c = httpclient.InferenceServerClient(url, network_timeout=30.0)
            inputs = []
            for name, x in (("INPUT0", a), ("INPUT1", b)):
                i = httpclient.InferInput(name, list(x.shape), "INT32")
                i.set_data_from_numpy(x, binary_data=binary)
                inputs.append(i)
            outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
            barrier.wait(timeout=10)
            r = c.infer("simple", inputs, outputs=outputs, request_id=f"caller-{k}")
            resp = r.get_response()
            assert resp["id"] == f"caller-{k}", resp
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
            for o in resp["outputs"]:
                assert o["shape"] == list(a.shape), o
                # each answer keeps the encoding its caller asked for
                assert ("binary_data_size" in o.get("parameters", {})) == binary, o
            c.close()
        except BaseException as e:  # collected and re-raised by the test
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return errors


def wait_for(predicate, timeout_s: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not true within {timeout_s}s")
        time.sleep(0.05)


def test_proxy_batches_against_real_triton(proxy: RatebatchProxy, triton: TritonServer):
    policy = proxy.flags[proxy.flags.index("--policy") + 1]
    # The first request teaches the proxy the model (PyTriton's repository
    # index is empty, so discovery is on demand, from the model's config).
    assert call_concurrently(proxy.url, 1) == []
    m = proxy_status_model(proxy)
    if (m is None or not m["batched"]) and policy not in BUILT_IN:
        reason = bench.not_batched_reason(proxy)
        if "unknown policy" in reason:
            pytest.skip(f"policy {policy}: {reason}")
    m = wait_for(lambda: proxy_status_model(proxy), what="/status lists simple")
    assert m["batched"] is True, m
    assert m["rule"]["policy"] == policy, m
    assert m["rule"]["max_batch_size"] == 8, m
    if policy == "batchmonitor":
        # Its dispatcher starts at batch size 1 and Algorithm 1 never plans
        # below 2: wait for the first monitor window's rule.
        wait_for(lambda: proxy_status_model(proxy)["rule"]["batch_size"] > 1, what="a rule with b > 1")

    before_t = triton_stats(triton)
    before_count = proxy_metric(proxy, "ratebatch_batch_size_count")
    before_sum = proxy_metric(proxy, "ratebatch_batch_size_sum")

    errors = call_concurrently(proxy.url, CALLERS)
    assert not errors, errors[:3]

    rows = sum(one_request(k)[0].shape[0] for k in range(CALLERS))
    # Triton counts an execution's statistics after it has answered: a
    # last batch's rows may be counted a moment after its callers read it.
    after_t = wait_for(
        lambda: (s := triton_stats(triton))["inferences"] - before_t["inferences"] >= rows and s,
        what=f"Triton's statistics to count the {rows} rows sent",
    )
    executions = after_t["executions"] - before_t["executions"]
    old = before_t["batches"]
    batches = {b: n - old.get(b, 0) for b, n in after_t["batches"].items() if n != old.get(b, 0)}
    assert after_t["inferences"] - before_t["inferences"] == rows
    assert sum(b * n for b, n in batches.items()) == rows, batches
    assert sum(batches.values()) == executions, batches
    assert executions < CALLERS, f"{policy}: Triton executed {executions} times for {CALLERS} requests: {batches}"
    assert max(batches) > 1, batches
    assert max(batches) <= 8, batches

    # The proxy's own account agrees with Triton's, batch for batch.
    wait_for(
        lambda: proxy_metric(proxy, "ratebatch_batch_size_sum") - before_sum == rows,
        what="ratebatch_batch_size_sum counts every row",
    )
    assert proxy_metric(proxy, "ratebatch_batch_size_count") - before_count == executions


@pytest.mark.parametrize("response", [None, "gzip", "deflate"])
@pytest.mark.parametrize("request_enc", [None, "gzip", "deflate"])
def test_compressed_bodies(target, request_enc, response):
    """tritonclient's request/response compression: Triton's HTTP 'deflate' is
    zlib-wrapped (RFC 9110), as is what tritonclient sends and expects."""
    a = np.arange(2 * VECTOR_LEN, dtype=np.int32).reshape(2, VECTOR_LEN)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, [2, VECTOR_LEN], "INT32")
        i.set_data_from_numpy(a, binary_data=True)
        inputs.append(i)
    r = target.client().infer(
        "simple", inputs, request_compression_algorithm=request_enc, response_compression_algorithm=response
    )
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), 0 * a)


def _simple_inputs() -> list[httpclient.InferInput]:
    a = np.arange(VECTOR_LEN, dtype=np.int32).reshape(1, VECTOR_LEN)
    inputs = [httpclient.InferInput(n, [1, VECTOR_LEN], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a, binary_data=True)
    return inputs


def _outputs(r) -> dict:
    return {o["name"]: r.as_numpy(o["name"]).tolist() for o in r.get_response()["outputs"]}


# Client calls test_clients.py does not make. Each runs against Triton and
# against the proxy; the two answers (or errors) must be equal.
SAME_ANSWER_CALLS = {
    "log settings": lambda c: c.get_log_settings(),
    "update log settings": lambda c: c.update_log_settings({"log_verbose_level": 0}),
    "trace settings": lambda c: c.get_trace_settings(),
    "model trace settings": lambda c: c.get_trace_settings(model_name="simple"),
    "system shm status": lambda c: c.get_system_shared_memory_status(),
    "cuda shm status": lambda c: c.get_cuda_shared_memory_status(),
    "model metadata by version": lambda c: c.get_model_metadata("simple", "1"),
    "unload unknown model": lambda c: c.unload_model("nosuch"),
    "infer with parameters": lambda c: _outputs(c.infer("simple", _simple_inputs(), parameters={"custom": "x"})),
    "infer with timeout": lambda c: _outputs(c.infer("simple", _simple_inputs(), timeout=10_000_000)),
    "infer with priority": lambda c: _outputs(c.infer("simple", _simple_inputs(), priority=1)),
    "infer with query params": lambda c: _outputs(c.infer("simple", _simple_inputs(), query_params={"q": "1"})),
    "infer version 1": lambda c: _outputs(c.infer("simple", _simple_inputs(), model_version="1")),
    "infer unknown version": lambda c: _outputs(c.infer("simple", _simple_inputs(), model_version="2")),
    "infer classification": lambda c: _outputs(
        c.infer("simple", _simple_inputs(), outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    ),
}


def _answer(target, call):
    try:
        return ("ok", call(target.client()))
    except InferenceServerException as e:
        return ("error", e.status(), e.message())


@pytest.mark.parametrize("call", list(SAME_ANSWER_CALLS))
def test_same_answer_direct_and_through_proxy(triton: TritonServer, ratebatch, call):
    direct = Target("triton", triton.url)
    want = _answer(direct, SAME_ANSWER_CALLS[call])
    assert _answer(ratebatch, SAME_ANSWER_CALLS[call]) == want


# bench.py: its pure parts, then one short real run.


@pytest.mark.parametrize(
    "names, want",
    [
        (["triton-off"], [bench.Setup("triton-off")]),
        (["triton-on-2000"], [bench.Setup("triton-on-2000", dynamic_batching=True, queue_delay_us=2000)]),
        (["ratebatch-batchmonitor+"], [bench.Setup("ratebatch-batchmonitor+", policy="batchmonitor+")]),
    ],
)
def test_bench_parse_setups(names, want):
    assert bench.parse_setups(names) == want


@pytest.mark.parametrize(
    "names, message",
    [
        (["triton"], "want triton-off"),
        (["triton-on-"], "want triton-off"),
        (["ratebatch-"], "want triton-off"),
        (["triton-off", "triton-off"], "named twice"),
    ],
)
def test_bench_parse_setups_rejects(names, message):
    with pytest.raises(ValueError, match=message):
        bench.parse_setups(names)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rates", "0"], "must be > 0"),
        (["--rates", "fast"], "could not convert"),
        (["--keep-up", "1.5"], "want a share"),
        (["--interval-ms", "10"], "want >= 100"),
        (["--rounds", "0"], "want 1..20"),
        (["--setups", "ratebatch-adhoc", "--ratebatch-bin", "/nonexistent"], "not an executable"),
    ],
)
def test_bench_rejects_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err


def test_bench_parse_perf_output():
    stdout = """Request Rate: 400 inference requests per seconds
  Client:
    Request count: 987
    Avg send request rate: 391.95 infer/sec
    [WARNING] Perf Analyzer was not able to keep up with the desired request rate. 1.93% of the requests were delayed.
    Throughput: 91.11 infer/sec
  Server:
    Inference count: 992
    Execution count: 124
    Successful request count: 124
"""
    assert bench.parse_perf_output(stdout) == {"inferences": 992, "executions": 124, "delayed_pct": 1.93}


def test_bench_summarize_and_best_triton_batcher():
    def m(setup, rate, thr, p99, overloaded=False, rnd=1):
        return bench.Measurement(
            setup, rate, "cmd", throughput=thr, p50_ms=p99 / 2, p99_ms=p99, overloaded=overloaded, round=rnd
        )

    results = [
        m("triton-on-500", 50, 50, 30),
        m("triton-on-2000", 50, 50, 20),
        m("triton-off", 50, 50, 5),  # not a batcher setup
        m("triton-on-500", 400, 300, 900, overloaded=True),
        m("triton-on-2000", 400, 390, 150),
        m("triton-on-5000", 400, 395, 120),
        m("triton-on-500", 800, 500, 900, overloaded=True),
        m("triton-on-2000", 800, 600, 800, overloaded=True),
        # round 2: 5000 us fails at 400, so 2000 us (kept up twice) wins there
        m("triton-on-2000", 400, 385, 170, rnd=2),
        m("triton-on-5000", 400, 300, 999, overloaded=True, rnd=2),
        bench.Measurement("triton-on-5000", 800, "", round=2, overloaded=True, note="not run: overloaded at 400/s"),
    ]
    summaries = bench.summarize(results)
    s2000 = next(s for s in summaries if (s.setup, s.rate) == ("triton-on-2000", 400))
    assert (s2000.rounds, s2000.kept_up, s2000.p99_ms, s2000.throughput) == (2, 2, 160, 387.5)
    s5000 = next(s for s in summaries if (s.setup, s.rate) == ("triton-on-5000", 800))
    assert (s5000.rounds, s5000.kept_up, s5000.throughput) == (1, 0, None)
    assert s5000.notes == ["not run: overloaded at 400/s"]
    best = bench.best_triton_batcher(summaries)
    assert {r: b.setup for r, b in best.items()} == {50: "triton-on-2000", 400: "triton-on-2000", 800: "triton-on-2000"}


def test_bench_update_doc_keeps_other_sections(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    others = "# Benchmarks\n\n## Someone else's\n\ntheir figures\n"
    doc.write_text(others)
    bench.update_doc(doc, f"{bench.MARK_BEGIN}\nfirst\n{bench.MARK_END}\n")
    prose = "\nHand-written reading of the figures.\n\n## A later section\n\nkept\n"
    doc.write_text(doc.read_text() + prose)
    bench.update_doc(doc, f"{bench.MARK_BEGIN}\nsecond\n{bench.MARK_END}\n")
    text = doc.read_text()
    assert text.startswith(others)
    assert text.count(bench.SECTION) == 1
    assert "second" in text and "first" not in text
    assert text.endswith(prose)


@pytest.mark.bench
def test_bench_smoke(ratebatch_bin, tmp_path):
    """One rate, short windows: Triton direct and behind ratebatch (adhoc)."""
    out, js, doc = tmp_path / "bench.md", tmp_path / "bench.json", tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\n## Other\n\nuntouched\n")
    argv = [
        sys.executable, str(HERE / "bench.py"),
        "--setups", "triton-off,ratebatch-adhoc",
        "--rates", "60",
        "--interval-ms", "1000",
        # 1 s windows under-count throughput, and make test runs this beside
        # other checks: a smoke of bench.py's pipeline, not a load test
        "--keep-up", "0.25",
        "--ratebatch-bin", ratebatch_bin,
        "--out", str(out), "--json", str(js), "--update-doc", str(doc),
    ]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["setup"]: r for r in json.loads(js.read_text())["results"]}
    assert set(results) == {"triton-off", "ratebatch-adhoc"}
    for name, r in results.items():
        assert r["note"] == "", (name, r)
        assert r["throughput"] > 15, (name, r)
        assert 0 < r["p50_ms"] <= r["p99_ms"], (name, r)
        assert r["inferences"] >= r["executions"] > 0, (name, r)
    assert results["triton-off"]["inferences"] == results["triton-off"]["executions"]
    generated = out.read_text()
    assert "| 60 | Triton direct, batching off |" in generated
    assert "| 60 | ratebatch `adhoc` → Triton (off) |" in generated
    assert "--request-rate-range 60 --request-distribution poisson" in generated
    assert run.stdout == generated
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\n## Other\n\nuntouched\n")
    assert generated in text
