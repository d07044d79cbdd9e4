"""perf_analyzer against a real Triton, directly and behind ratebatch.

One command measures, at each offered request rate (open loop, Poisson
arrivals), the throughput and p50/p99 latency that perf_analyzer sees for:

  triton-off              Triton's default scheduler: every request executes alone
  triton-on-<us>          Triton's dynamic batcher, max_queue_delay_microseconds=<us>
                          (the default tries 500, 2000 and 5000; the main table
                          keeps, per rate, the delay that did best)
  ratebatch-<policy>      Triton with batching off behind `ratebatch serve --policy <policy>`
                          (ratebatch-passthrough: the proxy batches nothing, so
                          it measures what the proxy's relaying adds)

--protocol grpc points perf_analyzer at Triton's gRPC port and at the
proxy's gRPC door (`--grpc-listen`) instead, and writes its own section.

The model is server.py's `simple` with a simulated execution cost of
--tau0-ms + --alpha-ms per row, so batching pays off the way it does on a GPU.

Each Triton flavour is started once (server.py on free loopback ports) and
shared by the setups that use it, each proxy once. Rates run in ascending
order and, at each rate, every setup in turn (interleaved, so the background
load of a shared machine drifts between rates more than between the setups
compared), each run its own perf_analyzer process. Before each run the bench
waits until Triton (and the proxy) have no request left, so no run inherits
another's backlog. Once a setup is overloaded (throughput below --keep-up of
the offered rate) its higher rates are not run: it cannot keep up with them
either, and an overloaded open-loop run only measures how long it lasted.
--rounds N repeats the whole sequence and reports medians, and in how many
rounds each setup kept up: single runs on a shared machine vary.

  .venv/bin/python tests/triton/bench.py                       # markdown to stdout
  .venv/bin/python tests/triton/bench.py --update-doc docs/results/against-triton.md
  .venv/bin/python tests/triton/bench.py --protocol grpc --update-doc docs/results/against-triton.md

--update-doc rewrites only the text between the BEGIN/END markers of this
bench inside its section of the file (see MARK_BEGIN); the section's prose
and every other section are left alone.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import (  # noqa: E402  (a script next to its fixtures)
    MAX_BATCH_SIZE,
    REPO,
    RatebatchProxy,
    TritonServer,
    free_ports,
    http_get,
    http_request,
    perf_analyzer_argv,
    start_ratebatch,
    start_triton,
)
from server import VECTOR_LEN  # noqa: E402

MODEL = "simple"
SECTION = "## Real Triton: direct vs behind ratebatch (perf_analyzer)"
MARK_BEGIN = "<!-- tests/triton/bench.py: BEGIN generated -->"
MARK_END = "<!-- tests/triton/bench.py: END generated -->"
# --protocol grpc writes its own section, between its own markers.
SECTION_GRPC = "## Real Triton over gRPC: direct vs behind ratebatch (perf_analyzer -i grpc)"
MARK_BEGIN_GRPC = "<!-- tests/triton/bench.py --protocol grpc: BEGIN generated -->"
MARK_END_GRPC = "<!-- tests/triton/bench.py --protocol grpc: END generated -->"


def markers(protocol: str) -> tuple[str, str, str]:
    """The section heading and markers of the protocol's generated block."""
    if protocol == "grpc":
        return SECTION_GRPC, MARK_BEGIN_GRPC, MARK_END_GRPC
    return SECTION, MARK_BEGIN, MARK_END

DEFAULT_RATES = (50.0, 200.0, 400.0)
DEFAULT_DELAYS_US = (500, 2000, 5000)
DEFAULT_POLICIES = ("budget", "adhoc", "batchmonitor+", "smdp")
DRAIN_TIMEOUT_S = 60.0
PERF_TIMEOUT_S = 180.0


@dataclasses.dataclass
class Setup:
    """One thing perf_analyzer is pointed at."""

    name: str
    dynamic_batching: bool = False
    queue_delay_us: int = 0
    policy: str = ""  # ratebatch policy; empty: Triton directly

    def triton_flags(self, tau0_ms: float, alpha_ms: float) -> tuple[str, ...]:
        flags: tuple[str, ...] = ("--tau0-ms", f"{tau0_ms:g}", "--alpha-ms", f"{alpha_ms:g}")
        if self.dynamic_batching:
            return ("--dynamic-batching", "on", "--max-queue-delay-us", str(self.queue_delay_us), *flags)
        return ("--dynamic-batching", "off", *flags)


