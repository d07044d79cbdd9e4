"""README.md's "Try it with a real Triton": the proxy started with
tests/triton/ratebatch.yaml in front of server.py (PyTriton, whose repository
index lists no models) batches simple and image from the start, before any
request names them, and perf_analyzer works through both doors as README
runs it. The ports are free ones instead of README's 8000-8002 and
9000-9002: flags override the file's."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import HERE, TritonServer, http_get, http_request, perf_analyzer_argv, start_door

CONFIG = HERE / "ratebatch.yaml"


@pytest.fixture(scope="module")
def door(ratebatch_bin, triton: TritonServer, tmp_path_factory):
    d = start_door(ratebatch_bin, triton, tmp_path_factory.mktemp("proxy-readme"), "--config", str(CONFIG))
    yield d
    d.proxy.stop()


def test_index_lists_no_models(triton: TritonServer):
    """The premise: PyTriton's repository index is empty."""
    status, body = http_request("POST", triton.base_url + "/v2/repository/index", b"{}")
    assert status == 200, body
    assert json.loads(body) == []


def test_configured_models_are_batched_before_any_request(door):
    status, body = http_get(door.proxy.admin_url + "/status")
    assert status == 200, body
    models = {m["model"]: m for m in json.loads(body)["models"]}
    for name in ("simple", "image"):
        assert name in models, f"{name} not in /status before any request: {sorted(models)}"
        assert models[name]["batched"], models[name]
        assert not models[name].get("warning"), models[name]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_through_both_doors(door, tmp_path, protocol):
    url = door.proxy.url if protocol == "http" else door.grpc_url
    argv = perf_analyzer_argv(
        url, "simple", "--concurrency-range", "1:2", "-p", "1000", "--stability-percentage", "50", protocol=protocol
    )
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Concurrency: 2, throughput" in run.stdout, run.stdout
