"""Prometheus config and the Grafana dashboard: promtool checks the config
and parses every PromQL expression of the dashboard; the dashboard's
structure is checked here; that its metric names exist in the Go sources is
checked by deploy/deploy_test.go."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import DASHBOARD, DEPLOY, run, tool

PROM_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    p = tool("promtool", "PROMTOOL")
    assert p, "promtool not installed; run scripts/validate-deploy.sh (or set PROMTOOL)"
    return p


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_promtool_check_config(promtool):
    r = run([promtool, "check", "config", "--syntax-only", str(PROM_CONFIG)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_check_config_catches_a_bad_duration(promtool, tmp_path):
    # Guards the guard.
    bad = tmp_path / "prometheus.yml"
    bad.write_text(PROM_CONFIG.read_text().replace("scrape_interval: 5s", "scrape_interval: 5 seconds"))
    r = run([promtool, "check", "config", "--syntax-only", str(bad)])
    assert r.returncode != 0


def panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def expressions(d: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(d) for t in p.get("targets", []) if t.get("expr")]


# Grafana's variables, replaced by values Prometheus accepts.
_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$model": ".*",
    "$window": "1m",
}


def as_promql(expr: str) -> str:
    for k in sorted(_VARS, key=len, reverse=True):
        expr = expr.replace(k, _VARS[k]).replace("${" + k[1:] + "}", _VARS[k])
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def check_rules(promtool: str, exprs: list[str], tmp_path) -> tuple[int, str]:
    """promtool parses each expression as a recording rule."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump(rules))
    r = run([promtool, "check", "rules", str(f)])
    return r.returncode, r.stdout + r.stderr


def test_dashboard_promql_parses(promtool, dashboard, tmp_path):
    exprs = expressions(dashboard)
    assert len(exprs) >= 20
    code, out = check_rules(promtool, [as_promql(e) for _, e in exprs], tmp_path)
    assert code == 0, out


def test_promql_check_catches_a_syntax_error(promtool, tmp_path):
    code, _ = check_rules(promtool, ['sum by (model (rate(ratebatch_arrivals_total[1m]))'], tmp_path)
    assert code != 0


def test_dashboard_structure(dashboard):
    assert dashboard["uid"] == "ratebatch" and dashboard["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "model", "window"} <= variables
    for p in panels(dashboard):
        if p["type"] == "row":
            continue
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        assert p["datasource"]["uid"] == "${datasource}", f"panel {p['title']!r} must use the datasource variable"
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, f"panel {p['title']!r} overflows the grid"


def test_dashboard_panels_do_not_overlap(dashboard):
    cells = {}
    for p in panels(dashboard):
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


@pytest.mark.parametrize(
    "topic,pattern",
    [
        ("arrival rate vs chosen batch size", r"ratebatch_arrival_rate_per_second.*\n?.*ratebatch_chosen_batch_size"),
        ("batch size heatmap", r"ratebatch_batch_size_bucket"),
        ("end-to-end p50/p99", r"histogram_quantile\(0\.99, .*ratebatch_request_duration_seconds_bucket"),
        ("queue wait", r"ratebatch_queue_wait_seconds_bucket"),
        ("upstream latency", r"ratebatch_upstream_duration_seconds_bucket"),
        ("regression alpha/tau0", r"ratebatch_regression_alpha_seconds"),
        ("requests per joule", r"ratebatch_requests_per_joule"),
        ("errors", r"ratebatch_request_errors_total"),
        ("rejections", r"ratebatch_requests_rejected_total"),
        ("accounting", r"ratebatch_requests_accepted_total.*ratebatch_requests_answered_total"),
    ],
)
def test_dashboard_covers(dashboard, topic, pattern):
    by_panel = {}
    for title, e in expressions(dashboard):
        by_panel[title] = by_panel.get(title, "") + "\n" + e
    assert any(re.search(pattern, e, re.S) for e in by_panel.values()), f"no panel shows {topic}"