def parse_setups(names: list[str]) -> list[Setup]:
    """Setups from names like triton-off, triton-on-2000, ratebatch-adhoc."""
    out = []
    for name in names:
        if name == "triton-off":
            out.append(Setup(name))
        elif m := re.fullmatch(r"triton-on-(\d+)", name):
            out.append(Setup(name, dynamic_batching=True, queue_delay_us=int(m.group(1))))
        elif m := re.fullmatch(r"ratebatch-([a-z0-9+_-]+)", name):
            out.append(Setup(name, policy=m.group(1)))
        else:
            raise ValueError(f"setup {name!r}: want triton-off, triton-on-<microseconds> or ratebatch-<policy>")
    if len({s.name for s in out}) != len(out):
        raise ValueError(f"setups {names}: a setup is named twice")
    return out


@dataclasses.dataclass
class Measurement:
    """One perf_analyzer run: one setup at one offered rate."""

    setup: str
    rate: float
    command: str
    throughput: float | None = None  # responses per second
    p50_ms: float | None = None
    p99_ms: float | None = None
    inferences: int | None = None  # server side, over the measurement windows
    executions: int | None = None
    delayed_pct: float = 0.0  # requests perf_analyzer itself sent late
    load1: float = 0.0  # 1-minute load average when the run started
    overloaded: bool = False
    note: str = ""
    round: int = 1

    @property
    def rows_per_execution(self) -> float | None:
        if not self.inferences or not self.executions:
            return None
        return self.inferences / self.executions


def perf_command(url: str, rate: float, interval_ms: int, csv_path: Path, protocol: str = "http") -> list[str]:
    """The perf_analyzer invocation for one setup and one rate.

    -a: asynchronous requests, so an open-loop rate is not capped by threads;
    poisson: arrivals as a service sees them; -r 3 -s 1000: exactly three
    windows, reported merged, whatever their spread (windows on two shared
    cores vary a lot, and an unstable run would otherwise abort).
    """
    return perf_analyzer_argv(
        url, MODEL,
        "-a",
        "--request-rate-range", f"{rate:g}",
        "--request-distribution", "poisson",
        "--measurement-interval", str(interval_ms),
        "-r", "3", "-s", "1000",
        "-f", str(csv_path),
        protocol=protocol,
    )  # fmt: skip


def display_command(argv: list[str]) -> str:
    """argv as typed from the repository root, with ports as placeholders."""
    out = []
    for a in argv:
        if a == str(HERE / "perf_analyzer"):
            a = "tests/triton/perf_analyzer"
        a = re.sub(r"^127\.0\.0\.1:\d+$", "HOST:PORT", a)
        if a.endswith(".csv"):
            a = "out.csv"
        out.append(a)
    return shlex.join(out)


_INT_LINE = r"^\s*{}:\s*(\d+)\s*$"


def parse_perf_output(stdout: str) -> dict[str, float]:
    """Server-side counts and the late-sending share from perf_analyzer's stdout."""
    found: dict[str, float] = {}
    for key, label in (("inferences", "Inference count"), ("executions", "Execution count")):
        m = re.search(_INT_LINE.format(label), stdout, re.MULTILINE)
        if m:
            found[key] = int(m.group(1))
    m = re.search(r"([\d.]+)% of the requests were delayed", stdout)
    if m:
        found["delayed_pct"] = float(m.group(1))
    return found


