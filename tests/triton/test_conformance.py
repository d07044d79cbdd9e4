"""Differential conformance: each row is a client call (raw HTTP as curl sends
it, tritonclient HTTP and gRPC, shared memory) sent straight to the real
tritonserver and through the proxy, and the answers compared as a client
reads them (conformance.Answer: status, error text, outputs, headers).

Triton runs the models of tests/triton/models (conformance.py starts it,
without PyTriton) with its response cache on and X-Tenant forwarded to the
backend (--http-header-forward-pattern, --grpc-header-forward-pattern).
Three proxies stand in front of it, each with both doors and the same
pattern (--forward-header-pattern, as an operator of this Triton sets it):
  maxbatch  --policy maxbatch with a 300 ms delay: concurrent callers merge.
  default   the default policy.
  short     the default with limits.write_timeout and upstream_client.timeout
            at 1 s, for calls that last longer.

Every row is an equal answer, or a deviation the product keeps on purpose
(documented) asserted as such; a row the proxy fails is marked
pytest.mark.xfail(strict=True) with what differs, so that its fix removes it.
"""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import threading
import time
import urllib.parse

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conformance import (
    Answer,
    Stack,
    assert_same,
    concurrently,
    differ,
    grpc_answer,
    grpc_infer,
    http_infer,
    http_post,
    http_status,
    json_input,
    poll,
    read_http,
    run_stack,
    start_real_triton,
)
from conftest import http_get

MERGE_DELAY = "300ms"  # maxbatch's delay: callers released together share a batch
SHORT_S = 1  # the short proxy's write and upstream timeouts, in seconds
SHORT = f"{SHORT_S}s"
LONG_MS = 1300  # a call to a sleep.py model this long outlasts them
STREAM = (8, 250)  # a stream of 8 answers 250 ms apart outlasts them too
SENTINEL = -1  # add_one.py's refused value
CALLERS = 8  # the models' max_batch_size: a full batch

LOADED = [
    "cached",
    "decoupled",
    "fails_on_sentinel",
    "no_queue_policy",
    "pair",
    "poisoned",
    "priority_levels",
    "queue_default",
    "queue_override",
    "ragged",
    "reloadable",
    "rows_seen",
    "sequence",
    "stream",
    "tenant",
]
UNLOADED = ["shape_tensor"]  # Triton refuses to load it
FORWARDED = "(?i)x-tenant"  # headers Triton forwards as parameters (tenant.py)


@pytest.fixture(scope="module")
def stack(ratebatch_bin, tmp_path_factory):
    triton = start_real_triton(
        tmp_path_factory.mktemp("conformance-triton"),
        LOADED,
        "--cache-config", "local,size=1048576",
        f"--http-header-forward-pattern={FORWARDED}",
        f"--grpc-header-forward-pattern={FORWARDED}",
        models=LOADED + UNLOADED,
    )  # fmt: skip
    # Each proxy forwards on its batches the headers Triton forwards to
    # the backend, as an operator of this Triton configures it (CONFIG.md,
    # "Headers: who may call").
    forwarding = ("--forward-header-pattern", FORWARDED)
    proxies = {
        "maxbatch": ("--policy", "maxbatch", "--policy-max-queue-delay", MERGE_DELAY, *forwarding),
        "default": forwarding,
        "short": ("--limits-write-timeout", SHORT, "--upstream-timeout", SHORT, *forwarding),
    }
    yield from run_stack(ratebatch_bin, tmp_path_factory, "conformance", triton, proxies)


def body(values: list[int], width: int = 4, **params) -> dict:
    """A JSON request for IN of one row per value, each row that value."""
    b: dict = {"inputs": [json_input("IN", [[v] * width for v in values])]}
    if params:
        b["parameters"] = params
    return b


def both(stack: Stack, via: str, call):
    """call(base_url) (an Answer or a list of them), straight and through VIA."""
    return call(stack.http("triton")), call(stack.http(via))


def stat_counts(stack: Stack, model: str) -> dict[str, int]:
    """Triton's inference_stats counts of model (success, fail, cache_hit, ...), read from Triton."""
    _, raw = http_get(f"{stack.triton.base_url}/v2/models/{model}/stats")
    return {k: int(v["count"]) for k, v in json.loads(raw)["model_stats"][0]["inference_stats"].items()}


def success_count(stack: Stack, model: str) -> int:
    """Triton's success.count of model: the requests it answered."""
    return stat_counts(stack, model)["success"]


def settled_success_count(stack: Stack, model: str) -> int:
    """success_count once it has stopped moving: Triton counts a request
    after it has sent the answer, so a read right after the last answer
    can miss it. Read until two reads 50 ms apart agree (at most 2 s)."""
    last = success_count(stack, model)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = success_count(stack, model)
        if now == last:
            return now
        last = now
    return last


