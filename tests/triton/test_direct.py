"""Facts about the Triton test server itself: it binds loopback only, its
flags reach Triton's model config, Triton's dynamic batching is off or on as
asked, and its metrics, gRPC and access-token behaviour are Triton's.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import SERVER, TritonServer, http_get, http_request, start_triton
from server import IMAGE_CLASSES, IMAGE_SHAPE, VECTOR_LEN, image_reference

QUEUE_DELAY_US = 20000
TOKEN = "test-token"


@pytest.fixture(scope="module")
def batching_triton(tmp_path_factory):
    """A second server: Triton's dynamic batcher on, PyTriton's access token on."""
    server = start_triton(
        tmp_path_factory.mktemp("batching"),
        "--dynamic-batching", "on",
        "--max-queue-delay-us", str(QUEUE_DELAY_US),
        "--tau0-ms", "5",
        "--access-token", TOKEN,
    )  # fmt: skip
    yield server
    server.stop()


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on port, from /proc/net.

    IPv4-mapped IPv6 addresses (gRPC listens on those) are given as IPv4.
    """
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A = LISTEN
                continue
            raw = bytes.fromhex(addr_hex)
            # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            addr = ipaddress.ip_address(raw)
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                addr = addr.ipv4_mapped
            found.add(str(addr))
    return found


def test_listeners_are_loopback_only(triton: TritonServer):
    for port in (triton.http_port, triton.grpc_port, triton.metrics_port):
        addrs = listening_addresses(port)
        assert addrs, f"nothing listens on {port}"
        assert addrs <= {"127.0.0.1", "::1"}, (port, addrs)


def test_startup_time(triton: TritonServer):
    # Not a benchmark: a ceiling that catches a server stuck in start-up.
    assert triton.startup_s < 60, triton.startup_s


def test_grpc_endpoint(triton: TritonServer):
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    assert c.is_server_ready()
    a = np.arange(VECTOR_LEN, dtype=np.int32).reshape(1, -1)
    i0 = grpcclient.InferInput("INPUT0", [1, VECTOR_LEN], "INT32")
    i0.set_data_from_numpy(a)
    i1 = grpcclient.InferInput("INPUT1", [1, VECTOR_LEN], "INT32")
    i1.set_data_from_numpy(a)
    r = c.infer("simple", [i0, i1])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
    c.close()


def test_metrics_endpoint(triton: TritonServer):
    status, body = http_get(triton.metrics_url)
    assert status == 200
    text = body.decode()
    for series in (
        'nv_inference_request_success{model="simple",version="1"}',
        'nv_inference_count{model="image",version="1"}',
    ):
        assert series in text
    # No GPU here: no energy or power series for a power source to read.
    assert "nv_energy_consumption" not in text


def batch_sizes_executed(client, model: str, headers=None) -> dict[int, int]:
    """Executions per batch size so far, from Triton's statistics."""
    (s,) = client.get_inference_statistics(model, "1", headers=headers)["model_stats"]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]}


def send_concurrently(server: TritonServer, n: int, headers=None) -> None:
    """n single-row simple requests from n threads at once."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def one(k: int):
        try:
            c = httpclient.InferenceServerClient(server.url)
            a = np.full((1, VECTOR_LEN), k, dtype=np.int32)
            inputs = [httpclient.InferInput(name, [1, VECTOR_LEN], "INT32") for name in ("INPUT0", "INPUT1")]
            for i in inputs:
                i.set_data_from_numpy(a)
            barrier.wait(timeout=10)
            r = c.infer("simple", inputs, headers=headers)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
        except BaseException as e:  # collected and re-raised in the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def delta(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    return {b: after[b] - before.get(b, 0) for b in after if after[b] != before.get(b, 0)}


def test_dynamic_batching_off_executes_each_request_alone(triton: TritonServer):
    c = httpclient.InferenceServerClient(triton.url)
    assert "dynamic_batching" not in c.get_model_config("simple")
    before = batch_sizes_executed(c, "simple")
    send_concurrently(triton, 16)
    assert delta(batch_sizes_executed(c, "simple"), before) == {1: 16}


def test_dynamic_batching_on_merges_concurrent_requests(batching_triton: TritonServer):
    headers = {"triton-access-token": TOKEN}
    c = httpclient.InferenceServerClient(batching_triton.url)
    cfg = c.get_model_config("simple")
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == QUEUE_DELAY_US
    before = batch_sizes_executed(c, "simple", headers)
    send_concurrently(batching_triton, 16)
    executed = delta(batch_sizes_executed(c, "simple", headers), before)
    assert sum(b * n for b, n in executed.items()) == 16, executed
    assert max(executed) > 1, f"Triton executed every request alone: {executed}"
    assert max(executed) <= 8, executed


@pytest.mark.parametrize(
    "path, headers, want",
    [
        ("/v2/models/simple/stats", {}, 403),
        ("/v2/models/simple/stats", {"triton-access-token": "wrong"}, 403),
        ("/v2/models/simple/stats", {"triton-access-token": TOKEN}, 200),
        ("/v2/models/simple/config", {}, 200),  # not in the protected set
        ("/v2/health/ready", {}, 200),
    ],
)
def test_access_token(batching_triton: TritonServer, path, headers, want):
    status, body = http_request("GET", batching_triton.base_url + path, None, headers=headers)
    assert status == want, body


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--http-port", "0"], "--http-port 0: want a port in 1..65535"),
        (["--http-port", "9000", "--grpc-port", "9000"], "must differ"),
        (["--max-batch-size", "0"], "--max-batch-size 0: want >= 1"),
        (["--max-queue-delay-us", "100"], "--max-queue-delay-us needs --dynamic-batching on"),
        (["--dynamic-batching", "maybe"], "invalid choice: 'maybe'"),
        (["--tau0-ms", "-1"], "--tau0-ms and --alpha-ms must be >= 0"),
    ],
)
def test_server_rejects_bad_flags(flags, message):
    run = subprocess.run([sys.executable, str(SERVER), *flags], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert message in run.stderr


def test_image_reference():
    ones = np.ones((2, *IMAGE_SHAPE), dtype=np.float32)
    got = image_reference(ones)
    n = int(np.prod(IMAGE_SHAPE))  # 150528 = 150 * 1000 + 528
    want_row = np.array([n // IMAGE_CLASSES + (k < n % IMAGE_CLASSES) for k in range(IMAGE_CLASSES)], np.float32)
    np.testing.assert_array_equal(got, np.stack([want_row, want_row]))
    # each row depends on its own input only
    x = np.zeros((3, *IMAGE_SHAPE), dtype=np.float32)
    x[1, 0, 0, 5] = 7.0
    got = image_reference(x)
    assert got[1, 5] == 7.0
    assert got.sum() == 7.0