def parse_perf_csv(path: Path) -> dict[str, float]:
    """Throughput and p50/p99 (ms) from perf_analyzer's -f report (one row)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise ValueError(f"{path}: want one result row, got {len(rows)}")
    r = rows[0]
    return {
        "throughput": float(r["Inferences/Second"]),
        "p50_ms": float(r["p50 latency"]) / 1000.0,
        "p99_ms": float(r["p99 latency"]) / 1000.0,
    }


def metric_values(text: str, name: str, model: str = MODEL) -> list[float]:
    """Values of every sample of metric `name` labelled model="<model>"."""
    pat = re.compile(rf'^{re.escape(name)}\{{[^}}]*model="{re.escape(model)}"[^}}]*\}}\s+(\S+)$', re.MULTILINE)
    return [float(v) for v in pat.findall(text)]


def wait_drained(triton: TritonServer, proxy: RatebatchProxy | None, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """True once nothing waits or runs for MODEL in the proxy or in Triton."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = 0.0
        try:
            if proxy is not None:
                _, body = http_get(proxy.admin_url + "/metrics")
                text = body.decode()
                for series in ("ratebatch_queue_rows", "ratebatch_in_flight_rows"):
                    busy += sum(metric_values(text, series))
            _, body = http_get(triton.metrics_url)
            busy += sum(metric_values(body.decode(), "nv_inference_pending_request_count"))
        except OSError:
            busy = 1
        if busy == 0:
            return True
        time.sleep(0.2)
    return False


def warm_up(url: str, n: int = 10) -> None:
    """n sequential requests: a proxy learns the model, Triton loads its stubs."""
    data = list(range(VECTOR_LEN))
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, VECTOR_LEN], "datatype": "INT32", "data": data},
                {"name": "INPUT1", "shape": [1, VECTOR_LEN], "datatype": "INT32", "data": data},
            ]
        }
    ).encode()
    for _ in range(n):
        status, raw = http_request("POST", f"http://{url}/v2/models/{MODEL}/infer", body)
        if status != 200:
            raise RuntimeError(f"warm-up request to {url}: HTTP {status}: {raw[:300]!r}")


def proxy_batches(proxy: RatebatchProxy) -> tuple[bool, str]:
    """Whether the proxy's /status lists MODEL as batched, and what it says."""
    status, body = http_get(proxy.admin_url + "/status")
    if status != 200:
        return False, f"/status answered {status}"
    models = json.loads(body).get("models") or []
    for m in models:
        if m.get("model") == MODEL:
            return bool(m.get("batched")), f"/status models[{MODEL}]: batched={m.get('batched')}"
    return False, f"/status lists no model {MODEL!r} (models: {[m.get('model') for m in models]})"


def not_batched_reason(proxy: RatebatchProxy) -> str:
    """The proxy's own explanation, from its (debug) log, of why MODEL is not batched."""
    log = proxy.process.log.read_text(errors="replace")
    for line in log.splitlines():
        if "not discovered" in line or ("level=ERROR" in line) or ("level=WARN" in line):
            m = re.search(r'err="(.*)"$', line)
            return m.group(1).replace('\\"', '"') if m else line
    return "no reason in the proxy's log"


def measure(setup: Setup, url: str, rate: float, args, workdir: Path) -> Measurement:
    csv_path = workdir / f"{setup.name}-{rate:g}.csv"
    argv = perf_command(url, rate, args.interval_ms, csv_path, args.protocol)
    m = Measurement(setup.name, rate, display_command(argv), load1=os.getloadavg()[0])
    log(f"{setup.name} @ {rate:g}/s (load {m.load1:.1f}) ...")
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=PERF_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        m.note = f"perf_analyzer did not finish within {PERF_TIMEOUT_S:.0f}s"
        m.overloaded = True
        return m
    if run.returncode != 0:
        tail = [line.strip() for line in (run.stdout + run.stderr).strip().splitlines()[-3:]]
        m.note = f"perf_analyzer exited {run.returncode}: " + " / ".join(dict.fromkeys(tail))
        m.overloaded = True
        return m
    try:
        parsed = {**parse_perf_csv(csv_path), **parse_perf_output(run.stdout)}
    except (OSError, ValueError, KeyError) as e:
        m.note = f"unreadable perf_analyzer report: {e}"
        m.overloaded = True
        return m
    for k, v in parsed.items():
        setattr(m, k, v)
    m.overloaded = m.throughput is not None and m.throughput < args.keep_up * rate
    if m.overloaded:
        m.note = f"overloaded: throughput < {args.keep_up:g} x offered"
    log(
        f"  {m.throughput:.1f} infer/s, p50 {m.p50_ms:.1f} ms, p99 {m.p99_ms:.1f} ms,"
        f" rows/exec {fmt(m.rows_per_execution, 2)}"
    )
    return m


@dataclasses.dataclass
class Target:
    """A setup, ready: where perf_analyzer points and what must drain after it."""

    setup: Setup
    url: str
    triton: TritonServer
    proxy: RatebatchProxy | None = None
    unavailable: str = ""  # why the setup cannot be measured
    stopped_at: float | None = None  # the rate it was overloaded at


