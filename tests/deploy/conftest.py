"""Shared helpers for the offline checks of ratebatch's shipping artefacts.

Run through scripts/validate-deploy.sh, which installs the validators
(tests/deploy/requirements.txt) and promtool, then runs pytest here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE_FILE = REPO / "docker-compose.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ratebatch.json"


def load_yaml_docs(path: Path) -> list[dict]:
    """Every non-empty YAML document in path."""
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


_INTERP = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})")


def interpolate(value, env: dict[str, str]):
    """Compose-style ${VAR}, ${VAR:-default}, ${VAR-default} and $$ in every
    string of value, as `docker compose config` does before validating."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group("name"), m.group("op"), m.group("arg")
        got = env.get(name)
        if op in (":-", ":?") and not got or op in ("-", "?") and got is None:
            if op.endswith("?"):
                raise ValueError(f"compose variable {name} is required: {arg}")
            return arg or ""
        return got or ""

    return _INTERP.sub(sub, value)


def tool(name: str, env_var: str | None = None) -> str | None:
    """Path of a validator: $env_var, else the venv's bin, else PATH."""
    if env_var and os.environ.get(env_var):
        return os.environ[env_var]
    venv_bin = Path(sys.executable).parent / name
    if venv_bin.exists():
        return str(venv_bin)
    return shutil.which(name)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run(cmd, **kw)


@pytest.fixture(scope="session")
def compose() -> dict:
    return interpolate(load_yaml_docs(COMPOSE_FILE)[0], {})


@pytest.fixture(scope="session")
def k8s_docs() -> list[dict]:
    """The manifests as kustomize renders them (kubectl kustomize) when
    kubectl is installed, else the files kustomization.yaml lists."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = run([kubectl, "kustomize", str(K8S)])
        assert r.returncode == 0, f"kubectl kustomize {K8S} failed:\n{r.stderr}"
        return [d for d in yaml.safe_load_all(r.stdout) if d is not None]
    kust = load_yaml_docs(K8S / "kustomization.yaml")[0]
    docs = []
    for res in kust["resources"]:
        docs.extend(load_yaml_docs(K8S / res))
    return docs


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"want exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]
