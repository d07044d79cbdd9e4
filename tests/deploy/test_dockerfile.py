"""Dockerfile and .dockerignore: hadolint, the rules this project relies on
(multi-stage, pinned bases, non-root numeric USER in every runtime stage, the
static target last so it is the default), and the static stage's own go
build command run here to prove the binary it makes is static."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import REPO, run, tool

DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined,
    comments and parser directives dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):  # a comment inside a continued instruction
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        kw, _, rest = buf.partition(" ")
        out.append((kw.upper(), rest.strip()))
        buf = ""
    return out


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    args, stages = {}, []
    for kw, rest in instructions(text):
        if kw == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k] = v
        elif kw == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--platform")]
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base, name))
        elif stages:
            stages[-1].instructions.append((kw, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


def runtime_stages(stages: list[Stage]) -> list[Stage]:
    """Stages that are images someone runs: neither another stage's base nor
    a COPY --from source."""
    used = {s.base for s in stages} | {
        m.group(1) for s in stages for kw, rest in s.instructions if kw == "COPY"
        for m in [re.search(r"--from=(\S+)", rest)] if m
    }
    return [s for s in stages if s.name not in used]


def test_hadolint():
    hadolint = tool("hadolint", "HADOLINT")
    assert hadolint, "hadolint not installed; run scripts/validate-deploy.sh"
    r = run([hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)])
    assert r.returncode == 0, f"hadolint:\n{r.stdout}{r.stderr}"


def test_multi_stage_with_pinned_bases(stages):
    assert len(stages) >= 2, "the Dockerfile must be multi-stage"
    names = {s.name for s in stages}
    for s in stages:
        if s.base in names:
            continue
        ref = s.base.split("@")[0]
        tag = ref.rpartition(":")[2] if ":" in ref.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"stage {s.name}: base {s.base!r} must be pinned to a tag (not latest)"


def test_runtime_stages_run_as_numeric_non_root(stages):
    rts = runtime_stages(stages)
    assert {s.name for s in rts} == {"static", "nvml"}, f"runtime stages: {[s.name for s in rts]}"
    for s in rts:
        users = [rest for kw, rest in s.instructions if kw == "USER"]
        assert users, f"stage {s.name}: no USER: the user must be explicit and numeric (runAsNonRoot can only verify a numeric uid)"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, f"stage {s.name}: USER {users[-1]} must be a numeric non-root uid"
        assert any(kw == "ENTRYPOINT" for kw, _ in s.instructions), f"stage {s.name}: no ENTRYPOINT"


def test_static_is_the_default_target(stages):
    last = stages[-1]
    assert last.name == "static", "the last stage is what `docker build` makes: it must be the static one"
    assert "distroless/static" in last.base and last.base.endswith(":nonroot")


def go_build_command(stages: list[Stage], stage: str) -> str:
    """The shell command of the go build RUN in stage, --mount options removed."""
    s = next(s for s in stages if s.name == stage)
    for kw, rest in s.instructions:
        if kw == "RUN" and "go build" in rest:
            return re.sub(r"--mount=\S+\s*", "", rest).strip()
    raise AssertionError(f"stage {stage} has no go build")


def test_static_stage_builds_without_cgo_and_nvml(stages):
    cmd = go_build_command(stages, "build-static")
    assert "CGO_ENABLED=0" in cmd and re.search(r"-tags[ =]\S*nonvml", cmd), cmd
    copies = [rest for kw, rest in stages[-1].instructions if kw == "COPY"]
    assert any("--from=build-static" in c for c in copies), "the static image must copy the static build"


def elf_is_static(path: Path) -> bool:
    """No PT_INTERP and no PT_DYNAMIC program header: nothing for a dynamic
    loader to do, so the binary runs on distroless/static or scratch."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF"
    e_phoff, = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    types = {struct.unpack_from("<I", data, e_phoff + i * e_phentsize)[0] for i in range(e_phnum)}
    PT_DYNAMIC, PT_INTERP = 2, 3
    return not types & {PT_DYNAMIC, PT_INTERP}


def test_static_stage_command_makes_a_static_binary(stages, tmp_path):
    # The Dockerfile's own command, with its output redirected here.
    cmd = go_build_command(stages, "build-static")
    out = tmp_path / "ratebatch"
    cmd = re.sub(r"-o\s+\S+", f"-o {shlex.quote(str(out))}", cmd)
    r = run(["bash", "-c", cmd], cwd=REPO, timeout=600)
    assert r.returncode == 0, f"{cmd}\n{r.stderr}"
    assert elf_is_static(out), f"{cmd} made a dynamically linked binary"
    v = run([str(out), "version"])
    assert v.returncode == 0 and v.stdout.startswith("ratebatch"), v.stdout + v.stderr


def test_elf_check_tells_dynamic_from_static(tmp_path):
    # Guards the guard: a dynamically linked binary is reported.
    assert not elf_is_static(Path("/bin/sh").resolve())


def dockerignore_patterns() -> list[tuple[str, bool]]:
    pats = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            neg = line.startswith("!")
            pats.append((line.lstrip("!").strip("/"), neg))
    return pats


def ignored(rel: str, pats: list[tuple[str, bool]]) -> bool:
    """Docker's rule, enough for this file: the last matching pattern wins;
    a pattern matches a path or any of its parent directories."""
    result = False
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat, neg in pats:
        pat = pat.replace("**/", "*")
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            result = not neg
    return result


def test_dockerignore_keeps_what_the_build_needs():
    pats = dockerignore_patterns()
    env = dict(os.environ, CGO_ENABLED="0")
    r = run(
        ["go", "list", "-tags", "nonvml", "-deps", "-f",
         "{{if not .Standard}}{{.Dir}}|{{join .GoFiles \",\"}}|{{join .EmbedFiles \",\"}}{{end}}",
         "./cmd/ratebatch"],
        cwd=REPO, env=env,
    )
    assert r.returncode == 0, r.stderr
    needed = ["go.mod", "go.sum"]
    for line in r.stdout.split():
        d, gofiles, embeds = line.split("|")
        if not d.startswith(str(REPO) + "/"):
            continue  # module cache
        rel = os.path.relpath(d, REPO)
        needed += [f"{rel}/{f}" for f in (gofiles + "," + embeds).split(",") if f]
    lost = [p for p in needed if ignored(p, pats)]
    assert not lost, f".dockerignore drops files the image build needs: {lost}"
    for heavy in [".git", ".venv"]:
        assert ignored(heavy, pats), f".dockerignore should keep {heavy} out of the build context"


def test_dockerignore_rule_follows_docker():
    pats = [("deploy", False), ("**/__pycache__", False), ("docs", False), ("docs/keep.md", True)]
    assert ignored("deploy/x/y.go", pats)
    assert ignored("a/b/__pycache__", pats)
    assert not ignored("dispatcher/d.go", pats)
    assert not ignored("docs/keep.md", pats)