def start_targets(setups: list[Setup], args, workdir: Path, started: list) -> list[Target]:
    """One Triton per flavour, one proxy per policy.

    Every process is appended to started as soon as it exists, so the caller
    can stop them all even when a later start fails.
    """
    flavours: dict[tuple[str, ...], TritonServer | None] = {}
    for s in setups:
        flavours.setdefault(s.triton_flags(args.tau0_ms, args.alpha_ms), None)
    # One after the other, from this thread: conftest's children get SIGTERM
    # when the thread that started them ends (PR_SET_PDEATHSIG), so a thread
    # pool would stop them as soon as it shut down.
    for i, flags in enumerate(flavours):
        log(f"starting Triton: server.py {' '.join(flags)}")
        flavours[flags] = start_triton(workdir / f"triton-{i}", *flags)
        started.append(flavours[flags])

    targets = []
    for s in setups:
        triton = flavours[s.triton_flags(args.tau0_ms, args.alpha_ms)]
        if not s.policy:
            warm_up(triton.url)
            targets.append(Target(s, triton.grpc_url if args.protocol == "grpc" else triton.url, triton))
            continue
        # debug: the proxy says why a model is not batched only at that level
        flags = ["--policy", s.policy, "--log-level", "debug"]
        grpc_url = ""
        if args.protocol == "grpc":
            (port,) = free_ports(1)
            grpc_url = f"127.0.0.1:{port}"
            flags += ["--grpc-listen", grpc_url, "--upstream-grpc", triton.grpc_url]
        proxy = start_ratebatch(args.ratebatch_bin, triton.base_url, workdir / s.name, *flags)
        started.append(proxy)
        warm_up(proxy.url)  # over HTTP: the proxy learns the model for both doors
        t = Target(s, grpc_url or proxy.url, triton, proxy)
        batched, status = proxy_batches(proxy)
        if not batched and s.policy != "passthrough":
            t.unavailable = f"not available: {status}; {not_batched_reason(proxy)}"
            log(f"{s.name}: {t.unavailable}")
        targets.append(t)
    return targets


def run_bench(args) -> tuple[list[Measurement], dict[str, str]]:
    """Every setup at every rate, --rounds times; returns the measurements and
    per-setup notes.

    Setups are interleaved rate by rate (all setups at the lowest rate, then
    all at the next), so the runs compared in one row group are minutes
    closer in time than setup-by-setup runs would be: on a shared machine the
    background load drifts, and it should drift between rates, not between
    the setups being compared. Rounds repeat the whole sequence on the same
    servers; a setup overloaded in one round gets its chance again in the next.
    """
    setups = parse_setups(args.setups)
    workdir = Path(tempfile.mkdtemp(prefix="ratebatch-bench-"))
    started: list = []
    results: list[Measurement] = []
    ok = False
    try:
        targets = start_targets(setups, args, workdir, started)
        for rnd in range(1, args.rounds + 1):
            if args.rounds > 1:
                log(f"round {rnd} of {args.rounds}")
            for t in targets:
                t.stopped_at = None
            for rate in args.rates:
                for t in targets:
                    name = t.setup.name
                    if t.unavailable:
                        results.append(Measurement(name, rate, "", round=rnd, note="not available"))
                        continue
                    if t.stopped_at is not None:
                        note = f"not run: overloaded at {t.stopped_at:g}/s"
                        results.append(Measurement(name, rate, "", round=rnd, overloaded=True, note=note))
                        continue
                    backlog = not wait_drained(t.triton, t.proxy)
                    m = measure(t.setup, t.url, rate, args, workdir)
                    m.round = rnd
                    if backlog:
                        m.note = (m.note + "; " if m.note else "") + "started while an earlier run's backlog remained"
                    results.append(m)
                    if m.overloaded:
                        t.stopped_at = rate
                        wait_drained(t.triton, t.proxy)
        ok = True
    finally:
        for proc in reversed(started):
            proc.stop()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"server logs kept in {workdir}")
    notes = {t.setup.name: t.unavailable for t in targets if t.unavailable}
    return results, notes


