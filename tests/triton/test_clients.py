"""Triton's own clients against a target: Triton directly, then the ratebatch
proxy in front of it (see conftest.target). Each call and each expected answer
is the same for both: what works against Triton must work unchanged through
the proxy.
"""

from __future__ import annotations

import csv
import json
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conformance import poll
from conftest import MAX_BATCH_SIZE, http_get, http_request, perf_analyzer_argv
from server import IMAGE_CLASSES, IMAGE_SHAPE, VECTOR_LEN, image_reference


def simple_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list[httpclient.InferInput]:
    i0 = httpclient.InferInput("INPUT0", list(a.shape), "INT32")
    i0.set_data_from_numpy(a, binary_data=binary)
    i1 = httpclient.InferInput("INPUT1", list(b.shape), "INT32")
    i1.set_data_from_numpy(b, binary_data=binary)
    return [i0, i1]


def simple_outputs(binary: bool, names=("OUTPUT0", "OUTPUT1")) -> list[httpclient.InferRequestedOutput]:
    return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]


def test_health(target):
    c = target.client()
    assert c.is_server_live()
    assert c.is_server_ready()
    for model in ("simple", "image"):
        assert c.is_model_ready(model), model
    assert not c.is_model_ready("nosuch")


@pytest.mark.parametrize(
    "path, want",
    [
        ("/v2/health/live", 200),
        ("/v2/health/ready", 200),
        ("/v2/models/simple/ready", 200),
        ("/v2/models/image/versions/1/ready", 200),
        ("/v2/models/nosuch/ready", 400),
        ("/v2/models/nosuch", 404),
    ],
)
def test_raw_status(target, path, want):
    status, body = http_get(target.base_url + path)
    assert status == want, body
    if want != 200:
        assert "error" in json.loads(body)


def test_server_metadata(target):
    md = target.client().get_server_metadata()
    assert md["name"] == "triton"
    assert md["version"] == "2.51.0"
    for ext in ("binary_tensor_data", "statistics", "model_repository", "model_configuration"):
        assert ext in md["extensions"]


@pytest.mark.parametrize(
    "model, inputs, outputs",
    [
        (
            "simple",
            [("INPUT0", "INT32", [-1, VECTOR_LEN]), ("INPUT1", "INT32", [-1, VECTOR_LEN])],
            [("OUTPUT0", "INT32", [-1, VECTOR_LEN]), ("OUTPUT1", "INT32", [-1, VECTOR_LEN])],
        ),
        ("image", [("INPUT", "FP32", [-1, *IMAGE_SHAPE])], [("OUTPUT", "FP32", [-1, IMAGE_CLASSES])]),
    ],
)
def test_model_metadata(target, model, inputs, outputs):
    md = target.client().get_model_metadata(model)
    assert md["name"] == model
    assert md["versions"] == ["1"]
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["inputs"]] == inputs
    assert [(t["name"], t["datatype"], t["shape"]) for t in md["outputs"]] == outputs