def requests_received(stack: Stack, model: str, run):
    """run()'s result and how many requests of model Triton answered meanwhile."""
    before = settled_success_count(stack, model)
    got = run()
    return got, settled_success_count(stack, model) - before


def merged_unless_default(via: str, received: int) -> None:
    """Under maxbatch the callers of a row really shared batches (Triton got fewer requests than CALLERS)."""
    if via == "maxbatch":
        assert received < CALLERS, f"Triton received {received} requests for {CALLERS} callers: nothing merged"


def merged_http(model: str, bodies: list[dict], headers=None):
    """A call: the bodies sent at once to one base URL, their Answers."""

    def call(base: str) -> list[Answer]:
        return concurrently([lambda b=b: http_infer(base, model, b, headers) for b in bodies])

    return call


# --- good calls --------------------------------------------------------------


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_good_json_calls(stack, via):
    """Raw JSON calls (1-2 rows, with and without id and chosen outputs), released together."""
    bodies = []
    for k in range(CALLERS):
        b = body([10 * k + r for r in range(1 + k % 2)])
        if k % 3 == 0:
            b["id"] = f"caller-{k}"
        if k % 4 == 1:
            b["outputs"] = [{"name": "OUT"}]
        bodies.append(b)
    straight = merged_http("fails_on_sentinel", bodies)(stack.http("triton"))
    through, received = requests_received(
        stack, "fails_on_sentinel", lambda: merged_http("fails_on_sentinel", bodies)(stack.http(via))
    )
    assert all(a.ok for a in straight), straight
    assert_same(straight, through)
    merged_unless_default(via, received)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_good_binary_calls(stack, via):
    """Binary outputs: Inference-Header-Content-Length, the JSON header and the bytes after it."""
    bodies = [body([k], binary_data_output=True) for k in range(CALLERS)]
    straight = merged_http("fails_on_sentinel", bodies)(stack.http("triton"))
    through, received = requests_received(
        stack, "fails_on_sentinel", lambda: merged_http("fails_on_sentinel", bodies)(stack.http(via))
    )
    assert all(a.ok and a.binary for a in straight), straight
    assert_same(straight, through)
    merged_unless_default(via, received)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_good_tritonclient_calls(stack, via):
    """tritonclient HTTP (binary inputs) and gRPC, callers released together."""

    def http(base: str) -> list[Answer]:
        def one(k: int) -> Answer:
            c = httpclient.InferenceServerClient(base.removeprefix("http://"))
            i = httpclient.InferInput("IN", [1, 4], "INT32")
            i.set_data_from_numpy(np.full((1, 4), k, dtype=np.int32), binary_data=True)
            r = c.infer("fails_on_sentinel", [i])
            return Answer(200, body=r.as_numpy("OUT").tolist())

        return concurrently([lambda k=k: one(k) for k in range(CALLERS)])

    def grpc(url: str) -> list[Answer]:
        return concurrently(
            [lambda k=k: grpc_infer(url, "fails_on_sentinel", k, request_id=f"r{k}") for k in range(CALLERS)]
        )

    through, received = requests_received(stack, "fails_on_sentinel", lambda: http(stack.http(via)))
    assert_same(http(stack.http("triton")), through)
    merged_unless_default(via, received)
    through, received = requests_received(stack, "fails_on_sentinel", lambda: grpc(stack.grpc(via)))
    assert_same(grpc(stack.grpc("triton")), through)
    merged_unless_default(via, received)


def shm_region(name: str, value: np.ndarray):
    """A system shared-memory region holding value (the caller destroys it)."""
    handle = shm.create_shared_memory_region(name, f"/{name}", value.nbytes)
    shm.set_shared_memory_region(handle, [value])
    return handle


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_http_shared_memory_beside_json(stack, via):
    """HTTP: A in system shared memory, B as JSON data."""
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    b = np.full((1, 4), 10, dtype=np.int32)

    def call(base: str) -> Answer:
        region = f"rb-conf-http-{via}-{base.rsplit(':', 1)[1]}"
        handle = shm_region(region, a)
        c = httpclient.InferenceServerClient(base.removeprefix("http://"))
        try:
            c.register_system_shared_memory(region, f"/{region}", a.nbytes)
            body = {
                "inputs": [
                    {"name": "A", "shape": [1, 4], "datatype": "INT32",
                     "parameters": {"shared_memory_region": region, "shared_memory_byte_size": a.nbytes}},
                    json_input("B", b.tolist()),
                ]
            }  # fmt: skip
            return http_infer(base, "pair", body)
        finally:
            unregister_when_free(c, region)
            shm.destroy_shared_memory_region(handle)

    straight = call(stack.http("triton"))
    assert straight.ok, straight
    assert_same(straight, call(stack.http(via)))


# --- a request that fails alone (issue 61 item 1) ------------------------------