@dataclasses.dataclass
class Summary:
    """One setup at one rate over every round: medians of the runs made."""

    setup: str
    rate: float
    rounds: int
    kept_up: int  # rounds in which it kept up with the offered rate
    throughput: float | None
    p50_ms: float | None
    p99_ms: float | None
    rows_per_execution: float | None
    load1: tuple[float, float] | None  # lowest and highest over the runs made
    notes: list[str]


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(results: list[Measurement]) -> list[Summary]:
    """Per (setup, rate), in first-seen order."""
    groups: dict[tuple[str, float], list[Measurement]] = {}
    for m in results:
        groups.setdefault((m.setup, m.rate), []).append(m)
    out = []
    for (setup, rate), ms in groups.items():
        ran = [m for m in ms if m.command and m.throughput is not None]
        notes = []
        for m in ms:
            note = m.note
            if m.delayed_pct:
                note = (note + "; " if note else "") + f"perf_analyzer sent {m.delayed_pct:g}% late"
            if note:
                notes.append(note if len(ms) == 1 else f"round {m.round}: {note}")
        loads = [m.load1 for m in ms if m.command]
        out.append(
            Summary(
                setup=setup,
                rate=rate,
                rounds=len(ms),
                kept_up=sum(1 for m in ran if not m.overloaded),
                throughput=_median([m.throughput for m in ran]),
                p50_ms=_median([m.p50_ms for m in ran]),
                p99_ms=_median([m.p99_ms for m in ran]),
                rows_per_execution=_median([m.rows_per_execution for m in ran]),
                load1=(min(loads), max(loads)) if loads else None,
                notes=notes,
            )
        )
    return out


def best_triton_batcher(summaries: list[Summary]) -> dict[float, Summary]:
    """Per rate, the triton-on-* setup that did best: kept up in the most
    rounds, then the lowest median p99 (the highest throughput while it
    never kept up)."""

    def key(s: Summary):
        if s.kept_up:
            return (s.kept_up, -s.p99_ms)
        return (0, s.throughput)

    best: dict[float, Summary] = {}
    for s in summaries:
        if not s.setup.startswith("triton-on-") or s.throughput is None:
            continue
        if s.rate not in best or key(s) > key(best[s.rate]):
            best[s.rate] = s
    return best


def fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def display_binary(path: str) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else path


def table(rows: list[tuple[str, Summary]], rounds: int) -> list[str]:
    head = "| offered (req/s) | setup | throughput (infer/s) | p50 (ms) | p99 (ms) | rows per execution"
    rule = "|---:|---|---:|---:|---:|---:|"
    if rounds > 1:
        head, rule = head + " | kept up", rule + "---:|"
    lines = [head + " | load1 | note |", rule + "---:|---|"]
    for label, s in rows:
        load = "—"
        if s.load1:
            load = f"{s.load1[0]:.1f}" if s.load1[0] == s.load1[1] else f"{s.load1[0]:.1f}–{s.load1[1]:.1f}"
        row = f"| {s.rate:g} | {label} | {fmt(s.throughput)} | {fmt(s.p50_ms)} | {fmt(s.p99_ms)}"
        row += f" | {fmt(s.rows_per_execution, 2)}"
        if rounds > 1:
            row += f" | {s.kept_up}/{s.rounds}"
        lines.append(row + f" | {load} | {'; '.join(s.notes)} |")
    return lines


def label_of(name: str) -> str:
    if name == "triton-off":
        return "Triton direct, batching off"
    if name.startswith("ratebatch-"):
        return f"ratebatch `{name.removeprefix('ratebatch-')}` → Triton (off)"
    return name


