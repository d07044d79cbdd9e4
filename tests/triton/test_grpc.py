"""Triton's gRPC door: tritonclient.grpc against a real Triton, directly and
through `ratebatch serve --grpc-listen`.

The module runs its own Triton (the session's flags plus --decoupled, for the
streamed `countdown` model) and a proxy with the gRPC door in front of it.
Inference of the batched models goes to the proxy's queues; every other call
is relayed, so its answer must equal Triton's own, message for message.
Batching is proven by Triton's own statistics (its default scheduler executes
every request it receives alone).
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import SESSION_SERVER_FLAGS, Door, TritonServer, start_door, start_triton
from server import IMAGE_SHAPE, VECTOR_LEN, image_reference

CALLERS = 16


@pytest.fixture(scope="module")
def gtriton(tmp_path_factory):
    server = start_triton(tmp_path_factory.mktemp("triton-grpc"), *SESSION_SERVER_FLAGS, "--decoupled")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def door(ratebatch_bin, gtriton, tmp_path_factory):
    d = start_door(ratebatch_bin, gtriton, tmp_path_factory.mktemp("proxy-grpc"), "--policy", "adhoc")
    yield d
    d.proxy.stop()


def simple_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    out = []
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        i = grpcclient.InferInput(name, list(x.shape), "INT32")
        i.set_data_from_numpy(x)
        out.append(i)
    return out


def caller_inputs(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Caller k's inputs: 1 or 2 rows, values unique to k."""
    rows = 2 if k % 3 == 0 else 1
    a = (np.arange(rows * VECTOR_LEN, dtype=np.int32).reshape(rows, VECTOR_LEN) + 1000 * k).astype(np.int32)
    return a, np.full((rows, VECTOR_LEN), 7 * k + 1, dtype=np.int32)


def triton_stats(triton: TritonServer, model: str = "simple") -> dict:
    """Triton's own statistics, read from Triton itself."""
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    (s,) = c.get_inference_statistics(model, "1", as_json=True)["model_stats"]
    return {
        "inferences": int(s.get("inference_count", 0)),
        "executions": int(s.get("execution_count", 0)),
        "batches": {int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in s.get("batch_stats", [])},
    }


def stats_delta(before: dict, after: dict) -> tuple[int, int, dict]:
    old = before["batches"]
    batches = {b: n - old.get(b, 0) for b, n in after["batches"].items() if n != old.get(b, 0)}
    return after["inferences"] - before["inferences"], after["executions"] - before["executions"], batches


