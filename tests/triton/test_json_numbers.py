"""JSON answers through the proxy are byte for byte Triton's: every datatype
Triton writes as JSON numbers, echoed by the `echo` model, once straight from
Triton and once through ratebatch (which batches the request, splits Triton's
binary answer and writes the JSON itself; kserve/grisu.go)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import TritonServer, http_request
from server import ECHO_DATATYPES


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


def test_json_numbers_as_triton_writes_them(triton: TritonServer, ratebatch):
    body, headers = echo_request()
    status, direct = http_request("POST", f"http://{triton.url}/v2/models/echo/infer", body, headers=headers)
    assert status == 200, direct
    status, proxied = http_request("POST", f"http://{ratebatch.url}/v2/models/echo/infer", body, headers=headers)
    assert status == 200, proxied
    # Spot-check the forms the issue named, straight from Triton.
    fp32 = next(o for o in json.loads(direct)["outputs"] if o["name"] == "OUT_FP32")
    text = direct.decode()
    assert fp32["data"][:2] == [4.0, 1.2999999523162842] and "[4.0,1.2999999523162842," in text
    for dt in ECHO_DATATYPES:
        d = json.loads(direct)["outputs"]
        p = json.loads(proxied)["outputs"]
        assert [o["name"] for o in p] == [o["name"] for o in d]
    assert proxied == direct, _first_difference(direct, proxied)


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"answers differ at byte {i}: Triton {a[max(0, i - 60):i + 60]!r} vs proxy {b[max(0, i - 60):i + 60]!r}"


@pytest.mark.parametrize("dt", list(ECHO_DATATYPES))
def test_each_datatype_alone(triton: TritonServer, ratebatch, dt):
    """One output asked for: the same bytes as Triton's, per datatype."""
    body, headers = echo_request([f"OUT_{dt}"])
    _, direct = http_request("POST", f"http://{triton.url}/v2/models/echo/infer", body, headers=headers)
    _, proxied = http_request("POST", f"http://{ratebatch.url}/v2/models/echo/infer", body, headers=headers)
    assert proxied == direct, _first_difference(direct, proxied)
