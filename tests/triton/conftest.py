"""Fixtures that run a real Triton server (tests/triton/server.py) and, when it
exists, the ratebatch proxy in front of it, all on free loopback ports.

Targets
  Tests that take the `target` fixture run once per target:
    triton     Triton directly.
    ratebatch  the proxy: RATEBATCH_PROXY_URL (host:port or http://host:port
               of a running proxy whose upstream serves server.py's models),
               else `ratebatch serve --upstream ... --listen ... --admin-listen ...`
               started here from RATEBATCH_BIN or a fresh `go build` of
               ./cmd/ratebatch. Skipped, with the reason, while the binary has
               no `serve` command.
  The same client calls run against both, so a proxy test is the direct test.
  start_ratebatch() starts further proxies (e.g. with another --policy) in
  front of any Triton; test_batching.py and bench.py use it.

Markers
  bench   a short run of tests/triton/bench.py (the perf_analyzer comparison);
          deselect with -m "not bench".
  timing  its assertions are measured times (a profile's slope, a fitted
          line): `make test` runs these after the others, with nothing else
          running, and the others beside its CPU-bound checks.

Every process started here runs in its own process group, is stopped with
SIGTERM (SIGKILL to the group after a grace period) at teardown, and gets
SIGTERM if pytest itself dies. When RATEBATCH_TEST_PIDS names a file, each
group id is appended to it so tests/triton/run.sh can stop leftovers.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SERVER = HERE / "server.py"
PERF_ANALYZER = HERE / "perf_analyzer"

READY_TIMEOUT_S = 90.0  # Triton + two Python backends start in ~5 s here
STOP_TIMEOUT_S = 30.0  # Triton unloads models within its exit timeout (5 s)

# The session's Triton: Triton's default scheduler (every request executes
# alone) and a GPU-like cost per execution of 5 ms + 0.5 ms per row, so that
# batching in front of it pays off the way it does on a GPU.
SESSION_SERVER_FLAGS = ("--dynamic-batching", "off", "--tau0-ms", "5", "--alpha-ms", "0.5")
MAX_BATCH_SIZE = 8


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "bench: a short run of tests/triton/bench.py (perf_analyzer, ~30 s)")
    config.addinivalue_line("markers", "timing: assertions on measured times; make test runs these alone")


def free_ports(n: int) -> list[int]:
    """n distinct ports that were free on 127.0.0.1 a moment ago."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """preexec_fn: own process group, and SIGTERM when pytest dies."""
    os.setpgid(0, 0)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _record_pgid(pid: int) -> None:
    path = os.environ.get("RATEBATCH_TEST_PIDS")
    if path:
        with open(path, "a", encoding="ascii") as f:
            f.write(f"{pid}\n")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


class Process:
    """A child process in its own group, logging to a file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log = log
        self._logf = open(log, "wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            env=env,
            cwd=REPO,
        )
        _record_pgid(self.proc.pid)

    def exited(self) -> int | None:
        return self.proc.poll()

    def output(self) -> str:
        return _tail(self.log)

    def stop(self) -> None:
        """SIGTERM, wait, then SIGKILL the whole group if it is still there."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers (tritonserver, stubs) if any
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._logf.close()


@dataclasses.dataclass
class TritonServer:
    """A running Triton: tests/triton/server.py (PyTriton), or the wheel's
    tritonserver started directly (conformance.start_real_triton)."""

    process: Process
    http_port: int
    grpc_port: int
    metrics_port: int
    flags: tuple[str, ...]
    startup_s: float

    @property
    def url(self) -> str:
        """host:port, as tritonclient and perf_analyzer take it."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.url}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def stop(self) -> None:
        self.process.stop()


START_ATTEMPTS = 3

T = TypeVar("T")


class StartFailed(RuntimeError):
    """A child that did not come up, stopped, with its own output.

    retry: worth starting again with new ports. A child killed by a signal
    before it was ready never ran the program under test: pytest has
    tritonclient's gRPC core loaded, and the forked child, between fork and
    exec, has aborted in it (SIGABRT after "Epoll1Poller encountered
    epoll_wait error: Bad file descriptor"); tritonserver's own event engine
    has done the same at start-up. A port can be taken between choosing and
    binding it. Any other failure, such as a bad flag's exit status, is the
    program's own answer and is not retried.
    """

    def __init__(self, proc: Process, what: str):
        code = proc.exited()
        out = proc.output()
        proc.stop()
        super().__init__(f"{proc.name}: {what}:\n{out}")
        self.retry = (code is not None and code < 0) or "address already in use" in out.lower()