def render(results: list[Measurement], notes: dict[str, str], args, elapsed_s: float, uptime: tuple[str, str]) -> str:
    """The generated part of the docs section: commands, tables, notes."""
    summaries = summarize(results)
    best = best_triton_batcher(summaries)
    order = [s.name for s in parse_setups(args.setups)]
    main_rows: list[tuple[str, Summary]] = []
    for rate in args.rates:
        emitted_batcher = False
        for name in order:
            if name.startswith("triton-on-"):
                if emitted_batcher:
                    continue
                emitted_batcher = True
                tried = [s for s in summaries if s.rate == rate and s.setup.startswith("triton-on-")]
                if rate in best:
                    delay = best[rate].setup.removeprefix("triton-on-")
                    main_rows.append((f"Triton dynamic batcher, best delay ({delay} µs)", best[rate]))
                elif tried:
                    main_rows.append(("Triton dynamic batcher", tried[0]))
                continue
            main_rows += [(label_of(name), s) for s in summaries if s.setup == name and s.rate == rate]
    delays = [s for s in order if s.startswith("triton-on-")]
    tuning = sorted((s for s in summaries if s.setup in delays), key=lambda s: (s.rate, order.index(s.setup)))

    _, mark_begin, mark_end = markers(args.protocol)
    out = [mark_begin, ""]
    rounds = ""
    if args.rounds > 1:
        rounds = (
            f" The sequence ran {args.rounds} times (rounds) on the same servers; figures are medians over the"
            " rounds in which the setup ran at that rate, and `kept up` counts the rounds whose throughput reached"
            f" {args.keep_up:g} x the offered rate."
        )
    out.append(
        f"Model `simple` (server.py) with a simulated cost of {args.tau0_ms:g} ms + {args.alpha_ms:g} ms per row"
        f" per execution, max batch {MAX_BATCH_SIZE}, one model instance; perf_analyzer (tritonclient 2.51) over"
        f" {'gRPC' if args.protocol == 'grpc' else 'HTTP'}, Poisson arrivals, three {args.interval_ms} ms windows per rate.{rounds} Machine: {os.cpu_count()}"
        f" cores ({platform.machine()}), shared with other jobs; `uptime` before: `{uptime[0]}`; after:"
        f" `{uptime[1]}`. Whole run: {elapsed_s:.0f} s."
    )
    busiest = max((m.load1 for m in results if m.command), default=0.0)
    cores = os.cpu_count() or 1
    if busiest > 2 * cores:
        out += [
            "",
            f"**Caution:** the 1-minute load average reached {busiest:.1f} on {cores} cores during this run (other"
            " jobs); perf_analyzer, the proxy and Triton competed with them for CPU, so absolute figures vary from"
            " run to run: compare setups within one rate, and look at `load1`.",
        ]
    out += [
        "",
        f"Produced by (ratebatch {source_revision()}):",
        "",
        "```",
        "make build",
        shlex.join([".venv/bin/python", "tests/triton/bench.py", *sys.argv[1:]]),
        "```",
        "",
    ]
    out += ["Each row is one perf_analyzer run per round (ports are chosen per run; at each rate the setups run"
            " one after the other, in the table's order):", ""]  # fmt: skip
    commands = sorted({(m.rate, m.command) for m in results if m.command})
    commands = list(dict.fromkeys(c for _, c in commands))
    out += ["```", *commands, "```", ""]
    out += [
        "with Triton started as `.venv/bin/python tests/triton/server.py --dynamic-batching off|on"
        f" [--max-queue-delay-us D] --tau0-ms {args.tau0_ms:g} --alpha-ms {args.alpha_ms:g}` and the proxy as"
        f" `{display_binary(args.ratebatch_bin)} serve --upstream http://HOST:PORT --listen HOST:PORT"
        " --admin-listen HOST:PORT"
        + (" --grpc-listen HOST:PORT --upstream-grpc HOST:PORT" if args.protocol == "grpc" else "")
        + " --policy P --log-level debug`.",
        "",
    ]
    out += table(main_rows, args.rounds)
    if tuning:
        out += ["", "Triton's dynamic batcher at each max_queue_delay tried (the table above keeps, per rate, the"
                " one that kept up most often, then with the lowest p99):", ""]  # fmt: skip
        out += table([(s.setup, s) for s in tuning], args.rounds)
    if notes:
        out += [""] + [f"- `{k}`: {v}" for k, v in notes.items()]
    out += ["", mark_end]
    return "\n".join(out) + "\n"


def update_doc(path: Path, generated: str, protocol: str = "http") -> None:
    """Put generated between this bench's markers (the protocol's) in its
    section of path.

    Creates the section (heading, markers) at the end of the file if it is
    missing; never touches text outside the markers.
    """
    section, mark_begin, mark_end = markers(protocol)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if mark_begin in text and mark_end in text:
        head, rest = text.split(mark_begin, 1)
        _, tail = rest.split(mark_end, 1)
        text = head + generated.rstrip("\n") + tail
    else:
        if section not in text:
            text = text.rstrip("\n") + f"\n\n{section}\n"
        head, tail = text.split(section, 1)
        text = head + section + "\n\n" + generated + tail
    path.write_text(text)


