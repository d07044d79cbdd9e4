"""TLS and mutual TLS at the proxy's doors and toward Triton, with Triton's own
clients: tritonclient over HTTPS (`ssl=True`) and gRPC (`ssl=True`, root
certificates, and a client certificate for mutual TLS), and perf_analyzer's SSL
options.

The module's Triton speaks TLS on its gRPC port and asks for client
certificates (Triton's --grpc-use-ssl-mutual); its HTTP port is plain, as
Triton's always is. Two proxies stand in front of it: one serving TLS
(`--tls-cert`, `--tls-key`), one also asking for client certificates
(`--tls-client-ca`). Both relay gRPC calls to Triton over mutual TLS
(`--upstream-tls-grpc` with the proxy's own client certificate).

The checks of test_clients.py run unchanged through both proxies over HTTPS;
the certificates are made here with openssl.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import gevent.ssl
import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import test_clients
from conftest import (
    MAX_BATCH_SIZE,
    SESSION_SERVER_FLAGS,
    PERF_ANALYZER,
    Process,
    StartFailed,
    TritonServer,
    free_ports,
    start_retrying,
    start_triton,
)
from server import VECTOR_LEN

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make the test's certificates")


@dataclasses.dataclass
class Certs:
    """PEM files: a CA for servers, one for clients, and one nobody trusts."""

    dir: Path
    server_ca: Path
    server: tuple[Path, Path]  # cert, key for 127.0.0.1 and localhost, server_ca's
    client_ca: Path
    client: tuple[Path, Path]  # client_ca's
    stranger: tuple[Path, Path]  # a client certificate of another CA


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    return crt, key


def _leaf(d: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    crt, key, csr, ext = d / f"{name}.crt", d / f"{name}.key", d / f"{name}.csr", d / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
        "-days", "2", "-out", str(crt), "-extfile", str(ext),
        cwd=d,
    )  # fmt: skip
    return crt, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    server_ca, client_ca, stranger_ca = _ca(d, "server-ca"), _ca(d, "client-ca"), _ca(d, "stranger-ca")
    return Certs(
        d,
        server_ca[0],
        _leaf(d, "server", server_ca),
        client_ca[0],
        _leaf(d, "client", client_ca),
        _leaf(d, "stranger", stranger_ca),
    )


@pytest.fixture(scope="module")
def tls_triton(tmp_path_factory, certs) -> TritonServer:
    """Triton with --grpc-use-ssl-mutual: its gRPC port wants client_ca's certificates."""
    server = start_triton(
        tmp_path_factory.mktemp("triton-tls"),
        *SESSION_SERVER_FLAGS,
        "--grpc-server-cert", str(certs.server[0]), "--grpc-server-key", str(certs.server[1]),
        "--grpc-root-cert", str(certs.client_ca),
    )  # fmt: skip
    yield server
    server.stop()


@dataclasses.dataclass
class TLSProxy:
    """A `ratebatch serve` whose doors speak TLS."""

    process: Process
    url: str  # host:port of the HTTPS door
    grpc_url: str
    admin_url: str
    mutual: bool

    @property
    def name(self) -> str:
        return "ratebatch mTLS" if self.mutual else "ratebatch TLS"

    @property
    def base_url(self) -> str:
        return f"https://{self.url}"

    def stop(self) -> None:
        self.process.stop()