def start_retrying(start: Callable[[int], T]) -> T:
    """start(attempt), made again (attempt 1, 2, ...) while it raises a
    StartFailed worth retrying, up to START_ATTEMPTS in all; the last
    failure is raised."""
    for attempt in range(START_ATTEMPTS):
        try:
            return start(attempt)
        except StartFailed as e:
            if not e.retry or attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def start_triton(workdir: Path, *flags: str) -> TritonServer:
    """Start server.py with flags on free loopback ports; wait for READY.

    Retried as StartFailed says (a signal before READY, a port taken).
    """
    workdir.mkdir(parents=True, exist_ok=True)

    def start(attempt: int) -> TritonServer:
        http, grpc, metrics = free_ports(3)
        argv = [
            sys.executable,
            str(SERVER),
            "--http-port", str(http),
            "--grpc-port", str(grpc),
            "--metrics-port", str(metrics),
            "--workspace", str(workdir / f"workspace-{attempt}"),
            *flags,
        ]  # fmt: skip
        ready = workdir / f"ready-{attempt}"
        argv += ["--ready-file", str(ready)]
        started = time.monotonic()
        p = Process("triton", argv, workdir / f"triton-{attempt}.log")
        deadline = started + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready.exists():
                return TritonServer(p, http, grpc, metrics, tuple(flags), time.monotonic() - started)
            if p.exited() is not None:
                raise StartFailed(p, f"server.py {' '.join(flags)} exited with {p.exited()} before READY")
            time.sleep(0.1)
        raise StartFailed(p, f"server.py {' '.join(flags)} not READY within {READY_TIMEOUT_S:.0f}s")

    return start_retrying(start)


@pytest.fixture(scope="session")
def triton(tmp_path_factory) -> Iterator[TritonServer]:
    """The session's Triton server (see SESSION_SERVER_FLAGS)."""
    server = start_triton(tmp_path_factory.mktemp("triton"), *SESSION_SERVER_FLAGS)
    yield server
    server.stop()


@dataclasses.dataclass
class Target:
    """Somewhere that speaks Triton's HTTP API: Triton itself or the proxy."""

    name: str
    url: str  # host:port

    @property
    def base_url(self) -> str:
        return f"http://{self.url}"

    def client(self, concurrency: int = 1):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.url, concurrency=concurrency, network_timeout=30.0)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    return http_request("GET", url, None, timeout)


def http_request(method: str, url: str, body: bytes | None, timeout: float = 10.0, headers=None) -> tuple[int, bytes]:
    """(status, body) for one request; HTTP errors are answers, not exceptions."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _ratebatch_binary(tmp_path_factory) -> str:
    """RATEBATCH_BIN, else a fresh build of ./cmd/ratebatch; skips without go."""
    given = os.environ.get("RATEBATCH_BIN")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        pytest.skip("ratebatch proxy: RATEBATCH_BIN unset and no `go` on PATH to build ./cmd/ratebatch")
    out = tmp_path_factory.mktemp("ratebatch") / "ratebatch"
    build = subprocess.run(
        [go, "build", "-o", str(out), "./cmd/ratebatch"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    if build.returncode != 0:
        pytest.fail(f"go build ./cmd/ratebatch failed:\n{build.stdout}{build.stderr}")
    return str(out)


def _wait_ready(proc: Process, base_url: str, timeout_s: float = 30.0) -> None:
    """Wait until base_url's /v2/health/ready answers 200; StartFailed (proc
    stopped) if proc exits first or it does not within timeout_s."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc.exited() is not None:
            raise StartFailed(proc, f"exited with {proc.exited()}")
        try:
            status, body = http_get(base_url + "/v2/health/ready", timeout=2.0)
            if status == 200:
                return
            last = f"{status} {body[:200]!r}"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise StartFailed(proc, f"not ready within {timeout_s:.0f}s (last: {last})")


@dataclasses.dataclass
class RatebatchProxy:
    """A running `ratebatch serve`: its data listener and its admin listener."""

    process: Process
    listen_port: int
    admin_port: int
    flags: tuple[str, ...]

    @property
    def url(self) -> str:
        """host:port of the data listener, as tritonclient and perf_analyzer take it."""
        return f"127.0.0.1:{self.listen_port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.url}"

    @property
    def admin_url(self) -> str:
        """Base URL of the admin listener (/metrics, /status)."""
        return f"http://127.0.0.1:{self.admin_port}"

    def target(self) -> Target:
        return Target("ratebatch", self.url)

    def stop(self) -> None:
        self.process.stop()


