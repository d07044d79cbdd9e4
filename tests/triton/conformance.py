"""The differential conformance suite's machinery: the real `tritonserver`
started directly on a repository of Python-backend models written for the
tests (tests/triton/models), and client calls whose answers are compared as a
client reads them.

The server
  The PyTriton wheel ships Triton's own server: <site-packages>/pytriton/
  tritonserver/bin/tritonserver, its libraries in nvidia_pytriton.libs, the
  Python backend (backends/python) and a backend stub per Python version
  (python_backend_stubs/X.Y). Started here without PyTriton's wrapper, it
  reads each model's config.pbtxt as any Triton does (queue policies,
  priority levels, the response cache, ragged inputs, decoupled and sequence
  models), and every flag is Triton's own (--http-restricted-api, ...).
  Models run in the Python backend's stubs, which import numpy: the venv's
  bin goes first on PATH.

The models
  tests/triton/models/NAME.pbtxt is model NAME's config; its first line,
  `# model.py: FILE`, names the model's code (tests/triton/models/FILE),
  copied into NAME/1/model.py of the repository written for the server.

Answers
  An Answer is what a client reads of one call: status (HTTP status or gRPC
  code), the error text and its Content-Type, the outputs, and the headers a
  client reads. Two answers are equal when a client cannot tell them apart.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from conftest import READY_TIMEOUT_S, Door, Process, StartFailed, TritonServer, free_ports, start_door, start_retrying

MODELS_DIR = Path(__file__).resolve().parent / "models"

# Triton waits this long for in-flight requests when it stops: a stream a
# test left running must not hold the teardown for Triton's default 30 s.
EXIT_TIMEOUT_S = 5

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Wheel:
    """The files of the PyTriton wheel that make a Triton server."""

    tritonserver: Path
    libs: Path
    python_backend: Path  # libtriton_python.so, triton_python_backend_utils.py
    stub: Path  # triton_python_backend_stub for this interpreter's Python
    caches: Path  # --cache-directory (local/libtritoncache_local.so)

    @classmethod
    def find(cls) -> "Wheel":
        """The wheel installed beside this interpreter (the venv's)."""
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"nvidia-pytriton is not installed for {sys.executable}")
        pkg = Path(next(iter(spec.submodule_search_locations)))
        root = pkg / "tritonserver"
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        wheel = cls(
            tritonserver=root / "bin" / "tritonserver",
            libs=pkg.parent / "nvidia_pytriton.libs",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / version / "triton_python_backend_stub",
            caches=root / "caches",
        )
        for p in dataclasses.astuple(wheel):
            if not Path(p).exists():
                raise RuntimeError(f"the PyTriton wheel has no {p}")
        return wheel

    def write_backends(self, dest: Path) -> Path:
        """A --backend-directory holding python/ (the backend and its stub)."""
        python = dest / "python"
        python.mkdir(parents=True, exist_ok=True)
        for f in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copy2(self.python_backend / f, python / f)
        shutil.copy2(self.stub, python / "triton_python_backend_stub")
        return dest


def model_source(name: str) -> Path:
    """The model.py of model NAME, as its config's first line names it."""
    config = MODELS_DIR / f"{name}.pbtxt"
    first = config.read_text().splitlines()[0]
    prefix = "# model.py: "
    if not first.startswith(prefix):
        raise ValueError(f"{config}: first line must be {prefix!r}FILE, not {first!r}")
    return MODELS_DIR / first.removeprefix(prefix).strip()


def write_repository(dest: Path, names: list[str]) -> Path:
    """A model repository with the models NAMES of tests/triton/models."""
    for name in names:
        version = dest / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        shutil.copy2(MODELS_DIR / f"{name}.pbtxt", dest / name / "config.pbtxt")
        shutil.copy2(model_source(name), version / "model.py")
    return dest