def start_tls_proxy(binary: str, triton: TritonServer, certs: Certs, workdir: Path, mutual: bool) -> TLSProxy:
    """The proxy in front of triton with TLS doors (and client certificates
    required when mutual), relaying gRPC to Triton over mutual TLS; ready once
    its plain admin port's /readyz answers 200."""
    workdir.mkdir(parents=True, exist_ok=True)

    def start(attempt: int) -> TLSProxy:
        listen, grpc_port, admin = free_ports(3)
        argv = [
            binary, "serve",
            "--upstream", triton.base_url, "--upstream-grpc", triton.grpc_url,
            "--listen", f"127.0.0.1:{listen}", "--grpc-listen", f"127.0.0.1:{grpc_port}",
            "--admin-listen", f"127.0.0.1:{admin}",
            "--tls-cert", str(certs.server[0]), "--tls-key", str(certs.server[1]),
            "--upstream-tls-grpc", "--upstream-tls-ca", str(certs.server_ca),
            "--upstream-tls-cert", str(certs.client[0]), "--upstream-tls-key", str(certs.client[1]),
        ]  # fmt: skip
        if mutual:
            argv += ["--tls-client-ca", str(certs.client_ca)]
        proc = Process("ratebatch serve (TLS)", argv, workdir / f"ratebatch-{listen}.log")
        deadline = time.monotonic() + 30
        while True:
            if proc.exited() is not None:
                raise StartFailed(proc, f"exited with {proc.exited()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise StartFailed(proc, "admin /readyz not 200 within 30s")
            time.sleep(0.1)
        return TLSProxy(proc, f"127.0.0.1:{listen}", f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{admin}", mutual)

    return start_retrying(start)


@pytest.fixture(scope="module", params=[False, True], ids=["tls", "mtls"])
def proxy(request, ratebatch_bin, tls_triton, certs, tmp_path_factory) -> TLSProxy:
    p = start_tls_proxy(ratebatch_bin, tls_triton, certs, tmp_path_factory.mktemp("proxy-tls"), request.param)
    yield p
    p.stop()


def _context_factory(ca: Path, pair: tuple[Path, Path] | None):
    """An ssl_context_factory for tritonclient.http: trusts ca, presents pair."""

    def factory():
        ctx = gevent.ssl.create_default_context(cafile=str(ca))
        if pair is not None:
            ctx.load_cert_chain(str(pair[0]), str(pair[1]))
        return ctx

    return factory


@dataclasses.dataclass
class HTTPSTarget:
    """conftest.Target's client, over HTTPS: what test_clients.py's checks take."""

    name: str
    url: str
    ca: Path
    pair: tuple[Path, Path] | None

    def client(self, concurrency: int = 1) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(
            self.url,
            ssl=True,
            ssl_context_factory=_context_factory(self.ca, self.pair),
            concurrency=concurrency,
            network_timeout=30.0,
        )


# test_clients.py's checks that go through a tritonclient client, with their arguments.
CLIENT_CHECKS = [
    ("health", test_clients.test_health, ()),
    ("server_metadata", test_clients.test_server_metadata, ()),
    ("model_config", test_clients.test_model_config, ("simple", [VECTOR_LEN])),
    ("infer_simple_json_3", test_clients.test_infer_simple, (False, 3)),
    ("infer_simple_binary_max", test_clients.test_infer_simple, (True, MAX_BATCH_SIZE)),
    ("infer_image_binary_2", test_clients.test_infer_image, (True, 2)),
    ("output_subset_and_id", test_clients.test_infer_requested_output_subset_and_id, ()),
    ("concurrent", test_clients.test_infer_concurrent_requests_get_their_own_answers, ()),
]


@pytest.mark.parametrize("check, args", [(c[1], c[2]) for c in CLIENT_CHECKS], ids=[c[0] for c in CLIENT_CHECKS])
def test_https_client_checks(proxy, certs, check, args):
    """test_clients.py's checks, unchanged, through the proxy over HTTPS."""
    check(HTTPSTarget(proxy.name, proxy.url, certs.server_ca, certs.client), *args)


def _grpc_client(url: str, certs: Certs, pair: tuple[Path, Path] | None) -> grpcclient.InferenceServerClient:
    kw = {}
    if pair is not None:
        kw = {"private_key": str(pair[1]), "certificate_chain": str(pair[0])}
    return grpcclient.InferenceServerClient(url, ssl=True, root_certificates=str(certs.server_ca), **kw)


def _grpc_simple(c: grpcclient.InferenceServerClient, rows: int, k: int) -> None:
    a = np.arange(rows * VECTOR_LEN, dtype=np.int32).reshape(rows, VECTOR_LEN) + 100 * k
    b = np.full((rows, VECTOR_LEN), k, dtype=np.int32)
    inputs = []
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        i = grpcclient.InferInput(name, list(x.shape), "INT32")
        i.set_data_from_numpy(x)
        inputs.append(i)
    r = c.infer("simple", inputs, client_timeout=30)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_grpc_client(proxy, tls_triton, certs):
    """gRPC over TLS: inference through the proxy's queues, and calls it relays
    to Triton's mutual-TLS gRPC port answered as Triton answers them."""
    c = _grpc_client(proxy.grpc_url, certs, certs.client)
    direct = _grpc_client(tls_triton.grpc_url, certs, certs.client)
    assert c.is_server_live()
    assert c.is_server_ready()
    assert c.is_model_ready("simple")
    assert c.get_server_metadata(as_json=True) == direct.get_server_metadata(as_json=True)
    assert c.get_model_metadata("simple", as_json=True) == direct.get_model_metadata("simple", as_json=True)
    for rows in (1, 3):
        _grpc_simple(c, rows, rows)
    c.close()
    direct.close()


def _grpc_refusal(url: str, certs: Certs, pair) -> InferenceServerException:
    c = _grpc_client(url, certs, pair)
    with pytest.raises(InferenceServerException) as e:
        c.is_server_live(client_timeout=10)
    c.close()
    return e.value


@pytest.mark.parametrize("who", ["none", "stranger"])
def test_mtls_refuses_clients_without_a_trusted_certificate(proxy, tls_triton, certs, who):
    """With --tls-client-ca, a client without a certificate (or with one of
    another CA) fails at the handshake, at both doors, as at Triton's own
    gRPC port started with --grpc-use-ssl-mutual; without it, it is served."""
    pair = None if who == "none" else certs.stranger
    if not proxy.mutual:
        _grpc_simple(_grpc_client(proxy.grpc_url, certs, pair), 1, 7)
        test_clients.test_infer_simple(HTTPSTarget(proxy.name, proxy.url, certs.server_ca, pair), True, 1)
        return
    theirs = _grpc_refusal(tls_triton.grpc_url, certs, pair)
    ours = _grpc_refusal(proxy.grpc_url, certs, pair)
    assert ours.status() == theirs.status() == "StatusCode.UNAVAILABLE", (ours, theirs)
    ctx = ssl.create_default_context(cafile=str(certs.server_ca))
    if pair is not None:
        ctx.load_cert_chain(str(pair[0]), str(pair[1]))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)) as refused:
        # TLS 1.3 reports a refused client certificate at the first read,
        # or as the connection's end (urllib wraps it: SSLEOFError).
        with urllib.request.urlopen(proxy.base_url + "/v2/health/ready", context=ctx, timeout=10) as resp:
            resp.read()
    if isinstance(refused.value, urllib.error.URLError):
        assert isinstance(refused.value.reason, (ssl.SSLError, ConnectionError)), refused.value


