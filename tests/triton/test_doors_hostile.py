"""Hostile clients at the doors, answered as the real Triton answers them.

Each call goes to a Triton and to the proxy in front of a Triton, and the two
answers must be the same: traversal by model version or name (which must
reach no other model), and Triton's control routes restricted to a header.

The restricted pair: a Triton started with --access-token, which restricts
PyTriton's default set (statistics, model-repository, shared-memory, trace,
logging) to the header triton-access-token, and the proxy in front of the
session's unrestricted Triton with the same categories restricted by its
restricted_api. A call the proxy lets through reaches the session's Triton,
which answers it as the restricted Triton does once its header is right.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import free_ports, http_request, start_ratebatch, start_triton

TOKEN = "s3cret-for-tests"
RESTRICTED = "statistics,model-repository,shared-memory,trace,logging"

ROW = list(range(16))
SIMPLE_JSON = (
    b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":%s},'
    b'{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":%s}]}' % (str(ROW).encode(), str(ROW).encode())
)


@pytest.fixture(scope="module")
def guarded_triton(tmp_path_factory):
    server = start_triton(tmp_path_factory.mktemp("guarded-triton"), "--access-token", TOKEN)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def guarded_proxy(ratebatch_bin, triton, tmp_path_factory):
    """The proxy, both doors, in front of the session's (unrestricted) Triton."""
    (grpc_port,) = free_ports(1)
    proxy = start_ratebatch(
        ratebatch_bin,
        triton.base_url,
        tmp_path_factory.mktemp("guarded-proxy"),
        "--grpc-listen", f"127.0.0.1:{grpc_port}",
        "--upstream-grpc", triton.grpc_url,
        "--restricted-api", f"{RESTRICTED}:triton-access-token={TOKEN}",
    )  # fmt: skip
    proxy.grpc_url = f"127.0.0.1:{grpc_port}"
    yield proxy
    proxy.stop()


def _normal(status: int, body: bytes) -> tuple[int, bytes]:
    return status, body.strip()


def _same(what: str, direct: tuple[int, bytes], proxied: tuple[int, bytes]) -> None:
    """The same status, and for an error the same body: a success's body
    names its own server (a model config's workspace path, an answer's
    key order), the two Tritons are two."""
    assert proxied[0] == direct[0], f"{what}: Triton {direct}, proxy {proxied}"
    if direct[0] != 200:
        assert proxied == direct, f"{what}: Triton {direct}, proxy {proxied}"


RESTRICTED_HTTP_CALLS = [
    ("POST", "/v2/repository/index", {}),
    ("POST", "/v2/repository/index", {"triton-access-token": "wrong"}),
    ("POST", "/v2/repository/index", {"triton-access-token": TOKEN}),
    ("POST", "/v2/repository/models/simple/unload", {}),
    ("POST", "/v2/repository/models/nope/unload", {"triton-access-token": TOKEN}),
    ("GET", "/v2/models/stats", {}),
    ("GET", "/v2/models/simple/stats", {"triton-access-token": "wrong"}),
    ("GET", "/v2/logging", {}),
    ("GET", "/v2/trace/setting", {}),
    ("GET", "/v2/systemsharedmemory/status", {}),
    ("GET", "/v2/systemsharedmemory/status", {"triton-access-token": TOKEN}),
    ("POST", "/v2/cudasharedmemory/region/r0/unregister", {}),
    ("GET", "/v2/models/simple/config", {}),
    ("GET", "/v2/health/ready", {}),
    ("POST", "/v2/models/simple/infer", {}),
]


@pytest.mark.parametrize("method,path,headers", RESTRICTED_HTTP_CALLS)
def test_restricted_http_answers_as_triton(guarded_triton, guarded_proxy, method, path, headers):
    body = SIMPLE_JSON if path.endswith("/infer") else (b"{}" if method == "POST" else None)
    direct = _normal(*http_request(method, guarded_triton.base_url + path, body, headers=headers))
    proxied = _normal(*http_request(method, guarded_proxy.base_url + path, body, headers=headers))
    _same(f"{method} {path} {headers}", direct, proxied)


def _grpc_answer(url: str, call: str, headers: dict | None):
    c = grpcclient.InferenceServerClient(url)
    try:
        getattr(c, call)(headers=headers)
        return "ok"
    except InferenceServerException as e:
        return (str(e.status()), e.message())
    finally:
        c.close()


@pytest.mark.parametrize(
    "call,headers",
    [
        ("get_model_repository_index", None),
        ("get_model_repository_index", {"triton-grpc-protocol-triton-access-token": "wrong"}),
        ("get_model_repository_index", {"triton-grpc-protocol-triton-access-token": TOKEN}),
        ("get_model_repository_index", {"triton-access-token": TOKEN}),
        ("get_log_settings", None),
        ("get_trace_settings", None),
        ("get_system_shared_memory_status", None),
        ("get_inference_statistics", None),
        ("get_server_metadata", None),
    ],
)
def test_restricted_grpc_answers_as_triton(guarded_triton, guarded_proxy, call, headers):
    direct = _grpc_answer(guarded_triton.grpc_url, call, headers)
    proxied = _grpc_answer(guarded_proxy.grpc_url, call, headers)
    assert proxied == direct, f"{call} {headers}: Triton {direct}, proxy {proxied}"


TRAVERSAL_PATHS = [
    "/v2/models/simple/versions/..%2F..%2Fimage/infer",
    "/v2/models/simple/versions/%2E%2E%2F%2E%2E%2Fimage/infer",
    "/v2/models/simple/versions/abc/infer",
    "/v2/models/simple/versions/99999999999999999999/infer",
    "/v2/models/simple/versions/7/infer",
    "/v2/models/..%2Fimage/infer",
    "/v2/models/%73imple/infer",
    "/v2/models/simple/versions/1/infer",
]


@pytest.mark.parametrize("path", TRAVERSAL_PATHS)
def test_traversal_http_answers_as_triton(triton, guarded_proxy, path):
    direct = _normal(*http_request("POST", triton.base_url + path, SIMPLE_JSON))
    proxied = _normal(*http_request("POST", guarded_proxy.base_url + path, SIMPLE_JSON))
    _same(path, direct, proxied)


@pytest.mark.parametrize(
    "model,version",
    [("simple", "../../image"), ("simple", "-1"), ("simple", "1abc"), ("simple", "7"), ("../x", ""), ("simple/../image", "1")],
)
def test_traversal_grpc_answers_as_triton(triton, guarded_proxy, model, version):
    def answer(url: str):
        c = grpcclient.InferenceServerClient(url)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            t = grpcclient.InferInput(name, [1, 16], "INT32")
            t.set_data_from_numpy(np.array([ROW], dtype=np.int32))
            inputs.append(t)
        try:
            r = c.infer(model, inputs, model_version=version)
            return ("ok", r.as_numpy("OUTPUT0").tolist())
        except InferenceServerException as e:
            return (str(e.status()), e.message())
        finally:
            c.close()

    direct, proxied = answer(triton.grpc_url), answer(guarded_proxy.grpc_url)
    assert proxied == direct, f"{model!r} version {version!r}: Triton {direct}, proxy {proxied}"
