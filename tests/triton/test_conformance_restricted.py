"""Differential conformance with Triton's restricted APIs: Triton run with
--http-restricted-api=inference:api-key=k and
--grpc-restricted-protocol=inference:api-key=k (gRPC callers carry the key as
`triton-grpc-protocol-api-key`), straight and through the proxy under forced
merging (maxbatch, 300 ms) and the default, each started as an operator of
this Triton starts it: `--restricted-api` with Triton's own value. Inference
needs the header; metadata, config, health and the repository stay open, so
the proxy discovers the models as usual. A third proxy, `unconfigured`, is
the default started without `--restricted-api`: what CONFIG.md says of it
(the header does not reach Triton on a batched call) is a row too.
"""

from __future__ import annotations

import pytest

from conformance import (
    Answer,
    assert_same,
    concurrently,
    grpc_infer,
    http_infer,
    json_input,
    run_stack,
    start_real_triton,
)
from conftest import http_get

KEY, VALUE = "api-key", "k"
RESTRICTED = f"inference:{KEY}={VALUE}"  # Triton's --http-restricted-api and --grpc-restricted-protocol value
GRPC_KEY = "triton-grpc-protocol-api-key"  # how Triton names the key on gRPC
# Triton's answer to an HTTP call without the key (403, text/plain).
HTTP_REFUSAL = Answer(403, "This API is restricted, expecting header 'api-key'", error_content_type="text/plain")


@pytest.fixture(scope="module")
def restricted(ratebatch_bin, tmp_path_factory):
    triton = start_real_triton(
        tmp_path_factory.mktemp("restricted-triton"),
        ["fails_on_sentinel"],
        f"--http-restricted-api={RESTRICTED}",
        f"--grpc-restricted-protocol={RESTRICTED}",
    )
    restricted_api = ("--restricted-api", RESTRICTED)
    proxies = {
        "maxbatch": ("--policy", "maxbatch", "--policy-max-queue-delay", "300ms", *restricted_api),
        "default": restricted_api,
        "unconfigured": (),
    }
    yield from run_stack(ratebatch_bin, tmp_path_factory, "restricted", triton, proxies)


def body(k: int) -> dict:
    return {"inputs": [json_input("IN", [[k] * 4])]}


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_http_with_the_header(restricted, via):
    def call(base: str) -> Answer:
        return http_infer(base, "fails_on_sentinel", body(1), headers={KEY: VALUE})

    straight = call(restricted.http("triton"))
    assert straight.ok, straight
    assert_same(straight, call(restricted.http(via)))


def test_http_with_the_header_merged(restricted):
    def call(base: str) -> list[Answer]:
        return concurrently(
            [lambda k=k: http_infer(base, "fails_on_sentinel", body(k), headers={KEY: VALUE}) for k in range(4)]
        )

    straight = call(restricted.http("triton"))
    assert all(a.ok for a in straight), straight
    assert_same(straight, call(restricted.http("maxbatch")))


def test_http_with_the_header_unconfigured(restricted):
    """Deviation documented (CONFIG.md, "Headers: who may call"): a proxy
    not told of Triton's restriction sends its batches without the key, so
    a caller carrying it is refused, with Triton's own 403."""
    call = lambda base: http_infer(base, "fails_on_sentinel", body(1), headers={KEY: VALUE})  # noqa: E731
    assert call(restricted.http("triton")).ok
    assert call(restricted.http("unconfigured")) == HTTP_REFUSAL


@pytest.mark.parametrize("via", ["maxbatch", "default"])
@pytest.mark.parametrize("headers", [{}, {KEY: "wrong"}], ids=["absent", "wrong"])
def test_http_without_the_header(restricted, via, headers):
    """Refused alike: 403, Triton's text and Content-Type."""

    def call(base: str) -> Answer:
        return http_infer(base, "fails_on_sentinel", body(1), headers=headers)

    straight = call(restricted.http("triton"))
    assert straight == HTTP_REFUSAL, straight
    assert_same(straight, call(restricted.http(via)))


def grpc_call(url: str, headers: dict[str, str] | None) -> Answer:
    return grpc_infer(url, "fails_on_sentinel", 1, headers=headers)


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_grpc_with_the_header(restricted, via):
    straight = grpc_call(restricted.grpc("triton"), {GRPC_KEY: VALUE})
    assert straight.ok, straight
    assert_same(straight, grpc_call(restricted.grpc(via), {GRPC_KEY: VALUE}))


@pytest.mark.parametrize("via", ["maxbatch", "default"])
def test_grpc_without_the_header(restricted, via):
    """A gRPC caller without the key is refused by the proxy itself, given
    the same restricted_api as Triton, in Triton's gRPC words (UNAVAILABLE,
    naming the key's gRPC form): the batch, which goes to Triton over HTTP,
    never gets Triton's HTTP refusal to pass back."""
    straight = grpc_call(restricted.grpc("triton"), None)
    want = ("UNAVAILABLE", f"This protocol is restricted, expecting header '{GRPC_KEY}'")
    assert (straight.status, straight.error) == want, straight
    assert_same(straight, grpc_call(restricted.grpc(via), None))


@pytest.mark.parametrize("via", ["maxbatch", "default"])
@pytest.mark.parametrize("path", ["/v2/models/fails_on_sentinel", "/v2/models/fails_on_sentinel/config"])
def test_open_apis_relayed(restricted, via, path):
    """Metadata and config are not restricted: Triton's own answer through the proxy."""
    straight = http_get(restricted.http("triton") + path)
    assert straight[0] == 200
    assert http_get(restricted.http(via) + path) == straight
