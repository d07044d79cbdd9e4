"""deploy/kubernetes: every object against its schema (Kubernetes' own,
strict, for the oldest and newest minor version we claim; the ServiceMonitor
against prometheus-operator's CRD), then the wiring a schema cannot see:
selectors, named ports, probes, the sidecar's hardening. The ratebatch
configuration in the ConfigMap is loaded by config.Load in
deploy/deploy_test.go."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from conftest import K8S, by_kind, load_yaml_docs, one

# The Kubernetes minor versions the manifests must validate against.
K8S_VERSIONS = ["1.29.0", "1.37.0"]


def servicemonitor_schema() -> dict:
    """ServiceMonitor's JSON schema from cloudcoil's models of
    prometheus-operator's CRDs, made strict: unknown fields are errors, as the
    API server's structural schema prunes (loses) them."""
    crds = os.environ.get("RATEBATCH_DEPLOY_CRDS") or str(Path(sys.executable).parent.parent / "ratebatch-deploy-crds")
    if crds not in sys.path:
        sys.path.insert(0, crds)
    try:
        from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor
    except ImportError as e:
        pytest.fail(f"ServiceMonitor models not installed in {crds} ({e}); run scripts/validate-deploy.sh")
    schema = ServiceMonitor.model_json_schema(by_alias=True)

    def strict(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)

    strict(schema)
    schema["properties"]["apiVersion"] = {"const": "monitoring.coreos.com/v1"}
    schema["properties"]["kind"] = {"const": "ServiceMonitor"}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
    return schema


def validation_errors(doc: dict, version: str) -> list[str]:
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        v = jsonschema.Draft202012Validator(servicemonitor_schema())
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.path))}: {e.message}"]
    return []


