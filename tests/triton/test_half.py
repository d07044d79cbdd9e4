"""FP16 values as JSON numbers: Triton refuses them, in requests and in
answers, and takes and gives them only in binary form. Through ratebatch a
JSON client of an FP16 model works: the proxy converts to and from binary,
and does not send such a request to Triton as it came even when it is
alone in its batch (kserve.Request.HalfInJSON). The `half` model answers
OUT = 2 * IN in FP16."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import Target, TritonServer

VALUES = [1.5, -2.0, 0.25, 65504.0 / 2]


def json_request(binary_output: bool = False) -> bytes:
    req = {"inputs": [{"name": "IN", "datatype": "FP16", "shape": [1, len(VALUES)], "data": VALUES}]}
    if binary_output:
        req["parameters"] = {"binary_data_output": True}
    return json.dumps(req).encode()


def binary_request(binary_output: bool) -> tuple[bytes, dict[str, str]]:
    """FP16 input in binary form, asking for OUT as JSON or binary."""
    data = np.array([VALUES], dtype=np.float16).tobytes()
    header = json.dumps({
        "inputs": [{"name": "IN", "datatype": "FP16", "shape": [1, len(VALUES)], "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "OUT", "parameters": {"binary_data": binary_output}}],
    }).encode()  # fmt: skip
    return header + data, {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}


def out_values(answer: bytes, headers_len: int | None) -> list[float]:
    """OUT's values from a JSON or binary answer."""
    if headers_len is None:
        (out,) = json.loads(answer)["outputs"]
        assert out["datatype"] == "FP16", out
        # The shortest decimal that reads back to the same FP16 value
        # (65504 is written 65500): compare as FP16.
        return [float(np.float16(v)) for v in out["data"]]
    (out,) = json.loads(answer[:headers_len])["outputs"]
    assert out["datatype"] == "FP16", out
    return [float(v) for v in np.frombuffer(answer[headers_len:], dtype=np.float16)]


def post(base_url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes, int | None]:
    import urllib.request

    req = urllib.request.Request(f"{base_url}/v2/models/half/infer", data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            hl = resp.headers.get("Inference-Header-Content-Length")
            return resp.status, resp.read(), int(hl) if hl is not None else None
    except urllib.error.HTTPError as err:
        return err.code, err.read(), None


WANT = [2 * v for v in VALUES]


def test_triton_refuses_half_as_json(triton: TritonServer):
    status, answer, _ = post(triton.base_url, json_request())
    assert status == 400 and b"FP16 data via JSON is not supported" in answer, answer
    body, headers = binary_request(binary_output=False)
    status, answer, _ = post(triton.base_url, body, headers)
    assert status == 400 and b"FP16 data via JSON is not supported" in answer, answer


@pytest.mark.parametrize("binary_output", [False, True])
def test_half_json_request_through_proxy(ratebatch: Target, binary_output: bool):
    status, answer, hl = post(ratebatch.base_url, json_request(binary_output))
    assert status == 200, answer
    assert (hl is not None) == binary_output
    assert out_values(answer, hl) == WANT


def test_half_json_answer_through_proxy(ratebatch: Target):
    body, headers = binary_request(binary_output=False)
    status, answer, hl = post(ratebatch.base_url, body, headers)
    assert status == 200, answer
    assert hl is None
    assert out_values(answer, hl) == WANT


def test_half_binary_goes_as_it_came(ratebatch: Target, triton: TritonServer):
    """All binary, the request is Triton's to answer: the same bytes either way."""
    body, headers = binary_request(binary_output=True)
    direct = post(triton.base_url, body, headers)
    proxied = post(ratebatch.base_url, body, headers)
    assert direct[0] == proxied[0] == 200, (direct, proxied)
    assert out_values(proxied[1], proxied[2]) == WANT
    assert proxied[1] == direct[1]
