"""A request's trace through the proxy's batch into Triton's own spans.

A real OTLP/HTTP receiver (a small HTTP server reading OpenTelemetry's own
protobuf messages) collects what ratebatch exports and what Triton exports
in its OpenTelemetry trace mode. Concurrent clients each send their own
W3C traceparent over HTTP and gRPC through ratebatch to PyTriton, batched
together (maxbatch with a long delay gathers them). The test checks what
an operator reads in Jaeger or Tempo:

- each request's span is in its client's trace, a child of the client's span;
- one batch span links every member request's span, and every member links
  back to it;
- Triton's spans of the batched request hang under the batch span;
- a pass-through call (model metadata) goes upstream with the caller's
  traceparent unchanged.
"""

from __future__ import annotations

import gzip
import http.server
import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import free_ports, start_ratebatch, start_triton
from server import VECTOR_LEN

CALLERS = 4  # clients sending at once, gathered into one batch


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces, protobuf or JSON."""

    def __init__(self):
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ctype = self.headers.get("Content-Type", "")
                try:
                    spans = outer._json(body) if "json" in ctype else outer._proto(body)
                except (DecodeError, ValueError, KeyError) as e:
                    self.send_response(400)
                    self.end_headers()
                    self.wfile.write(str(e).encode())
                    return
                with outer.lock:
                    outer.spans.extend(spans)
                self.send_response(200)
                self.send_header("Content-Type", ctype or "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _proto(body: bytes) -> list[dict]:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        out = []
        for rs in req.resource_spans:
            service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        {
                            "service": service,
                            "name": s.name,
                            "trace": s.trace_id.hex(),
                            "span": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "links": [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            "attrs": {a.key: _value(a.value) for a in s.attributes},
                        }
                    )
        return out

    @staticmethod
    def _json(body: bytes) -> list[dict]:
        # OTLP/JSON writes trace and span ids as hex strings.
        doc = json.loads(body)
        out = []
        for rs in doc.get("resourceSpans", []):
            attrs = rs.get("resource", {}).get("attributes", [])
            service = next((a["value"].get("stringValue", "") for a in attrs if a["key"] == "service.name"), "")
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    out.append(
                        {
                            "service": service,
                            "name": s["name"],
                            "trace": s["traceId"].lower(),
                            "span": s["spanId"].lower(),
                            "parent": s.get("parentSpanId", "").lower(),
                            "links": [(lk["traceId"].lower(), lk["spanId"].lower()) for lk in s.get("links", [])],
                            "attrs": {},
                        }
                    )
        return out

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.spans)

    def wait(self, predicate, timeout_s: float = 20.0, what: str = "spans"):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.snapshot()
            if predicate(spans):
                return spans
            time.sleep(0.2)
        raise AssertionError(f"{what} not received within {timeout_s}s; got {json.dumps(self.snapshot(), indent=1)}")

    def close(self):
        self.server.shutdown()


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def traced(receiver, ratebatch_bin, tmp_path_factory):
    """PyTriton in OpenTelemetry trace mode and ratebatch in front of it,
    both exporting to the receiver; maxbatch gathers concurrent callers."""
    url = f"http://127.0.0.1:{receiver.port}"
    (grpc_port,) = free_ports(1)
    triton = start_triton(tmp_path_factory.mktemp("triton-traced"), "--trace-url", f"{url}/v1/traces")
    proxy = start_ratebatch(
        ratebatch_bin,
        triton.base_url,
        tmp_path_factory.mktemp("proxy-traced"),
        "--tracing-otlp-endpoint", url,
        "--grpc-listen", f"127.0.0.1:{grpc_port}",
        "--upstream-grpc", triton.grpc_url,
        "--policy", "maxbatch",
        "--policy-max-queue-delay", "300ms",
    )  # fmt: skip
    yield triton, proxy, f"127.0.0.1:{grpc_port}"
    proxy.stop()
    triton.stop()


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _inputs(module, k: int):
    a = np.full((1, VECTOR_LEN), k, dtype=np.int32)
    ins = [module.InferInput("INPUT0", [1, VECTOR_LEN], "INT32"), module.InferInput("INPUT1", [1, VECTOR_LEN], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    return ins, a


@pytest.mark.parametrize("door", ["http", "grpc"])
def test_a_request_is_followed_through_its_batch_into_triton(traced, receiver, door):
    triton, proxy, grpc_url = traced
    clients = [_traceparent() for _ in range(CALLERS)]

    def call(k: int):
        ins, a = _inputs(httpclient if door == "http" else grpcclient, k)
        headers = {"traceparent": clients[k][2]}
        if door == "http":
            with httpclient.InferenceServerClient(proxy.target().url, network_timeout=30.0) as c:
                r = c.infer("simple", ins, headers=headers)
        else:
            with grpcclient.InferenceServerClient(grpc_url) as c:
                r = c.infer("simple", ins, headers=headers)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)

    with ThreadPoolExecutor(CALLERS) as pool:
        list(pool.map(call, range(CALLERS)))

    traces = {c[0] for c in clients}

    def complete(spans):
        # These requests' spans, the batch span linking them, and a Triton
        # span under that batch (Triton's exporter may come last).
        requests = [s for s in spans if s["service"] == "ratebatch" and any(s["parent"] == c[1] for c in clients)]
        if len(requests) < CALLERS:
            return False
        members = {(s["trace"], s["span"]) for s in requests}
        batch_ids = {s["span"] for s in spans if s["service"] == "ratebatch" and members & set(s["links"])}
        return any(s["service"] != "ratebatch" and s["parent"] in batch_ids for s in spans)

    spans = receiver.wait(complete, what=f"the {door} requests', their batch's and Triton's spans")
    by_span = {s["span"]: s for s in spans}
    requests = {}
    for trace_id, parent, _ in clients:
        mine = [s for s in spans if s["trace"] == trace_id and s["parent"] == parent and s["service"] == "ratebatch"]
        assert len(mine) == 1, f"client trace {trace_id}: {len(mine)} request spans under the client's span"
        requests[trace_id] = mine[0]

    # One batch span links all members; each member links back to it.
    member_ids = {(s["trace"], s["span"]) for s in requests.values()}
    batches = [s for s in spans if s["service"] == "ratebatch" and member_ids & set(s["links"])]
    assert len(batches) == 1, f"{len(batches)} batch spans link these requests: {batches}"
    batch = batches[0]
    assert member_ids <= set(batch["links"]), "the batch span does not link every member"
    assert batch["attrs"].get("ratebatch.batch.calls") == CALLERS
    for r in requests.values():
        assert (batch["trace"], batch["span"]) in r["links"], "a member does not link its batch"
        assert r["attrs"].get("ratebatch.batch.rows") == CALLERS
        assert r["attrs"].get("ratebatch.queue_wait_ms", -1) >= 0
    assert batch["parent"] in {r["span"] for r in requests.values()}, "the batch is not in a member's trace"

    # Triton's spans of the batched request are the batch span's children.
    root = [s for s in spans if s["service"] != "ratebatch" and s["parent"] == batch["span"]]
    assert root, "no Triton span has the batch span as parent"
    assert all(s["trace"] == batch["trace"] for s in root)
    assert by_span[batch["span"]]["trace"] in traces


def test_pass_through_keeps_the_callers_context(traced, receiver, ratebatch_bin, tmp_path_factory):
    """A call the proxy does not batch (here every call: policy passthrough)
    is relayed with the caller's traceparent unchanged: Triton's span of it
    is the client's span's child."""
    triton, _, _ = traced
    proxy = start_ratebatch(
        ratebatch_bin,
        triton.base_url,
        tmp_path_factory.mktemp("proxy-passthrough"),
        "--tracing-otlp-endpoint", f"http://127.0.0.1:{receiver.port}",
        "--policy", "passthrough",
    )  # fmt: skip
    try:
        trace_id, parent, header = _traceparent()
        ins, a = _inputs(httpclient, 3)
        with httpclient.InferenceServerClient(proxy.target().url, network_timeout=30.0) as c:
            r = c.infer("simple", ins, headers={"traceparent": header})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
        spans = receiver.wait(
            lambda spans: any(s["trace"] == trace_id and s["parent"] == parent for s in spans),
            what="Triton's span of the passed-through call under the caller's span",
        )
    finally:
        proxy.stop()
    theirs = [s for s in spans if s["trace"] == trace_id and s["service"] != "ratebatch"]
    assert any(s["parent"] == parent for s in theirs), f"Triton's spans {theirs} do not hang under the caller's span"
