"""docker-compose.yml: the compose-spec schema, plus the properties the stack
relies on that a schema cannot see (what is published, what is mounted, which
images are pinned, that Prometheus and Grafana point at the right services).
The ratebatch configuration it gives is loaded by config.Load in
deploy/deploy_test.go."""

from __future__ import annotations

import importlib.resources
import json
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import jsonschema
import pytest

from conftest import COMPOSE_FILE, REPO, interpolate, load_yaml_docs, run


def compose_schema() -> dict:
    # The compose-spec schema as check-jsonschema vendors it (see its
    # builtin_schemas/vendor/licenses/LICENSE.compose-spec).
    ref = importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    return json.loads(ref.read_text())


def schema_errors(schema: dict, doc) -> list[str]:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]


def test_compose_matches_compose_spec_schema(compose):
    errs = schema_errors(compose_schema(), compose)
    assert not errs, "docker-compose.yml breaks the compose-spec schema:\n" + "\n".join(errs)


def test_schema_check_catches_a_misspelt_key(compose):
    # Guards the guard: a typo'd service key must be reported.
    broken = json.loads(json.dumps(compose))
    broken["services"]["ratebatch"]["read_olny"] = True
    assert any("read_olny" in e for e in schema_errors(compose_schema(), broken))


def test_docker_compose_config_when_plugin_present():
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose plugin not installed; the compose-spec schema check stands in")
    r = run([docker, "compose", "-f", str(COMPOSE_FILE), "config", "-q"], cwd=REPO)
    assert r.returncode == 0, r.stderr


def service_names(compose) -> set[str]:
    return set(compose["services"])


def bind_mounts(service: dict) -> dict[str, Path]:
    """Container path -> host path of every bind mount (short syntax)."""
    out = {}
    for v in service.get("volumes", []):
        parts = v.split(":") if isinstance(v, str) else [v["source"], v["target"]]
        src, dst = parts[0], parts[1]
        if src.startswith((".", "/")):
            out[dst] = (REPO / src).resolve()
    return out


def host_path(service: dict, container_path: str) -> Path | None:
    """The host file behind container_path, through the service's bind mounts."""
    cp = PurePosixPath(container_path)
    for dst, src in bind_mounts(service).items():
        try:
            rel = cp.relative_to(dst)
        except ValueError:
            continue
        return src / rel
    return None


def test_bind_mounts_exist(compose):
    for name, svc in compose["services"].items():
        for dst, src in bind_mounts(svc).items():
            assert src.exists(), f"services.{name}: {src} (mounted at {dst}) does not exist"


@pytest.mark.parametrize("service", ["triton", "ratebatch", "prometheus", "grafana"])
def test_service_present(compose, service):
    assert service in compose["services"]


def test_images_pinned(compose):
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"services.{name}: no image (set image: even with build:, to name the result)"
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"services.{name}: image {image!r} has no tag"
        assert tag != "latest", f"services.{name}: image {image!r} uses :latest"


def test_only_ratebatch_data_port_is_public(compose):
    triton = compose["services"]["triton"]
    assert "ports" not in triton, "triton must not publish ports: clients go through ratebatch"
    published = {}
    for name, svc in compose["services"].items():
        for p in svc.get("ports", []):
            assert isinstance(p, str), f"services.{name}: use the short port syntax"
            fields = p.split(":")
            host_ip = fields[0] if len(fields) == 3 else ""
            published[(name, fields[-1])] = host_ip
    data_ports = {("ratebatch", "8000"), ("ratebatch", "8001")}  # HTTP and gRPC doors
    for door in data_ports:
        assert published.get(door) == "", f"ratebatch must publish {door[1]}:{door[1]} on all interfaces"
    for (name, port), ip in published.items():
        if (name, port) not in data_ports:
            assert ip == "127.0.0.1", f"services.{name}: port {port} should bind 127.0.0.1 only"


def test_triton_reserves_gpu_and_serves_model_repository(compose):
    triton = compose["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices)
    cmd = triton["command"]
    assert cmd[0] == "tritonserver"
    repo_flag = [a for a in cmd if a.startswith("--model-repository=")]
    assert repo_flag, "tritonserver needs --model-repository"
    models = repo_flag[0].split("=", 1)[1]
    assert host_path(triton, models) is not None, f"{models} is not mounted into triton"
    assert "--http-port=8000" in cmd, "Triton keeps its usual HTTP port inside its container"
    assert triton["image"].startswith("nvcr.io/nvidia/tritonserver:")


def test_ratebatch_runs_hardened_from_the_static_target(compose):
    rb = compose["services"]["ratebatch"]
    uid = str(rb["user"]).split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "ratebatch must run as a numeric non-root user"
    assert rb.get("read_only") is True
    assert rb.get("cap_drop") == ["ALL"]
    assert rb["build"]["target"] == "static"
    cmd = rb["command"]
    assert cmd[0] == "serve"
    cfg = cmd[cmd.index("--config") + 1]
    assert host_path(rb, cfg) is not None and host_path(rb, cfg).is_file(), f"{cfg} is not mounted"


def test_prometheus_config_mounted_and_targets_are_services(compose):
    prom = compose["services"]["prometheus"]
    flag = next(a for a in prom["command"] if a.startswith("--config.file="))
    cfg_path = host_path(prom, flag.split("=", 1)[1])
    assert cfg_path and cfg_path.is_file()
    cfg = load_yaml_docs(cfg_path)[0]
    hosts = {
        t.split(":")[0]
        for job in cfg["scrape_configs"]
        for sc in job.get("static_configs", [])
        for t in sc["targets"]
    }
    assert hosts == {"ratebatch", "triton"}, f"scrape targets {hosts}"
    assert hosts <= service_names(compose)


def test_grafana_provisioning_points_at_services_and_dashboards(compose):
    graf = compose["services"]["grafana"]
    prov = host_path(graf, "/etc/grafana/provisioning")
    assert prov and prov.is_dir(), "provisioning must be mounted at /etc/grafana/provisioning"
    for ds in (p for f in (prov / "datasources").glob("*.yaml") for p in load_yaml_docs(f)[0]["datasources"]):
        host = ds["url"].split("//", 1)[1].split(":")[0]
        assert host in service_names(compose), f"data source {ds['name']} points at {ds['url']}"
    providers = [p for f in (prov / "dashboards").glob("*.yaml") for p in load_yaml_docs(f)[0]["providers"]]
    assert providers
    for p in providers:
        d = host_path(graf, p["options"]["path"])
        assert d and any(d.glob("*.json")), f"dashboard provider {p['name']}: no JSON at {p['options']['path']}"
    home = graf["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        assert host_path(graf, home) and host_path(graf, home).is_file(), f"home dashboard {home} not mounted"


def test_interpolation_defaults():
    # The helper the checks above rely on follows compose's rules.
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("${UNSET:-d}|${EMPTY:-d}|${EMPTY-d}|${SET}|$$", env) == "d|d||x|$"
    with pytest.raises(ValueError):
        interpolate("${UNSET:?needed}", env)