def start_ratebatch(binary: str, upstream_url: str, workdir: Path, *flags: str) -> RatebatchProxy:
    """Start `binary serve --upstream upstream_url` plus flags (e.g. "--policy",
    "adhoc") on free loopback ports; wait until its /v2/health/ready answers 200.

    Retried as StartFailed says; raises StartFailed (a RuntimeError) with the
    proxy's own output if it exits or is not ready.
    """
    workdir.mkdir(parents=True, exist_ok=True)

    def start(attempt: int) -> RatebatchProxy:
        listen, admin = free_ports(2)
        argv = [
            binary, "serve",
            "--upstream", upstream_url,
            "--listen", f"127.0.0.1:{listen}",
            "--admin-listen", f"127.0.0.1:{admin}",
            *flags,
        ]  # fmt: skip
        proc = Process("ratebatch serve", argv, workdir / f"ratebatch-{listen}.log")
        _wait_ready(proc, f"http://127.0.0.1:{listen}")
        return RatebatchProxy(proc, listen, admin, tuple(flags))

    return start_retrying(start)


@dataclasses.dataclass
class Door:
    """A proxy with both doors (HTTP and gRPC) in front of a Triton."""

    proxy: RatebatchProxy
    grpc_url: str

    @property
    def pid(self) -> int:
        return self.proxy.process.proc.pid


def start_door(binary: str, triton, workdir: Path, *flags: str) -> Door:
    """start_ratebatch in front of triton (anything with base_url and
    grpc_url: a TritonServer) with its gRPC door on
    too (--grpc-listen, --upstream-grpc triton.grpc_url); waits until the
    gRPC door says the server is ready."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    (port,) = free_ports(1)
    url = f"127.0.0.1:{port}"
    p = start_ratebatch(
        binary, triton.base_url, workdir, "--grpc-listen", url, "--upstream-grpc", triton.grpc_url, *flags
    )
    c = grpcclient.InferenceServerClient(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            if c.is_server_ready():
                break
        except InferenceServerException:
            pass
        if time.monotonic() > deadline:
            p.stop()
            raise RuntimeError(f"gRPC door {url} not ready:\n{p.process.output()}")
        time.sleep(0.1)
    return Door(p, url)


@pytest.fixture(scope="session")
def ratebatch_bin(tmp_path_factory) -> str:
    """Path of a ratebatch binary that has `serve`; skips (with the reason) when there is none."""
    binary = _ratebatch_binary(tmp_path_factory)
    probe = subprocess.run([binary, "serve", "-h"], capture_output=True, text=True, timeout=30)
    if "unknown command" in probe.stderr:
        pytest.skip(f"ratebatch proxy: `{Path(binary).name} serve` does not exist yet ({probe.stderr.splitlines()[0]})")
    if probe.returncode != 0:
        pytest.fail(f"`ratebatch serve -h` exited {probe.returncode}:\n{probe.stdout}{probe.stderr}")
    return binary


@pytest.fixture(scope="session")
def ratebatch(request, tmp_path_factory) -> Iterator[Target]:
    """The ratebatch proxy in front of the session's Triton (or RATEBATCH_PROXY_URL)."""
    given = os.environ.get("RATEBATCH_PROXY_URL")
    if given:
        yield Target("ratebatch", given.removeprefix("http://").rstrip("/"))
        return

    binary = request.getfixturevalue("ratebatch_bin")
    upstream: TritonServer = request.getfixturevalue("triton")
    proxy = start_ratebatch(binary, upstream.base_url, tmp_path_factory.mktemp("proxy"))
    yield proxy.target()
    proxy.stop()


@pytest.fixture(scope="session", params=["triton", "ratebatch"])
def target(request) -> Target:
    """Each test that takes it runs against Triton directly and via the proxy."""
    if request.param == "triton":
        server: TritonServer = request.getfixturevalue("triton")
        return Target("triton", server.url)
    return request.getfixturevalue("ratebatch")


def perf_analyzer_argv(target_url: str, model: str, *extra: str, protocol: str = "http") -> list[str]:
    """perf_analyzer (tritonclient 2.51.0's, via tests/triton/perf_analyzer) against target_url,
    over protocol (http or grpc)."""
    return [str(PERF_ANALYZER), "-m", model, "-u", target_url, "-i", protocol, *extra]