def test_status_shows_tls_config(proxy, certs):
    with urllib.request.urlopen(proxy.admin_url + "/status", timeout=10) as resp:
        st = json.load(resp)
    assert st["config"]["tls"]["cert"] == str(certs.server[0])
    assert st["config"]["upstream_tls"]["grpc"] is True
    assert st["config_version"] == 1


def _perf_analyzer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PERF_ANALYZER), *args], capture_output=True, text=True, timeout=180)


@functools.cache
def _have_perf_analyzer() -> bool:
    return _perf_analyzer("--version").returncode == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_ssl(proxy, certs, protocol, tmp_path):
    """perf_analyzer's --ssl-* options against the proxy's TLS doors."""
    if not _have_perf_analyzer():
        pytest.skip("no perf_analyzer (scripts/setup-python.sh installs it)")
    if protocol == "grpc":
        url = proxy.grpc_url
        ssl_args = ["--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", str(certs.server_ca)]
        if proxy.mutual:
            ssl_args += [
                "--ssl-grpc-private-key-file", str(certs.client[1]),
                "--ssl-grpc-certificate-chain-file", str(certs.client[0]),
            ]  # fmt: skip
    else:
        url = proxy.base_url
        ssl_args = [
            "--ssl-https-verify-peer", "1", "--ssl-https-verify-host", "2",
            "--ssl-https-ca-certificates-file", str(certs.server_ca),
        ]  # fmt: skip
        if proxy.mutual:
            ssl_args += [
                "--ssl-https-client-certificate-file", str(certs.client[0]),
                "--ssl-https-client-certificate-type", "PEM",
                "--ssl-https-private-key-file", str(certs.client[1]),
                "--ssl-https-private-key-type", "PEM",
            ]  # fmt: skip
    out = tmp_path / "pa.csv"
    r = _perf_analyzer(
        "-m", "simple", "-u", url, "-i", protocol, *ssl_args,
        "--concurrency-range", "4", "--measurement-interval", "500", "-s", "1000", "--max-trials", "6",
        "-f", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "error" not in r.stdout.lower(), r.stdout
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(float(row["Inferences/Second"]) > 0 for row in rows), rows
