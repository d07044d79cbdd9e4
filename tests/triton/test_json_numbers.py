"""JSON answers through the proxy are byte for byte Triton's: every datatype
Triton writes as JSON numbers, echoed by the `echo` model, once straight from
Triton and once through ratebatch. A caller alone in its batch gets Triton's
answer as it came; callers batched together get answers the proxy writes
itself from Triton's binary answer (kserve/grisu.go), so those go through a
proxy that batches two callers at a time (`static`, batch 2)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import bench
from conftest import RatebatchProxy, TritonServer, http_get, http_request, start_ratebatch
from server import ECHO_DATATYPES


@pytest.fixture(scope="module")
def pairing(ratebatch_bin, triton: TritonServer, tmp_path_factory) -> RatebatchProxy:
    """A proxy that sends two callers per batch (a lone one after 2 s).

    PyTriton's repository index lists no models, so the proxy learns `echo`
    from its first request; the first pair also checks that a request
    arriving during that lookup waits for it and is batched."""
    p = start_ratebatch(
        ratebatch_bin, triton.base_url, tmp_path_factory.mktemp("proxy-pairs"),
        "--policy", "static", "--policy-batch", "2", "--policy-wait-bound", "2s",
    )  # fmt: skip
    yield p
    p.stop()


def echo_batches(proxy: RatebatchProxy) -> tuple[float, float]:
    """(rows, batches) the proxy has sent upstream for `echo`. Its histogram
    is counted before a batch's callers are answered, where Triton's own
    statistics may lag its answers."""
    status, body = http_get(proxy.admin_url + "/metrics")
    assert status == 200, body
    text = body.decode()
    rows = bench.metric_values(text, "ratebatch_batch_size_sum", model="echo")
    batches = bench.metric_values(text, "ratebatch_batch_size_count", model="echo")
    return (rows[0] if rows else 0.0), (batches[0] if batches else 0.0)


def proxied_in_pairs(pairing: RatebatchProxy, body: bytes, headers: dict) -> list[bytes]:
    """The answers to two copies of one request sent together through the
    pairing proxy, checked to have gone to Triton as one batch of two."""
    before = echo_batches(pairing)
    url = f"{pairing.base_url}/v2/models/echo/infer"
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: http_request("POST", url, body, headers=headers), range(2)))
    after = echo_batches(pairing)
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1), "the two callers did not go as one batch"
    for status, answer in answers:
        assert status == 200, answer
    return [answer for _, answer in answers]


def echo_values(dt: str) -> list:
    """Values whose text form is easy to get wrong: integral floats (4.0),
    float32 widened to double (1.2999999523162842), exponents both ways,
    negative zero, the ends of each integer range, random draws."""
    rng = np.random.default_rng(17)
    t = ECHO_DATATYPES[dt]
    if dt == "BOOL":
        return [True, False, True]
    if dt in ("FP32", "FP64"):
        fixed = [4, 1.3, 0.1, -2.5, 1e-7, 1e-6, 123456789, 1e21, 1e22, 0.0, -0.0, 3.4e38, 1.25e22]
        drawn = np.concatenate([rng.standard_normal(40), rng.random(40) * 1000, 10.0 ** rng.uniform(-30, 30, 40)])
        arr = np.array(fixed + list(drawn)).astype(t)
        return [float(x) for x in arr]
    info = np.iinfo(t)
    drawn = rng.integers(info.min, info.max, 20, dtype=t, endpoint=True)
    return [int(info.min), int(info.max), 0, 1] + [int(x) for x in drawn]


def echo_request(outputs: list[str] | None = None) -> tuple[bytes, dict[str, str]]:
    """The inputs travel in Triton's binary form, so both servers start from
    the same bits: Triton's own JSON parser (rapidjson without full
    precision) may read a 17-digit decimal one unit in the last place off,
    where the proxy reads it exactly. Outputs are asked for as JSON."""
    inputs, raw = [], b""
    for dt, t in ECHO_DATATYPES.items():
        data = np.array(echo_values(dt), dtype=t).tobytes()
        inputs.append({"name": f"IN_{dt}", "datatype": dt, "shape": [1, len(data) // np.dtype(t).itemsize],
                       "parameters": {"binary_data_size": len(data)}})
        raw += data
    req = {"inputs": inputs}
    if outputs:
        req["outputs"] = [{"name": o, "parameters": {"binary_data": False}} for o in outputs]
    header = json.dumps(req).encode()
    return header + raw, {"Inference-Header-Content-Length": str(len(header))}


def test_json_numbers_as_triton_writes_them(triton: TritonServer, ratebatch, pairing):
    body, headers = echo_request()
    status, direct = http_request("POST", f"http://{triton.url}/v2/models/echo/infer", body, headers=headers)
    assert status == 200, direct
    status, alone = http_request("POST", f"http://{ratebatch.url}/v2/models/echo/infer", body, headers=headers)
    assert status == 200, alone
    assert alone == direct, _first_difference(direct, alone)
    # Spot-check the forms the issue named, straight from Triton.
    fp32 = next(o for o in json.loads(direct)["outputs"] if o["name"] == "OUT_FP32")
    text = direct.decode()
    assert fp32["data"][:2] == [4.0, 1.2999999523162842] and "[4.0,1.2999999523162842," in text
    for proxied in proxied_in_pairs(pairing, body, headers):
        d = json.loads(direct)["outputs"]
        p = json.loads(proxied)["outputs"]
        assert [o["name"] for o in p] == [o["name"] for o in d]
        assert proxied == direct, _first_difference(direct, proxied)


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"answers differ at byte {i}: Triton {a[max(0, i - 60):i + 60]!r} vs proxy {b[max(0, i - 60):i + 60]!r}"


@pytest.mark.parametrize("dt", list(ECHO_DATATYPES))
def test_each_datatype_alone(triton: TritonServer, pairing, dt):
    """One output asked for: the same bytes as Triton's, per datatype, from
    the proxy's own JSON writer."""
    body, headers = echo_request([f"OUT_{dt}"])
    _, direct = http_request("POST", f"http://{triton.url}/v2/models/echo/infer", body, headers=headers)
    for proxied in proxied_in_pairs(pairing, body, headers):
        assert proxied == direct, _first_difference(direct, proxied)