def source_revision() -> str:
    """The commit the binary was built from, as far as the work tree tells."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "at an unknown commit"
    if not rev:
        return "at an unknown commit"
    return f"at commit {rev}" + (" plus uncommitted changes" if dirty else "")


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def uptime_line() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"(uptime failed: {e})"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_setups = ["triton-off", *(f"triton-on-{d}" for d in DEFAULT_DELAYS_US)]
    default_setups += [f"ratebatch-{pol}" for pol in DEFAULT_POLICIES]
    p.add_argument(
        "--setups",
        default=",".join(default_setups),
        help="comma-separated: triton-off, triton-on-<max_queue_delay_us>, ratebatch-<policy> (default %(default)s)",
    )
    p.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in DEFAULT_RATES),
        help="offered request rates per second, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--interval-ms", type=int, default=2000, help="perf_analyzer measurement window, ms (default %(default)s)"
    )
    p.add_argument("--tau0-ms", type=float, default=5.0, help="simulated cost per execution (default %(default)s)")
    p.add_argument("--alpha-ms", type=float, default=0.5, help="simulated cost per row (default %(default)s)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the whole sequence this many times and report medians (default %(default)s; each round"
        " takes about 3 minutes here)",
    )
    p.add_argument(
        "--keep-up",
        type=float,
        default=0.9,
        help="a run whose throughput is below this share of the offered rate is overloaded (default %(default)s)",
    )
    p.add_argument(
        "--ratebatch-bin",
        default=os.environ.get("RATEBATCH_BIN") or str(REPO / "bin" / "ratebatch"),
        help="ratebatch binary (default $RATEBATCH_BIN, else bin/ratebatch from `make build`)",
    )
    p.add_argument(
        "--protocol",
        choices=["http", "grpc"],
        default="http",
        help="perf_analyzer -i: Triton's HTTP port and the proxy's --listen, or Triton's gRPC port and the"
        " proxy's --grpc-listen (default %(default)s)",
    )
    p.add_argument("--out", help="also write the generated markdown to this file")
    p.add_argument("--json", help="also write every measurement as JSON to this file")
    p.add_argument(
        "--update-doc", help="replace this bench's generated block in this markdown file (e.g. docs/results/against-triton.md)"
    )
    args = p.parse_args(argv)
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    try:
        parse_setups(args.setups)
        args.rates = sorted(float(r) for r in args.rates.split(",") if r.strip())
    except ValueError as e:
        p.error(str(e))
    if not args.setups or not args.rates:
        p.error("want at least one setup and one rate")
    if any(r <= 0 for r in args.rates):
        p.error(f"--rates {args.rates}: every rate must be > 0")
    if args.interval_ms < 100:
        p.error(f"--interval-ms {args.interval_ms}: want >= 100")
    if not 1 <= args.rounds <= 20:
        p.error(f"--rounds {args.rounds}: want 1..20")
    if not 0 < args.keep_up <= 1:
        p.error(f"--keep-up {args.keep_up}: want a share in (0, 1]")
    if args.tau0_ms < 0 or args.alpha_ms < 0:
        p.error("--tau0-ms and --alpha-ms must be >= 0")
    if any(s.startswith("ratebatch-") for s in args.setups) and not os.access(args.ratebatch_bin, os.X_OK):
        p.error(f"--ratebatch-bin {args.ratebatch_bin}: not an executable (run `make build` or set RATEBATCH_BIN)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = uptime_line()
    started = time.monotonic()
    results, notes = run_bench(args)
    elapsed = time.monotonic() - started
    generated = render(results, notes, args, elapsed, (before, uptime_line()))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "results": [dataclasses.asdict(m) for m in results],
                    "summaries": [dataclasses.asdict(x) for x in summarize(results)],
                    "notes": notes,
                    "elapsed_s": elapsed,
                },
                indent=1,
            )
        )
    if args.out:
        Path(args.out).write_text(generated)
    if args.update_doc:
        update_doc(Path(args.update_doc), generated, args.protocol)
    print(generated, end="")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, ValueError, OSError, urllib.error.URLError) as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(1)