def start_real_triton(workdir: Path, load: list[str], *flags: str, models: list[str] | None = None) -> TritonServer:
    """tritonserver on free loopback ports, in explicit model-control mode,
    on a repository of MODELS (default: LOAD) of which LOAD are loaded at
    start; FLAGS are Triton's own. Waits until /v2/health/ready answers 200
    (every loaded model ready). Retried as conftest.StartFailed says."""
    wheel = Wheel.find()
    workdir.mkdir(parents=True, exist_ok=True)
    repository = write_repository(workdir / "models", models if models is not None else load)
    backends = wheel.write_backends(workdir / "backends")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{wheel.libs}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}".rstrip(os.pathsep)

    def start(attempt: int) -> TritonServer:
        http, grpc, metrics = free_ports(3)
        argv = [
            str(wheel.tritonserver),
            "--model-repository", str(repository),
            "--backend-directory", str(backends),
            "--cache-directory", str(wheel.caches),
            "--model-control-mode", "explicit",
            *(f"--load-model={m}" for m in load),
            "--http-address", "127.0.0.1", "--http-port", str(http),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
            "--exit-timeout-secs", str(EXIT_TIMEOUT_S),
            *flags,
        ]  # fmt: skip
        p = Process("tritonserver", argv, workdir / f"tritonserver-{attempt}.log", env=env)
        started = time.monotonic()
        deadline = started + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if p.exited() is not None:
                raise StartFailed(p, f"exited with {p.exited()} before ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return TritonServer(p, http, grpc, metrics, tuple(flags), time.monotonic() - started)
            except (OSError, urllib.error.HTTPError):
                pass
            time.sleep(0.1)
        raise StartFailed(p, f"not ready within {READY_TIMEOUT_S:.0f}s")

    return start_retrying(start)


@dataclasses.dataclass
class Stack:
    """A real Triton and proxies (each with both doors) in front of it, by name."""

    triton: TritonServer
    doors: dict[str, Door]

    def http(self, via: str) -> str:
        """Base URL of Triton (via "triton") or of proxy VIA's HTTP door."""
        return self.triton.base_url if via == "triton" else self.doors[via].proxy.base_url

    def grpc(self, via: str) -> str:
        return self.triton.grpc_url if via == "triton" else self.doors[via].grpc_url

    def admin(self, via: str) -> str:
        return self.doors[via].proxy.admin_url


def run_stack(
    binary: str, tmp_path_factory, name: str, triton: TritonServer, proxies: dict[str, tuple[str, ...]]
) -> Iterator[Stack]:
    """A module fixture's body: proxies (name: flags) in front of triton,
    yielded as a Stack; all stopped afterwards, triton last."""
    doors: dict[str, Door] = {}
    try:
        for via, flags in proxies.items():
            doors[via] = start_door(binary, triton, tmp_path_factory.mktemp(f"{name}-{via}"), *flags)
        yield Stack(triton, doors)
    finally:
        for d in doors.values():
            d.proxy.stop()
        triton.stop()


# --- answers ---------------------------------------------------------------

# The headers a client reads from a successful answer.
READ_HEADERS = ("content-type", "inference-header-content-length", "content-encoding")


@dataclasses.dataclass(frozen=True)
class Answer:
    """One call's answer as a client reads it."""

    status: int | str  # HTTP status, or the gRPC code's name ("OK", "INTERNAL", ...)
    error: str | None = None
    body: object = None  # the JSON answer (HTTP) or {output: (datatype, shape, values)} (gRPC)
    binary: bytes = b""  # the binary tensors after an HTTP answer's JSON header
    headers: tuple[tuple[str, str], ...] = ()
    error_content_type: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in (200, "OK")


def read_http(status: int, headers, raw: bytes) -> Answer:
    """The Answer of an HTTP exchange (headers: a Message or a dict)."""
    got = {k.lower(): v for k, v in headers.items()}
    if status != 200:
        try:
            error = json.loads(raw).get("error")
        except (ValueError, AttributeError):
            error = raw.decode(errors="replace")
        return Answer(status, error=error, error_content_type=got.get("content-type"))
    header_len = got.get("inference-header-content-length")
    head, binary = (raw, b"") if header_len is None else (raw[: int(header_len)], raw[int(header_len) :])
    read = tuple((h, got[h]) for h in READ_HEADERS if h in got)
    return Answer(status, body=json.loads(head) if head else None, binary=binary, headers=read)


def http_post(url: str, body: dict | bytes, headers: dict[str, str] | None = None, timeout: float = 30) -> Answer:
    """POST body (JSON) to url as curl would, and read the answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return read_http(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return read_http(e.code, e.headers, e.read())


def http_infer(base_url: str, model: str, body: dict, headers: dict[str, str] | None = None) -> Answer:
    return http_post(f"{base_url}/v2/models/{model}/infer", body, headers)


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def grpc_answer(call: Callable[[], object], outputs: tuple[str, ...]) -> Answer:
    """The Answer of a tritonclient.grpc call returning an InferResult."""
    from tritonclient.utils import InferenceServerException

    try:
        result = call()
    except InferenceServerException as e:
        return Answer(str(e.status()).removeprefix("StatusCode."), error=e.message())
    body = {}
    for name in outputs:
        out = result.get_output(name)
        body[name] = (out.datatype, tuple(out.shape), result.as_numpy(name).tolist())
    return Answer("OK", body=body)


def grpc_infer(url: str, model: str, value: int, width: int = 4, **kwargs) -> Answer:
    """tritonclient.grpc's infer on model with IN one row of WIDTH values
    VALUE (INT32); kwargs go to infer (headers, priority, timeout, ...)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url)
    i = grpcclient.InferInput("IN", [1, width], "INT32")
    i.set_data_from_numpy(np.full((1, width), value, dtype=np.int32))
    return grpc_answer(lambda: c.infer(model, [i], **kwargs), ("OUT",))


def json_input(name: str, rows: list[list[int]], datatype: str = "INT32") -> dict:
    """A JSON input tensor of these rows."""
    data = [v for r in rows for v in r]
    return {"name": name, "shape": [len(rows), len(rows[0])], "datatype": datatype, "data": data}


def concurrently(calls: list[Callable[[], T]], timeout: float = 60) -> list[T]:
    """Run calls at once, one thread each, released together; their results
    in order (a call's exception is raised here)."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout)
            results[i] = calls[i]()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"calls still running after {timeout}s")
    return results


def differ(straight: list[Answer], through: list[Answer]) -> list[str]:
    """The callers whose answers differ, each with both answers."""
    return [
        f"caller {i}: Triton {s}\n          proxy  {t}" for i, (s, t) in enumerate(zip(straight, through)) if s != t
    ]


def assert_same(straight: list[Answer] | Answer, through: list[Answer] | Answer) -> None:
    """Every caller's answer through the proxy equals its answer straight."""
    if isinstance(straight, Answer):
        straight, through = [straight], [through]
    assert len(straight) == len(through)
    diffs = differ(straight, through)
    assert not diffs, "answers differ:\n" + "\n".join(diffs)


def poll(check: Callable[[], T], timeout: float, interval: float = 0.1) -> T:
    """check() until it returns something true, or its last value at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(interval)