@pytest.mark.parametrize("model, dims", [("simple", [VECTOR_LEN]), ("image", list(IMAGE_SHAPE))])
def test_model_config(target, model, dims):
    cfg = target.client().get_model_config(model)
    assert cfg["name"] == model
    assert cfg["max_batch_size"] == MAX_BATCH_SIZE
    assert cfg["backend"] == "python"
    assert [i["dims"] for i in cfg["input"]] == [dims] * len(cfg["input"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("rows", [1, 3, MAX_BATCH_SIZE])
def test_infer_simple(target, binary, rows):
    rng = np.random.default_rng(rows)
    a = rng.integers(-1000, 1000, size=(rows, VECTOR_LEN), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(rows, VECTOR_LEN), dtype=np.int32)
    r = target.client().infer("simple", simple_inputs(a, b, binary), outputs=simple_outputs(binary))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    out = {o["name"]: o for o in r.get_response()["outputs"]}
    for name in ("OUTPUT0", "OUTPUT1"):
        assert out[name]["shape"] == [rows, VECTOR_LEN]
        assert out[name]["datatype"] == "INT32"
        # binary outputs are announced by size, JSON ones carry data
        assert ("binary_data_size" in out[name].get("parameters", {})) == binary
        assert ("data" in out[name]) == (not binary)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("rows", [1, 2])
def test_infer_image(target, binary, rows):
    x = np.random.default_rng(10 + rows).random((rows, *IMAGE_SHAPE), dtype=np.float32)
    inp = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    r = target.client().infer("image", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT", binary_data=binary)])
    got = r.as_numpy("OUTPUT")
    assert got.shape == (rows, IMAGE_CLASSES)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, image_reference(x), rtol=1e-5)


def test_infer_requested_output_subset_and_id(target):
    a = np.arange(VECTOR_LEN, dtype=np.int32).reshape(1, -1)
    r = target.client().infer(
        "simple", simple_inputs(a, a, True), outputs=simple_outputs(True, ["OUTPUT1"]), request_id="req-7"
    )
    assert r.get_response()["id"] == "req-7"
    assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT1"]
    assert r.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.zeros((1, VECTOR_LEN), dtype=np.int32))


def test_infer_raw_json(target):
    """The request curl users send, byte for byte."""
    body = {
        "id": "curl-1",
        "inputs": [
            {"name": "INPUT0", "shape": [1, VECTOR_LEN], "datatype": "INT32", "data": list(range(VECTOR_LEN))},
            {"name": "INPUT1", "shape": [1, VECTOR_LEN], "datatype": "INT32", "data": [1] * VECTOR_LEN},
        ],
    }
    status, raw = http_request("POST", target.base_url + "/v2/models/simple/infer", json.dumps(body).encode())
    assert status == 200, raw
    resp = json.loads(raw)
    assert resp["id"] == "curl-1"
    assert resp["model_name"] == "simple"
    assert resp["model_version"] == "1"
    out = {o["name"]: o for o in resp["outputs"]}
    assert out["OUTPUT0"] == {
        "name": "OUTPUT0",
        "datatype": "INT32",
        "shape": [1, VECTOR_LEN],
        "data": [i + 1 for i in range(VECTOR_LEN)],
    }
    assert out["OUTPUT1"]["data"] == [i - 1 for i in range(VECTOR_LEN)]


def test_infer_concurrent_requests_get_their_own_answers(target):
    """Many clients at once: every answer belongs to its own request."""
    n = 32
    c = target.client(concurrency=8)
    pending = []
    for k in range(n):
        a = np.full((1, VECTOR_LEN), k, dtype=np.int32)
        b = np.arange(VECTOR_LEN, dtype=np.int32).reshape(1, -1) * (k + 1)
        binary = k % 2 == 0
        pending.append((a, b, c.async_infer("simple", simple_inputs(a, b, binary), outputs=simple_outputs(binary))))
    for a, b, fut in pending:
        r = fut.get_result(timeout=30)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    c.close()


def _zeros(rows: int, cols: int = VECTOR_LEN) -> np.ndarray:
    return np.zeros((rows, cols), dtype=np.int32)


ERROR_CASES = {
    "missing input": (
        lambda c: c.infer("simple", simple_inputs(_zeros(1), _zeros(1), True)[:1]),
        "400",
        "expected 2 inputs but got 1",
    ),
    "wrong shape": (
        lambda c: c.infer("simple", simple_inputs(_zeros(1, 15), _zeros(1, 15), True)),
        "400",
        "unexpected shape",
    ),
    "batch too large": (
        lambda c: c.infer("simple", simple_inputs(_zeros(MAX_BATCH_SIZE + 1), _zeros(MAX_BATCH_SIZE + 1), True)),
        "400",
        f"batch-size must be <= {MAX_BATCH_SIZE}",
    ),
    "unknown model": (lambda c: c.get_model_metadata("nosuch"), "404", "'nosuch' is not found"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_errors(target, case):
    call, status, text = ERROR_CASES[case]
    with pytest.raises(InferenceServerException) as exc:
        call(target.client())
    assert exc.value.status() == status
    assert text in exc.value.message()


def test_statistics(target):
    c = target.client()

    def simple_stats():
        (s,) = c.get_inference_statistics("simple", "1")["model_stats"]
        return s

    before = simple_stats()
    a = np.ones((3, VECTOR_LEN), dtype=np.int32)
    c.infer("simple", simple_inputs(a, a, True))
    # Triton counts an execution's statistics after it has answered: wait
    # a moment for the count to move before reading it.
    def moved():
        s = simple_stats()
        return s if s["inference_count"] != before["inference_count"] else None

    after = poll(moved, 5) or simple_stats()
    # rows are what a client sent, however the requests were batched
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["inference_stats"]["success"]["count"] > before["inference_stats"]["success"]["count"]
    everything = c.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in everything} == {"simple", "image", "echo", "half"}


def test_repository(target):
    c = target.client()
    # PyTriton loads its models from config content, so the index lists none.
    assert c.get_model_repository_index() == []
    with pytest.raises(InferenceServerException) as exc:
        c.load_model("nosuch")
    assert exc.value.status() == "500"
    assert "failed to load 'nosuch'" in exc.value.message()


@pytest.mark.parametrize(
    "model, extra",
    [
        ("simple", ("--concurrency-range", "1:2")),
        ("simple", ("--concurrency-range", "2", "--input-tensor-format", "json", "--output-tensor-format", "json")),
        ("image", ("--concurrency-range", "2")),
    ],
    ids=["simple-binary", "simple-json", "image-binary"],
)
def test_perf_analyzer(target, tmp_path, model, extra):
    report = tmp_path / "perf.csv"
    # -s 1000: accept any variation between windows; this checks that the calls
    # work, not how fast (the 2 shared cores make windows vary a lot).
    argv = perf_analyzer_argv(
        target.url, model, *extra, "--measurement-interval", "500", "-s", "1000", "--max-trials", "6", "-f", str(report)
    )
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    with open(report, newline="") as f:
        rows = list(csv.DictReader(f))
    levels = extra[1].split(":")
    # perf_analyzer orders the CSV by throughput, not by concurrency
    assert sorted(int(r["Concurrency"]) for r in rows) == list(range(int(levels[0]), int(levels[-1]) + 1))
    for r in rows:
        assert float(r["Inferences/Second"]) > 0, r
    assert "error" not in run.stdout.lower(), run.stdout