def name_of(doc: dict) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def test_kustomization_lists_every_manifest():
    kust = load_yaml_docs(K8S / "kustomization.yaml")[0]
    listed = set(kust["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present, f"kustomization.yaml resources {sorted(listed)} != files {sorted(present)}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_match_schemas(k8s_docs, version):
    errs = [f"{name_of(d)}: {e}" for d in k8s_docs for e in validation_errors(d, version)]
    assert not errs, f"schema errors (Kubernetes {version}):\n" + "\n".join(errs)


@pytest.mark.parametrize(
    "kind,path,value,want",
    [
        ("Deployment", ["spec", "template", "spec", "containers", 0, "readinessProbe", "httpGett"], {}, "httpGett"),
        ("Service", ["spec", "ports", 0, "port"], "eight thousand", "eight thousand"),
        ("ServiceMonitor", ["spec", "endpoints", 0, "interval"], "5 seconds", "5 seconds"),
        ("ServiceMonitor", ["spec", "endpoints", 0, "portt"], "admin", "portt"),
    ],
)
def test_schema_check_catches_mistakes(k8s_docs, kind, path, value, want):
    # Guards the guard: each of these mistakes must be reported.
    doc = copy.deepcopy(by_kind(k8s_docs, kind)[0])
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    errs = validation_errors(doc, K8S_VERSIONS[-1])
    assert any(want in e for e in errs), f"mistake not caught; errors: {errs}"


def pod_spec(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def container(docs, name):
    found = [c for c in pod_spec(docs)["containers"] if c["name"] == name]
    assert len(found) == 1, f"want one container {name!r}"
    return found[0]


def port_names(docs) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in pod_spec(docs)["containers"] for p in c.get("ports", [])}


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_images_pinned(k8s_docs):
    for c in pod_spec(k8s_docs)["containers"]:
        image = c["image"]
        tag = image.rpartition(":")[2] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"container {c['name']}: image {image!r} must carry a pinned tag"


def test_ratebatch_sidecar(k8s_docs):
    rb = container(k8s_docs, "ratebatch")
    sc = rb["securityContext"]
    assert sc["runAsNonRoot"] is True and sc.get("runAsUser", 1) != 0
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert rb["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert rb["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert {"http", "admin"} <= {p["name"] for p in rb["ports"]}
    assert rb["resources"]["requests"]["memory"] and rb["resources"]["limits"]["memory"]
    token = next(e for e in rb["env"] if e["name"] == "RATEBATCH_ADMIN_TOKEN")
    assert "secretKeyRef" in token["valueFrom"], "the admin token comes from a Secret"
    assert rb["args"][:1] == ["serve"]


def test_config_volume_holds_the_config_file(k8s_docs):
    rb = container(k8s_docs, "ratebatch")
    cfg = rb["args"][rb["args"].index("--config") + 1]
    mount = next(m for m in rb["volumeMounts"] if cfg.startswith(m["mountPath"].rstrip("/") + "/"))
    vol = next(v for v in pod_spec(k8s_docs)["volumes"] if v["name"] == mount["name"])
    cm = one(k8s_docs, "ConfigMap", vol["configMap"]["name"])
    key = cfg[len(mount["mountPath"].rstrip("/")) + 1 :]
    assert key in cm["data"], f"ConfigMap {cm['metadata']['name']} has no key {key!r} for {cfg}"


def test_triton_container(k8s_docs):
    tr = container(k8s_docs, "triton")
    assert str(tr["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    args = tr["args"]
    http = int(next(a for a in args if a.startswith("--http-port=")).split("=")[1])
    assert port_names(k8s_docs)[tr["readinessProbe"]["httpGet"]["port"]] == http
    assert tr["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert tr["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert tr["image"].startswith("nvcr.io/nvidia/tritonserver:")
    mounts = {m["mountPath"] for m in tr["volumeMounts"]}
    repo = next(a for a in args if a.startswith("--model-repository=")).split("=")[1]
    assert repo in mounts, f"model repository {repo} is not mounted"


def test_services_select_the_pods_and_name_real_ports(k8s_docs):
    labels = one(k8s_docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    names = port_names(k8s_docs)
    for svc in by_kind(k8s_docs, "Service"):
        assert matches(svc["spec"]["selector"], labels), f"{name_of(svc)} selects no pod"
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in names, f"{name_of(svc)}: targetPort {p['targetPort']} is no container port"


def test_only_ratebatch_is_exposed_to_clients(k8s_docs):
    triton_ports = {p["name"] for p in container(k8s_docs, "triton")["ports"]} - {"triton-metrics"}
    for svc in by_kind(k8s_docs, "Service"):
        exposed = {p["targetPort"] for p in svc["spec"]["ports"]}
        assert not exposed & triton_ports, f"{name_of(svc)} exposes Triton's {exposed & triton_ports}"
    client = one(k8s_docs, "Service", "ratebatch")
    assert [(p["port"], p["targetPort"]) for p in client["spec"]["ports"]] == [(8000, "http"), (8001, "grpc")]
    np = one(k8s_docs, "NetworkPolicy")
    assert matches(np["spec"]["podSelector"]["matchLabels"], one(k8s_docs, "Deployment")["spec"]["template"]["metadata"]["labels"])
    allowed = {p["port"] for rule in np["spec"]["ingress"] for p in rule["ports"]}
    assert allowed <= set(port_names(k8s_docs)), f"NetworkPolicy names unknown ports {allowed - set(port_names(k8s_docs))}"
    assert not allowed & triton_ports, f"NetworkPolicy opens Triton's {allowed & triton_ports}"
    # The admin port (PUT /policy, /status, the profiler) is open to the
    # monitoring namespace only, never to every client as the data ports are.
    for rule in np["spec"]["ingress"]:
        if "admin" in {p["port"] for p in rule["ports"]}:
            peers = rule.get("from") or []
            assert peers, "NetworkPolicy opens the admin port to every pod: give it a from:"
            assert any(p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") for p in peers), \
                "the admin port's from: names no namespace (the monitoring namespace)"
            assert not {"http", "grpc"} & {p["port"] for p in rule["ports"]}, "the admin rule opens data ports"


def test_servicemonitor_scrapes_the_metrics_service(k8s_docs):
    sm = one(k8s_docs, "ServiceMonitor")
    sel = sm["spec"]["selector"]["matchLabels"]
    picked = [s for s in by_kind(k8s_docs, "Service") if matches(sel, s["metadata"]["labels"])]
    assert [s["metadata"]["name"] for s in picked] == ["ratebatch-metrics"], "ServiceMonitor must select the metrics Service only"
    svc_ports = {p["name"] for p in picked[0]["spec"]["ports"]}
    ports = {e["port"] for e in sm["spec"]["endpoints"]}
    assert ports == {"admin", "triton-metrics"} and ports <= svc_ports


def test_pdb_selects_the_pods(k8s_docs):
    pdb = one(k8s_docs, "PodDisruptionBudget")
    labels = one(k8s_docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels)
