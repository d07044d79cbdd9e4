"""The emulator's gRPC door as Triton's own clients see it: tritonclient.grpc's
metadata, config, statistics and repository calls, and perf_analyzer -i grpc,
against `ratebatch emulate --grpc-listen` directly and through
`ratebatch serve --grpc-listen` in front of it (which relays every call but a
batched model's ModelInfer). No Triton needed: this is what a user without a
GPU runs first (issue 36).
"""

from __future__ import annotations

import subprocess
import time

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import Process, StartFailed, free_ports, perf_analyzer_argv, start_ratebatch, start_retrying


def wait_grpc(url: str, proc: Process) -> None:
    """Wait until proc's gRPC door at url is ready; StartFailed (proc stopped)
    if proc exits first or it is not within 30 s."""
    c = grpcclient.InferenceServerClient(url)
    deadline = time.monotonic() + 30
    while True:
        if proc.exited() is not None:
            raise StartFailed(proc, f"exited with {proc.exited()}")
        try:
            if c.is_server_ready():
                return
        except InferenceServerException:
            pass
        if time.monotonic() > deadline:
            raise StartFailed(proc, f"gRPC {url} not ready")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def emulator(ratebatch_bin, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("emulator")

    def start(attempt: int) -> tuple[Process, int, int]:
        http, grpc = free_ports(2)
        argv = [ratebatch_bin, "emulate", "--listen", f"127.0.0.1:{http}", "--grpc-listen", f"127.0.0.1:{grpc}",
                "--metrics-listen", ""]  # fmt: skip
        proc = Process("ratebatch emulate", argv, workdir / f"emulate-{attempt}.log")
        wait_grpc(f"127.0.0.1:{grpc}", proc)
        return proc, http, grpc

    proc, http, grpc = start_retrying(start)
    yield f"http://127.0.0.1:{http}", f"127.0.0.1:{grpc}"
    proc.stop()


@pytest.fixture(scope="module", params=["emulator", "proxy"])
def grpc_url(request, emulator, ratebatch_bin, tmp_path_factory):
    base, grpc = emulator
    if request.param == "emulator":
        yield grpc
        return
    (port,) = free_ports(1)
    url = f"127.0.0.1:{port}"
    p = start_ratebatch(ratebatch_bin, base, tmp_path_factory.mktemp("proxy"), "--grpc-listen", url,
                        "--upstream-grpc", grpc)  # fmt: skip
    try:
        wait_grpc(url, p.process)
        yield url
    finally:
        p.stop()


def test_metadata_and_config(grpc_url):
    c = grpcclient.InferenceServerClient(grpc_url)
    assert c.is_server_live() and c.is_model_ready("simple")
    md = c.get_model_metadata("simple", as_json=True)
    assert [t["name"] for t in md["inputs"]] == ["INPUT0", "INPUT1"]
    cfg = c.get_model_config("simple", as_json=True)["config"]
    assert cfg["name"] == "simple" and cfg["max_batch_size"] > 0
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
        ("INPUT0", "TYPE_INT32", ["16"]),
        ("INPUT1", "TYPE_INT32", ["16"]),
    ]
    names = {m["name"] for m in c.get_model_repository_index(as_json=True)["models"]}
    assert {"simple", "simple_nobatch", "image"} <= names
    with pytest.raises(InferenceServerException, match="nosuch"):
        c.get_model_config("nosuch")


def test_perf_analyzer_grpc(grpc_url, tmp_path):
    stats = grpcclient.InferenceServerClient(grpc_url)
    before = stats.get_inference_statistics("simple", as_json=True)["model_stats"][0].get("inference_count", "0")
    argv = perf_analyzer_argv(grpc_url, "simple", "--concurrency-range", "1:2", "--measurement-interval", "500",
                              "-s", "1000", "--max-trials", "6", protocol="grpc")  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Concurrency: 2, throughput:" in run.stdout, run.stdout
    after = stats.get_inference_statistics("simple", as_json=True)["model_stats"][0]["inference_count"]
    assert int(after) > int(before)