def test_sentinel_merged_with_good_neighbours_http(stack):
    bodies = [body([SENTINEL if k == 3 else k]) for k in range(CALLERS)]
    straight, through = both(stack, "maxbatch", merged_http("fails_on_sentinel", bodies))
    assert [a.status for a in straight] == [500 if k == 3 else 200 for k in range(CALLERS)], straight
    assert_same(straight, through)


def test_sentinel_merged_with_good_neighbours_grpc(stack):
    def call(url: str) -> list[Answer]:
        return concurrently(
            [lambda k=k: grpc_infer(url, "fails_on_sentinel", SENTINEL if k == 3 else k) for k in range(CALLERS)]
        )

    straight = call(stack.grpc("triton"))
    assert [a.status for a in straight] == ["INTERNAL" if k == 3 else "OK" for k in range(CALLERS)], straight
    assert_same(straight, call(stack.grpc("maxbatch")))


def sentinel_storm(stack: Stack, via: str, seconds: float) -> dict:
    """For SECONDS, four callers send `poisoned` one request in CALLERS holding
    the sentinel, while the model's readiness (data door) and the proxy's
    /readyz are polled. Returns what went wrong for good calls."""
    base = stack.http(via)
    stop = time.monotonic() + seconds
    good: list[Answer] = []
    sentinel_answers: set = set()
    ready_seen: set = set()
    lock = threading.Lock()

    def caller(k: int) -> None:
        n = 0
        while time.monotonic() < stop:
            bad = (n + k) % CALLERS == 0
            a = http_infer(base, "poisoned", body([SENTINEL if bad else n]))
            with lock:
                if bad:
                    sentinel_answers.add((a.status, a.error))
                else:
                    good.append(a)
            n += 1

    def watcher() -> None:
        while time.monotonic() < stop:
            model = http_status(f"{base}/v2/models/poisoned/ready")
            admin = http_status(f"{stack.admin(via)}/readyz")
            with lock:
                ready_seen.add((model, admin))
            time.sleep(0.05)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)] + [threading.Thread(target=watcher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [f"{a.status} {a.error}" for a in good if not a.ok]
    return {"good": len(good), "good_failed": failed, "sentinel": sentinel_answers, "ready": ready_seen}



@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_sentinel_stream_keeps_model_ready(stack, via):
    """One request in eight holds the sentinel for 2 s, four callers at once:
    only those fail, and the model stays ready (its /ready, the proxy's /readyz)."""
    got = sentinel_storm(stack, via, 2.0)
    failed = got["good_failed"]
    seen = (got["sentinel"], len(failed), sorted(set(failed)), got["ready"])
    want = ({(500, f"IN holds the sentinel {SENTINEL}")}, 0, [], {(200, 200)})
    assert seen == want, f"(sentinel answers, good calls failed of {got['good']}, their errors, readiness): {seen}"


def test_sentinel_calls_in_a_row_keep_model_ready(stack):
    """Five sentinel calls one after the other, then a good call and the
    model's readiness, ten times (the proxy's probe may heal the model
    between two rounds; one round that sees it failing is enough)."""

    def rounds(base: str) -> set:
        seen = set()
        for r in range(10):
            for _ in range(5):
                http_infer(base, "poisoned", body([SENTINEL]))
            good = http_infer(base, "poisoned", body([r]))
            seen.add((good.status, good.error, http_status(f"{base}/v2/models/poisoned/ready")))
        return seen

    straight = rounds(stack.triton.base_url)
    assert straight == {(200, None, 200)}, straight
    assert rounds(stack.http("default")) == straight


def test_sentinel_stream_straight_to_triton(stack):
    """The reference for the row above: Triton itself fails only the sentinel calls."""
    base = stack.triton.base_url
    answers = [http_infer(base, "poisoned", body([SENTINEL if n % CALLERS == 0 else n])) for n in range(3 * CALLERS)]
    assert {(a.status, a.error) for a in answers[::CALLERS]} == {(500, f"IN holds the sentinel {SENTINEL}")}
    assert all(a.ok for n, a in enumerate(answers) if n % CALLERS), answers
    assert http_status(f"{base}/v2/models/poisoned/ready") == 200


# Errors of each kind Triton answers at once, with the status and
# Content-Type tritonserver 2.51 gives them: application/json for a request
# it cannot take as it is, text/plain for an inference's error. (A queue
# timeout's 503 and a restricted API's 403, text/plain, are compared in
# their own rows.)
JSON = "application/json"
ERRORS = {
    "an input the model lacks": ("fails_on_sentinel", {"inputs": [json_input("X", [[1] * 4])]}, 400, JSON),
    "a shape the model refuses": ("fails_on_sentinel", {"inputs": [json_input("IN", [[1] * 3])]}, 400, JSON),
    "an unknown model": ("unknown", body([1]), 404, "text/plain"),
    "a backend's error": ("fails_on_sentinel", body([SENTINEL]), 500, "text/plain"),
}


@pytest.mark.parametrize("via", ["maxbatch", "default"])
@pytest.mark.parametrize("kind", list(ERRORS))
def test_error_answers(stack, via, kind):
    model, b, status, content_type = ERRORS[kind]
    straight, through = both(stack, via, lambda base: http_infer(base, model, b))
    assert (straight.status, straight.error_content_type) == (status, content_type), straight
    assert_same(straight, through)


# --- what Triton would not batch the same way (issue 61 item 2) --------------


def test_ragged_model_as_triton_runs_it(stack):
    """Recorded: Triton loads allow_ragged_batch with a batch_input in the
    Python backend; the backend gets each request alone, without INDEX."""
    a = http_infer(stack.triton.base_url, "ragged", {"inputs": [json_input("IN", [[1, 2, 3]])]})
    assert a.ok, a
    assert a.body["outputs"][0]["data"] == [3, 0]


def test_ragged_callers_merged(stack):
    bodies = [{"inputs": [json_input("IN", [[k, k, k]])]} for k in range(4)]
    straight, through = both(stack, "maxbatch", merged_http("ragged", bodies))
    assert all(a.ok for a in straight), straight
    assert_same(straight, through)


@pytest.mark.parametrize("via", ["default"])
def test_shape_tensor_model_refused_as_triton(stack, via):
    """Recorded: Triton refuses a Python-backend model with a shape tensor
    (TensorRT only), so shape tensors are checked on config alone; the load
    call's answer through the proxy is Triton's."""
    straight, through = both(
        stack, via, lambda base: http_post(f"{base}/v2/repository/models/shape_tensor/load", {})
    )
    assert straight.status == 400 and "shape tensors are only supported for TensorRT" in straight.error, straight
    assert_same(straight, through)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_cache_hit_for_a_repeated_call(stack, via):
    """Recorded: the same call twice, one after the other: the second is a
    cache hit straight and through the proxy (a lone call goes as it came)."""
    first_value = {"maxbatch": 1000, "default": 2000}[via]  # values no other row caches
    for target, value in (("triton", first_value), (via, first_value + 1)):
        before = stat_counts(stack, "cached")
        first = http_infer(stack.http(target), "cached", body([value]))
        second = http_infer(stack.http(target), "cached", body([value]))
        after = stat_counts(stack, "cached")
        assert first.ok and second == first, (first, second)
        assert after["cache_hit"] - before["cache_hit"] == 1, (target, before, after)


def test_cache_hits_of_concurrent_callers(stack):
    hits = {}
    for target, value in (("triton", 3000), ("maxbatch", 4000)):
        assert http_infer(stack.http(target), "cached", body([value])).ok  # now cached
        before = stat_counts(stack, "cached")
        answers = merged_http("cached", [body([value])] * CALLERS)(stack.http(target))
        assert all(a.ok for a in answers), answers
        hits[target] = stat_counts(stack, "cached")["cache_hit"] - before["cache_hit"]
    assert hits == {"triton": CALLERS, "maxbatch": CALLERS}


def test_rows_merged_deviation(stack):
    """Deviation kept on purpose: batching is the product. A model with
    max_batch_size > 0 declares its rows independent, so its backend sees
    merged requests through the proxy (rows_seen answers the rows it got);
    every row's value is still the caller's own in every other model."""
    bodies = [body([k], width=1) for k in range(CALLERS)]
    straight, through = both(stack, "maxbatch", merged_http("rows_seen", bodies))
    assert {a.body["outputs"][0]["data"][0] for a in straight} == {1}
    assert max(a.body["outputs"][0]["data"][0] for a in through) > 1, through


# --- timeout and priority (issue 61 item 3) ------------------------------------


def held_behind_busy_instance(base: str, model: str, timed: dict) -> Answer:
    """Two 500 ms calls occupy the model's one instance; then TIMED is sent
    (with its own parameters) and waits behind them. Its answer."""
    slow = [threading.Thread(target=http_infer, args=(base, model, body([500], width=1))) for _ in range(2)]
    for t in slow:
        t.start()
        time.sleep(0.05)
    time.sleep(0.1)
    try:
        return http_infer(base, model, timed)
    finally:
        for t in slow:
            t.join()


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_timeout_without_queue_policy(stack, via):
    """maxbatch holds a lone call; under the default it waits behind two slow ones (Triton's too)."""
    timed = body([0], 1, timeout=1000)

    def call(base: str) -> Answer:
        if via == "maxbatch":
            return http_infer(base, "no_queue_policy", timed)
        return held_behind_busy_instance(base, "no_queue_policy", timed)

    straight, through = both(stack, via, call)
    assert straight.ok, straight
    assert_same(straight, through)


def test_timeout_with_queue_policy_queued(stack):
    """allow_timeout_override: a call queued past its timeout is refused by
    both with 503 'Request timeout expired' (Triton when its batcher looks
    at the queue, the proxy at its own deadline)."""
    timed = body([0], 1, timeout=1000)
    straight, through = both(stack, "default", lambda base: held_behind_busy_instance(base, "queue_override", timed))
    assert (straight.status, straight.error) == (503, "Request timeout expired"), straight
    assert_same(straight, through)


@pytest.mark.parametrize("queued", [True, False], ids=["queued", "alone"])
def test_timeout_longer_than_the_default(stack, queued):
    """queue_default: a default timeout of 100 ms that a request's may
    override. Triton counts a request's timeout only where the model allows
    it and it is shorter than a non-zero default: 10 s is not, so a request
    queued behind a busy instance (for 300 ms at least) is refused at the
    default, as the proxy refuses it; one the instance takes at once is
    answered."""
    timed = body([0], 1, timeout=10_000_000)

    def call(base: str) -> Answer:
        if queued:
            return held_behind_busy_instance(base, "queue_default", timed)
        return http_infer(base, "queue_default", timed)

    straight, through = both(stack, "default", call)
    want = (503, "Request timeout expired") if queued else (200, None)
    assert (straight.status, straight.error) == want, straight
    assert_same(straight, through)


def trickled_infer(base: str, model: str, b: dict, pause: float) -> Answer:
    """POST b to model's infer in two halves PAUSE seconds apart, as a
    client on a slow link uploads it."""
    data = json.dumps(b).encode() + b" " * 256 * 1024  # past any first read of the headers
    url = urllib.parse.urlsplit(base if "://" in base else f"http://{base}")

    def halves():
        yield data[: len(data) // 2]
        time.sleep(pause)
        yield data[len(data) // 2 :]

    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data))}
        conn.request("POST", f"/v2/models/{model}/infer", body=halves(), headers=headers)
        r = conn.getresponse()
        return read_http(r.status, r.headers, r.read())
    finally:
        conn.close()


def test_timeout_counts_from_the_queue_not_the_upload(stack):
    """queue_default: Triton starts a request's queue timeout (100 ms here)
    when the request enters its scheduler's queue, after its body is in
    (PolicyQueue::Enqueue), so a body uploaded over 300 ms is answered;
    the proxy's queue counts from the same moment, not from the headers."""
    straight, through = both(stack, "default", lambda base: trickled_infer(base, "queue_default", body([0], 1), 0.3))
    assert straight.ok, straight
    assert_same(straight, through)


@pytest.mark.parametrize("model", ["no_queue_policy", "queue_override"])
@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_timeout_max_http(stack, via, model):
    straight, through = both(stack, via, lambda base: http_infer(base, model, body([0], 1, timeout=2**63 - 1)))
    assert straight.ok, straight
    assert_same(straight, through)


def test_timeout_max_grpc(stack):
    straight, through = (
        grpc_infer(stack.grpc(v), "no_queue_policy", 0, 1, timeout=2**63 - 1) for v in ("triton", "default")
    )
    assert straight.ok, straight
    assert_same(straight, through)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
@pytest.mark.parametrize("priority", [1, 2**63, 2**64 - 1], ids=["1", "2^63", "2^64-1"])
def test_priority(stack, via, priority):
    straight, through = both(
        stack, via, lambda base: http_infer(base, "priority_levels", body([5], priority=priority))
    )
    assert straight.ok, straight
    assert_same(straight, through)

    straight, through = (grpc_infer(stack.grpc(v), "priority_levels", 5, priority=priority) for v in ("triton", via))
    assert_same(straight, through)


# --- headers Triton forwards as parameters (issue 61 item 4) ------------------

@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_forwarded_header_http(stack, via):
    """Four callers of different tenants released together: each its own tenant's answer."""

    def call(base: str) -> list[Answer]:
        return concurrently(
            [lambda k=k: http_infer(base, "tenant", body([1]), {"X-Tenant": str(k + 1)}) for k in range(4)]
        )

    straight = call(stack.http("triton"))
    assert [a.body["outputs"][0]["data"][0] for a in straight] == [2, 3, 4, 5], straight
    assert_same(straight, call(stack.http(via)))


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_forwarded_header_grpc(stack, via):
    def call(url: str) -> list[Answer]:
        return concurrently(
            [lambda k=k: grpc_infer(url, "tenant", 1, headers={"x-tenant": str(k + 1)}) for k in range(4)]
        )

    straight = call(stack.grpc("triton"))
    assert [a.body["OUT"][2][0][0] for a in straight] == [2, 3, 4, 5], straight
    assert_same(straight, call(stack.grpc(via)))


# --- gRPC shared memory beside raw contents (issue 61 item 5) -----------------


def grpc_pair(url: str, region: str, both_in_shm: bool) -> Answer:
    """tritonclient.grpc on `pair` with A in system shared memory and B in
    shared memory too or set from numpy (then raw_input_contents holds B only)."""
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    b = np.full((1, 4), 10, dtype=np.int32)
    c = grpcclient.InferenceServerClient(url)
    handles, names = [], []
    try:
        inputs = []
        for name, value in (("A", a), ("B", b)):
            i = grpcclient.InferInput(name, [1, 4], "INT32")
            if name == "A" or both_in_shm:
                r = f"{region}-{name}"
                handles.append(shm_region(r, value))
                c.register_system_shared_memory(r, f"/{r}", value.nbytes)
                names.append(r)
                i.set_shared_memory(r, value.nbytes)
            else:
                i.set_data_from_numpy(value)
            inputs.append(i)
        return grpc_answer(lambda: c.infer("pair", inputs), ("SUM",))
    finally:
        for r in names:
            unregister_when_free(c, r)
        for h in handles:
            shm.destroy_shared_memory_region(h)


def unregister_when_free(c, region: str) -> None:
    """Unregister region with tritonclient's c (HTTP or gRPC), waiting (up to 2 s) while Triton says it is in
    use: Triton lets go of a request's regions after it has sent the
    answer, so an unregister right after it can find the region still
    held, straight as through the proxy, on a busy host."""
    deadline = time.monotonic() + 2
    while True:
        try:
            c.unregister_system_shared_memory(region)
            return
        except InferenceServerException as e:
            if "currently in use" not in e.message() or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_grpc_shared_memory_beside_raw_contents(stack, via):
    straight = grpc_pair(stack.grpc("triton"), f"rb-conf-mixed-t-{via}", both_in_shm=False)
    assert straight.ok, straight
    assert_same(straight, grpc_pair(stack.grpc(via), f"rb-conf-mixed-p-{via}", both_in_shm=False))


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_grpc_shared_memory_every_input(stack, via):
    straight = grpc_pair(stack.grpc("triton"), f"rb-conf-shm-t-{via}", both_in_shm=True)
    assert straight.ok, straight
    assert_same(straight, grpc_pair(stack.grpc(via), f"rb-conf-shm-p-{via}", both_in_shm=True))


# --- what the proxy does to each model (DROPIN.md) ---------------------------


def expected_mode(config: dict) -> tuple[str, str]:
    """The mode DROPIN.md's table gives a model of this configuration
    (Triton's JSON), and how its reason begins."""
    passed = "passed through"
    if config.get("max_batch_size", 0) <= 0:
        return passed, "max_batch_size is 0"
    if config.get("sequence_batching"):
        return passed, "sequence batching"
    if (config.get("model_transaction_policy") or {}).get("decoupled"):
        return passed, "decoupled"
    if any(i.get("allow_ragged_batch") for i in config.get("input", [])):
        return passed, "ragged input"
    if config.get("batch_input"):
        return passed, "batch_input"
    if (config.get("response_cache") or {}).get("enable"):
        return passed, "response cache"
    return "batched", ""


def modes_by_config(stack: Stack) -> dict[str, tuple[str, str]]:
    """Each model of the suite's repository: its mode by its configuration
    as Triton reads it; an unloaded model is not served."""
    modes = {}
    for name in LOADED + UNLOADED:
        status, raw = http_get(f"{stack.triton.base_url}/v2/models/{name}/config")
        modes[name] = expected_mode(json.loads(raw)) if status == 200 else ("not served", "")
    reasons = {why for _, why in modes.values()}
    assert reasons >= {"max_batch_size is 0", "sequence batching", "decoupled", "ragged input", "response cache", ""}
    return modes


def assert_modes(listed: list[dict], want: dict[str, tuple[str, str]]) -> None:
    """Every model of want is listed with its mode and a reason that begins as want's."""
    got = {m["model"]: (m["mode"], m.get("reason", "")) for m in listed}
    def right(name: str, mode: str, why: str) -> bool:
        return name in got and got[name][0] == mode and got[name][1].startswith(why)

    wrong = {n: got.get(n) for n, (mode, why) in want.items() if not right(n, mode, why)}
    assert not wrong, f"listed {wrong}; by each model's configuration {[(n, want[n]) for n in wrong]}"


def test_models_command(stack, ratebatch_bin):
    """`ratebatch models --upstream` names each model with its mode and why."""
    argv = [ratebatch_bin, "models", "--upstream", stack.triton.base_url, "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert_modes(json.loads(out.stdout), modes_by_config(stack))


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_status_names_each_mode(stack, via):
    """A running proxy's /status says the same of the models the upstream
    serves; one it does not serve (unloaded) leaves the list, as DROPIN.md
    says, unless the proxy's configuration names it."""
    _, raw = http_get(stack.admin(via) + "/status")
    listed = json.loads(raw)["models"]
    served = {n: m for n, m in modes_by_config(stack).items() if m[0] != "not served"}
    assert_modes(listed, served)
    assert not {m["model"] for m in listed} & set(UNLOADED), listed


# --- the repository API (issue 61 item 6) --------------------------------------


def test_unload_and_load_through_the_proxy(stack):
    """Unload through the proxy: calls get Triton's 'unknown model' answer; load again: answered."""
    base = stack.http("maxbatch")
    call = lambda b: http_infer(b, "reloadable", body([1], 1))  # noqa: E731
    assert http_post(f"{base}/v2/repository/models/reloadable/unload", {}).ok
    try:
        straight = poll(lambda: (a := call(stack.triton.base_url)).status == 404 and a, 10)
        assert straight and "unknown model" in straight.error, straight
        assert_same(straight, call(base))
    finally:
        assert http_post(f"{base}/v2/repository/models/reloadable/load", {}).ok
    assert_same(call(stack.triton.base_url), call(base))


def reload_config(config: dict) -> dict:
    """A repository load's parameters that load the model with config
    (Triton keeps a config so loaded until a load gives another)."""
    return {"parameters": {"config": json.dumps(config)}}


def mode_of(stack: Stack, via: str, model: str) -> tuple[str, str]:
    """Proxy VIA's mode for model, and why, from its /status."""
    _, raw = http_get(stack.admin(via) + "/status")
    return next((m["mode"], m.get("reason", "")) for m in json.loads(raw)["models"] if m["model"] == model)


def test_model_reloaded_through_either_door(stack):
    """A repository load through either door re-decides the model's mode:
    `reloadable` reloaded as max_batch_size 0 through the gRPC door
    (RepositoryModelLoad) is passed through at once, so that callers
    released together reach Triton each alone, as straight; reloaded with
    its own configuration through the HTTP door, it is batched again."""
    _, raw = http_get(f"{stack.triton.base_url}/v2/models/reloadable/config")
    original, config = json.loads(raw), json.loads(raw)
    config["max_batch_size"] = 0
    config["input"][0]["dims"] = [-1, 1]
    config["output"][0]["dims"] = [-1, 1]
    grpcclient.InferenceServerClient(stack.grpc("maxbatch")).load_model("reloadable", config=json.dumps(config))
    base = stack.http("maxbatch")
    try:
        mode = poll(lambda: (m := mode_of(stack, "maxbatch", "reloadable"))[0] == "passed through" and m, 10)
        assert mode and mode[1].startswith("max_batch_size is 0"), mode_of(stack, "maxbatch", "reloadable")
        bodies = [{"inputs": [json_input("IN", [[k]])]} for k in range(CALLERS)]
        straight, through = both(stack, "maxbatch", merged_http("reloadable", bodies))
        assert [a.body["outputs"][0]["data"] for a in straight] == [[1]] * CALLERS, straight
        assert_same(straight, through)
    finally:
        assert http_post(f"{base}/v2/repository/models/reloadable/load", reload_config(original)).ok
    batched = poll(lambda: mode_of(stack, "maxbatch", "reloadable")[0] == "batched", 10)
    assert batched, mode_of(stack, "maxbatch", "reloadable")


# --- streams and long calls (issue 61 item 7) ----------------------------------


def sse_events(base: str, count: int, interval_ms: int) -> tuple[int, str | None, list[str], str | None]:
    """generate_stream on `stream`: status, Content-Type, the data events, and how it ended."""
    events: list[str] = []
    try:
        with requests.post(
            f"{base}/v2/models/stream/generate_stream",
            json={"COUNT": count, "INTERVAL_MS": interval_ms},
            stream=True,
            timeout=30,
        ) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line.decode())
            return r.status_code, r.headers.get("Content-Type"), events, None
    except requests.RequestException as e:
        return -1, None, events, type(e).__name__


def test_http_stream_longer_than_write_timeout(stack):
    straight, through = concurrently([lambda v=v: sse_events(stack.http(v), *STREAM) for v in ("triton", "short")])
    assert straight[0] == 200 and len(straight[2]) == STREAM[0], straight
    assert through == straight


def grpc_stream(url: str, count: int, interval_ms: int) -> list[tuple]:
    c = grpcclient.InferenceServerClient(url)
    got: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    answers = []
    try:
        inputs = []
        for name, v in (("COUNT", count), ("INTERVAL_MS", interval_ms)):
            i = grpcclient.InferInput(name, [1], "INT32")
            i.set_data_from_numpy(np.array([v], dtype=np.int32))
            inputs.append(i)
        c.async_stream_infer("stream", inputs)
        while len(answers) < count:
            r, e = got.get(timeout=30)
            if e is not None:
                answers.append(("error", e.status(), e.message()))
                break
            answers.append(("ok", r.as_numpy("OUT").tolist()))
    finally:
        c.stop_stream()
    return answers


def test_grpc_stream_longer_than_write_timeout(stack):
    """ModelStreamInfer lasting 2 s through a proxy whose write timeout is 1 s: every answer arrives."""
    straight, through = concurrently([lambda v=v: grpc_stream(stack.grpc(v), *STREAM) for v in ("triton", "short")])
    assert straight == [("ok", [i]) for i in range(STREAM[0])]
    assert through == straight


def test_batched_call_longer_than_upstream_timeout(stack):
    """Deviation documented (CONFIG.md, "Timeouts"), the operator's choice:
    Triton bounds no call's wait, nor does the proxy by default (200 as
    Triton); with upstream_client.timeout set, a batch one of whose callers
    has no deadline (an HTTP caller) is answered 504 at it."""
    call = lambda base: http_infer(base, "no_queue_policy", body([LONG_MS], 1))  # noqa: E731
    straight = call(stack.http("triton"))
    assert straight.ok, straight
    assert_same(straight, call(stack.http("default")))
    started = time.monotonic()
    through = call(stack.http("short"))
    took = time.monotonic() - started
    assert (through.status, through.error) == (504, "upstream did not answer model 'no_queue_policy' in time")
    assert took >= SHORT_S, f"504 after {took:.2f}s, before upstream_client.timeout ({SHORT})"


def test_grpc_deadline_bounds_the_batch(stack):
    """A gRPC caller's own deadline bounds its batch, not upstream_client.timeout:
    a deadline shorter than the call gets DEADLINE_EXCEEDED as straight to
    Triton (queue_override, whose one instance goes on with the call given
    up); one longer than the call is answered, through the short proxy too,
    whose upstream_client.timeout the call outlasts."""
    short = [grpc_infer(stack.grpc(v), "queue_override", 600, 1, client_timeout=0.2) for v in ("triton", "default")]
    assert short[0].status == "DEADLINE_EXCEEDED", short[0]
    assert_same(*short)
    long = [grpc_infer(stack.grpc(v), "no_queue_policy", LONG_MS, 1, client_timeout=10) for v in ("triton", "short")]
    assert long[0].ok, long[0]
    assert_same(*long)


# --- sequences --------------------------------------------------------------------


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_sequence(stack, via):
    """A sequence (start, middle, end) over HTTP and gRPC: the same running sums."""

    def http(base: str, sid: int) -> list[Answer]:
        out = []
        for k, v in enumerate((3, 4, 5)):
            params = {"sequence_id": sid, "sequence_start": k == 0, "sequence_end": k == 2}
            out.append(http_infer(base, "sequence", body([v], 1, **params)))
        return out

    def grpc(url: str, sid: int) -> list[Answer]:
        return [
            grpc_infer(url, "sequence", v, 1, sequence_id=sid, sequence_start=k == 0, sequence_end=k == 2)
            for k, v in enumerate((3, 4, 5))
        ]

    sid = 100 if via == "maxbatch" else 200
    straight = http(stack.triton.base_url, sid + 1)
    assert [a.body["outputs"][0]["data"] for a in straight] == [[3], [7], [12]], straight
    assert_same(straight, http(stack.http(via), sid + 2))
    assert_same(grpc(stack.triton.grpc_url, sid + 3), grpc(stack.grpc(via), sid + 4))


# --- statistics (issue 61 item 8) ------------------------------------------------


def test_statistics_count_requests_triton_received(stack):
    """Deviation kept on purpose (a merged batch is one request to Triton):
    eight calls merged through the proxy add fewer than eight to Triton's
    success.count; straight they add eight."""
    added = {}
    for via in ("triton", "maxbatch"):
        run = merged_http("fails_on_sentinel", [body([k]) for k in range(CALLERS)])
        answers, added[via] = requests_received(stack, "fails_on_sentinel", lambda: run(stack.http(via)))
        assert all(a.ok for a in answers), answers
    assert added["triton"] == CALLERS
    assert 1 <= added["maxbatch"] < CALLERS, added


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_statistics_relayed(stack, via):
    """GET /v2/models/M/stats through the proxy is Triton's own answer."""
    path = "/v2/models/priority_levels/stats"
    straight, through = http_get(stack.triton.base_url + path), http_get(stack.http(via) + path)
    assert straight[0] == 200
    assert json.loads(through[1]) == json.loads(straight[1])


def test_differ_names_the_callers_that_differ():
    """The comparison the table relies on tells answers apart, by their error's Content-Type too."""
    ok = Answer(200, body={"outputs": [1]})
    assert differ([ok, ok], [ok, Answer(200, body={"outputs": [2]})])[0].startswith("caller 1:")
    text, json_ = (Answer(500, "x", error_content_type=t) for t in ("text/plain", "application/json"))
    assert differ([text], [json_])
    assert not differ([text], [Answer(500, "x", error_content_type="text/plain")])
    assert differ([Answer(500, "x")], [Answer(503, "x")])