@pytest.mark.parametrize("rows", [1, 3])
def test_grpc_infer(door, gtriton, rows):
    for url in (gtriton.grpc_url, door.grpc_url):
        c = grpcclient.InferenceServerClient(url)
        a = np.arange(rows * VECTOR_LEN, dtype=np.int32).reshape(rows, VECTOR_LEN)
        b = np.full((rows, VECTOR_LEN), 3, dtype=np.int32)
        r = c.infer("simple", simple_inputs(a, b), request_id=f"req-{rows}")
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        resp = r.get_response()
        assert resp.id == f"req-{rows}", url
        assert (resp.model_name, resp.model_version) == ("simple", "1"), url
        # one output asked for: only it comes back
        r = c.infer("simple", simple_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
        assert [o.name for o in r.get_response().outputs] == ["OUTPUT1"], url
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        # the image model, 600 KB a row
        x = np.random.default_rng(rows).random((rows, *IMAGE_SHAPE), dtype=np.float32)
        i = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        r = c.infer("image", [i])
        np.testing.assert_allclose(r.as_numpy("OUTPUT"), image_reference(x), rtol=1e-5)
        # compressed both ways, as Triton's server accepts it
        for alg in ("gzip", "deflate"):
            r = c.infer("simple", simple_inputs(a, b), compression_algorithm=alg)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def test_grpc_async_infer(door):
    c = grpcclient.InferenceServerClient(door.grpc_url)
    results: queue.Queue = queue.Queue()

    def on_result(k, result, error):
        results.put((k, result, error))

    for k in range(8):
        a, b = caller_inputs(k)
        c.async_infer("simple", simple_inputs(a, b), partial(on_result, k), request_id=str(k))
    for _ in range(8):
        k, r, e = results.get(timeout=30)
        assert e is None, e
        a, b = caller_inputs(k)
        assert r.get_response().id == str(k)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def answer(call):
    """A call's answer, or its error's status and message: both must match."""
    try:
        return ("ok", call())
    except InferenceServerException as e:
        return ("error", e.status(), e.message())


# Every relayed call of tritonclient.grpc, with arguments that answer and
# ones that fail: the proxy must give Triton's own answer for each.
RELAYED = {
    "is_server_live": lambda c: c.is_server_live(),
    "is_server_ready": lambda c: c.is_server_ready(),
    "is_model_ready": lambda c: [c.is_model_ready(m) for m in ("simple", "image", "countdown", "nosuch")],
    "server_metadata": lambda c: c.get_server_metadata(),
    "model_metadata simple": lambda c: c.get_model_metadata("simple"),
    "model_metadata image v1": lambda c: c.get_model_metadata("image", "1"),
    "model_metadata countdown": lambda c: c.get_model_metadata("countdown"),
    "model_metadata nosuch": lambda c: c.get_model_metadata("nosuch"),
    "model_config simple": lambda c: c.get_model_config("simple"),
    "model_config countdown": lambda c: c.get_model_config("countdown"),
    "model_config nosuch": lambda c: c.get_model_config("nosuch"),
    "statistics image": lambda c: c.get_inference_statistics("image"),
    "statistics nosuch": lambda c: c.get_inference_statistics("nosuch"),
    "repository_index": lambda c: c.get_model_repository_index(),
    "load nosuch": lambda c: c.load_model("nosuch"),
    "unload nosuch": lambda c: c.unload_model("nosuch"),
    "system_shm_status": lambda c: c.get_system_shared_memory_status(),
    "system_shm_unregister": lambda c: c.unregister_system_shared_memory("nosuch"),
    "system_shm_register bad": lambda c: c.register_system_shared_memory("r", "/nosuch-ratebatch", 64),
    "cuda_shm_status": lambda c: c.get_cuda_shared_memory_status(),
    "trace_settings": lambda c: c.get_trace_settings(),
    "log_settings": lambda c: c.get_log_settings(),
}


@pytest.mark.parametrize("name", list(RELAYED))
def test_grpc_relayed_calls_answer_as_triton(door, gtriton, name):
    call = RELAYED[name]
    direct = answer(lambda: call(grpcclient.InferenceServerClient(gtriton.grpc_url)))
    proxied = answer(lambda: call(grpcclient.InferenceServerClient(door.grpc_url)))
    assert proxied == direct


def test_grpc_decoupled_stream(door, gtriton):
    def stream(url: str, counts: list[int]) -> list[list[int]]:
        c = grpcclient.InferenceServerClient(url)
        got: queue.Queue = queue.Queue()
        c.start_stream(callback=lambda result, error: got.put((result, error)))
        answers = []
        try:
            for n in counts:
                i = grpcclient.InferInput("IN", [1], "INT32")
                i.set_data_from_numpy(np.array([n], dtype=np.int32))
                c.async_stream_infer("countdown", [i], request_id=f"n{n}")
                seen = []
                for _ in range(n):  # each answer arrives before the next request is sent
                    r, e = got.get(timeout=30)
                    assert e is None, e
                    assert r.get_response().id == f"n{n}"
                    seen.append(int(r.as_numpy("OUT")[0]))
                answers.append(seen)
        finally:
            c.stop_stream()
        return answers

    want = [[3, 2, 1], [1], [5, 4, 3, 2, 1]]
    assert stream(gtriton.grpc_url, [3, 1, 5]) == want
    assert stream(door.grpc_url, [3, 1, 5]) == want


def call_concurrently(http_urls: list[str], grpc_urls: list[str]) -> list[BaseException]:
    """One caller per URL, released together; each checks its own answer."""
    n = len(http_urls) + len(grpc_urls)
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def caller(k: int, url: str, grpc: bool) -> None:
        try:
            a, b = caller_inputs(k)
            if grpc:
                c = grpcclient.InferenceServerClient(url)
                inputs = simple_inputs(a, b)
            else:
                c = httpclient.InferenceServerClient(url, network_timeout=30.0)
                inputs = []
                for name, x in (("INPUT0", a), ("INPUT1", b)):
                    i = httpclient.InferInput(name, list(x.shape), "INT32")
                    i.set_data_from_numpy(x)
                    inputs.append(i)
            barrier.wait(timeout=10)
            r = c.infer("simple", inputs, request_id=f"caller-{k}")
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
            got_id = r.get_response().id if grpc else r.get_response()["id"]
            assert got_id == f"caller-{k}"
        except BaseException as e:  # collected and re-raised by the test
            errors.append(e)

    callers = [(u, False) for u in http_urls] + [(u, True) for u in grpc_urls]
    threads = [threading.Thread(target=caller, args=(k, u, g)) for k, (u, g) in enumerate(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return errors


def test_grpc_callers_are_batched(door, gtriton):
    call_concurrently([], [door.grpc_url])  # the first call teaches the proxy the model
    before = triton_stats(gtriton)
    errors = call_concurrently([], [door.grpc_url] * CALLERS)
    assert not errors, errors[:3]
    rows = sum(caller_inputs(k)[0].shape[0] for k in range(CALLERS))
    inferences, executions, batches = stats_delta(before, triton_stats(gtriton))
    assert inferences == rows
    assert sum(b * n for b, n in batches.items()) == rows, batches
    assert executions < CALLERS, f"Triton executed {executions} times for {CALLERS} gRPC requests: {batches}"
    assert max(batches) > 1, batches


def test_http_and_grpc_callers_share_one_batch(ratebatch_bin, gtriton, tmp_path):
    # static 2: a batch leaves only with two rows (or after 30 s), so the one
    # HTTP caller and the one gRPC caller, each of one row, must share it.
    d = start_door(
        ratebatch_bin, gtriton, tmp_path, "--policy", "static", "--policy-batch", "2", "--policy-wait-bound", "30s"
    )
    try:
        hc = httpclient.InferenceServerClient(d.proxy.url)
        assert hc.get_model_config("simple")  # discovery before the timed part
        # Teach the proxy the model through each door first, with caller
        # 0's two rows: a full batch that leaves at once (a lone row would
        # wait out the bound).
        assert call_concurrently([d.proxy.url], []) == []
        assert call_concurrently([], [d.grpc_url]) == []
        before = triton_stats(gtriton)
        started = time.monotonic()
        # caller 0 has 2 rows in caller_inputs: use callers 1 and 2 (one row each)
        errors = []
        for _ in range(3):
            errors += call_concurrently_pair(d)
        assert not errors, errors[:3]
        assert time.monotonic() - started < 25, "a pair waited for the static bound: not batched together"
        inferences, executions, batches = stats_delta(before, triton_stats(gtriton))
        assert (inferences, executions, batches) == (6, 3, {2: 3})
    finally:
        d.proxy.stop()


def call_concurrently_pair(d: Door) -> list[BaseException]:
    """HTTP caller 1 and gRPC caller 2 at once (one row each)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(k: int, grpc: bool):
        try:
            a, b = caller_inputs(k)
            assert a.shape[0] == 1
            if grpc:
                c = grpcclient.InferenceServerClient(d.grpc_url)
                inputs = simple_inputs(a, b)
            else:
                c = httpclient.InferenceServerClient(d.proxy.url, network_timeout=60.0)
                inputs = []
                for name, x in (("INPUT0", a), ("INPUT1", b)):
                    i = httpclient.InferInput(name, list(x.shape), "INT32")
                    i.set_data_from_numpy(x)
                    inputs.append(i)
            barrier.wait(timeout=10)
            r = c.infer("simple", inputs)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(1, False)), threading.Thread(target=run, args=(2, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def raw_request(inputs, raw) -> "grpcclient.service_pb2.ModelInferRequest":
    from tritonclient.grpc import service_pb2

    r = service_pb2.ModelInferRequest(model_name="simple")
    for name, dtype, shape in inputs:
        t = r.inputs.add()
        t.name, t.datatype = name, dtype
        t.shape.extend(shape)
    r.raw_input_contents.extend(raw)
    return r


BAD = {
    "raw contents too short": (
        [("INPUT0", "INT32", [1, 16]), ("INPUT1", "INT32", [1, 16])],
        [b"\0" * 60, b"\0" * 64],
        "needs 64 bytes, data has 60",
    ),
    "raw contents for one of two inputs": (
        [("INPUT0", "INT32", [1, 16]), ("INPUT1", "INT32", [1, 16])],
        [b"\0" * 64],
        "raw_input_contents has 1 entries for the inputs not in shared memory",
    ),
    "unknown datatype": (
        [("INPUT0", "FP8", [1, 16]), ("INPUT1", "INT32", [1, 16])],
        [b"\0" * 64, b"\0" * 64],
        "unknown datatype 'FP8'",
    ),
    "huge declared shape": (
        [("INPUT0", "INT32", [1, 1 << 40]), ("INPUT1", "INT32", [1, 1 << 40])],
        [b"\0" * 64, b"\0" * 64],
        "needs 4398046511104 bytes, data has 64",
    ),
    "shape past int64": (
        [("INPUT0", "INT32", [1, 1 << 40, 1 << 40]), ("INPUT1", "INT32", [1, 16])],
        [b"\0" * 64, b"\0" * 64],
        "too many elements",
    ),
}


def test_grpc_bad_input(door):
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    call_concurrently([], [door.grpc_url])  # the model is known: bad input meets the door's checks
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(door.grpc_url))
    rss_before = rss_kib(door.pid)
    for _ in range(50):
        for name, (inputs, raw, want) in BAD.items():
            with pytest.raises(grpc.RpcError) as exc:
                stub.ModelInfer(raw_request(inputs, raw), timeout=10)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert want in exc.value.details(), (name, exc.value.details())
    grown = rss_kib(door.pid) - rss_before
    assert grown < 64 * 1024, f"RSS grew {grown} KiB over 250 bad requests"
    # still serving
    a, b = caller_inputs(1)
    r = grpcclient.InferenceServerClient(door.grpc_url).infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def test_grpc_stream_stopping_mid_message(door):
    """A client that declares a large message and hangs up part way: the
    door drops the call; the process stays up and memory does not follow
    the declared size."""
    host, port = door.grpc_url.split(":")
    rss_before = rss_kib(door.pid)
    for _ in range(20):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            s.sendall(frame(0x4, 0, 0, b""))  # SETTINGS
            # HEADERS (END_HEADERS) with literal, never-indexed fields
            block = b"".join(
                literal(k, v)
                for k, v in (
                    (b":method", b"POST"),
                    (b":scheme", b"http"),
                    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
                    (b":authority", door.grpc_url.encode()),
                    (b"content-type", b"application/grpc"),
                    (b"te", b"trailers"),
                )
            )
            s.sendall(frame(0x1, 0x4, 1, block))
            # a gRPC message that says 64 MiB and stops after 1 KiB
            s.sendall(frame(0x0, 0, 1, b"\0" + struct.pack(">I", 64 << 20) + b"\0" * 1024))
    time.sleep(0.5)
    assert door.proxy.process.exited() is None, door.proxy.process.output()
    grown = rss_kib(door.pid) - rss_before
    assert grown < 64 * 1024, f"RSS grew {grown} KiB over 20 broken streams"
    a, b = caller_inputs(1)
    r = grpcclient.InferenceServerClient(door.grpc_url).infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame."""
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field, never indexed, names and values < 127 bytes."""
    return b"\x10" + bytes([len(name)]) + name + bytes([len(value)]) + value


def test_grpc_health_and_door_metrics(door):
    import json

    import grpc

    from conftest import http_get

    # grpc.health.v1 Check for the whole server: HealthCheckResponse{status: SERVING} is 08 01.
    check = grpc.insecure_channel(door.grpc_url).unary_unary(
        "/grpc.health.v1.Health/Check", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    assert check(b"", timeout=5) == b"\x08\x01"

    call_concurrently([door.proxy.url], [door.grpc_url])
    status, body = http_get(door.proxy.admin_url + "/metrics")
    assert status == 200
    text = body.decode()
    for series in (
        'ratebatch_request_duration_seconds_count{model="simple",protocol="grpc"}',
        'ratebatch_request_duration_seconds_count{model="simple",protocol="http"}',
        'ratebatch_passthrough_requests_total{protocol="grpc"}',
    ):
        assert series in text, series
    status, body = http_get(door.proxy.admin_url + "/status")
    doors = json.loads(body)["doors"]
    assert doors["grpc"]["batched_answered"] > 0 and doors["http"]["batched_answered"] > 0, doors
    assert doors["grpc"]["passthrough"] > 0, doors


def test_bench_grpc_block_beside_the_http_one(tmp_path):
    import bench

    doc = tmp_path / "BENCHMARKS.md"
    bench.update_doc(doc, f"{bench.MARK_BEGIN}\nhttp figures\n{bench.MARK_END}\n")
    bench.update_doc(doc, f"{bench.MARK_BEGIN_GRPC}\ngrpc one\n{bench.MARK_END_GRPC}\n", "grpc")
    bench.update_doc(doc, f"{bench.MARK_BEGIN_GRPC}\ngrpc two\n{bench.MARK_END_GRPC}\n", "grpc")
    text = doc.read_text()
    assert text.count(bench.SECTION) == 1 and text.count(bench.SECTION_GRPC) == 1
    assert "http figures" in text and "grpc two" in text and "grpc one" not in text


@pytest.mark.bench
def test_bench_grpc_smoke(ratebatch_bin, tmp_path):
    """One rate, short windows, over gRPC: Triton direct, the proxy relaying
    (passthrough) and the proxy batching (adhoc)."""
    import json
    import subprocess
    import sys

    from conftest import HERE

    out, js = tmp_path / "bench.md", tmp_path / "bench.json"
    argv = [
        sys.executable, str(HERE / "bench.py"), "--protocol", "grpc",
        "--setups", "triton-off,ratebatch-passthrough,ratebatch-adhoc",
        "--rates", "60", "--interval-ms", "1000", "--keep-up", "0.5",
        "--ratebatch-bin", ratebatch_bin, "--out", str(out), "--json", str(js),
    ]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["setup"]: r for r in json.loads(js.read_text())["results"]}
    assert set(results) == {"triton-off", "ratebatch-passthrough", "ratebatch-adhoc"}
    for name, r in results.items():
        assert r["note"] == "", (name, r)
        assert r["throughput"] > 30, (name, r)
        assert "-i grpc" in r["command"], r["command"]
    # passthrough relays every request alone; adhoc may merge them
    assert results["ratebatch-passthrough"]["inferences"] == results["ratebatch-passthrough"]["executions"]
    assert out.read_text().startswith(bench_marker())


def bench_marker() -> str:
    import bench

    return bench.MARK_BEGIN_GRPC
