"""A real Triton Inference Server (via PyTriton) serving two numpy models.

Models
  simple  INPUT0, INPUT1 INT32 [-1,16] -> OUTPUT0 = INPUT0+INPUT1,
          OUTPUT1 = INPUT0-INPUT1 (the shape of Triton's own `simple` example)
  image   INPUT FP32 [-1,3,224,224] -> OUTPUT FP32 [-1,1000], where
          OUTPUT[k] = sum of the row's flattened values at positions k, k+1000,
          k+2000, ... (see image_reference), so every output row depends only
          on its own input row and a mixed-up batch split is detectable.

With --decoupled, a third model:
  countdown  IN INT32 [1] -> a stream of IN answers OUT INT32 [1] = IN, IN-1,
          ..., 1 (a decoupled model: only ModelStreamInfer reaches it).
It is off by default so that the other tests see two models.

Batching is Triton's: --dynamic-batching off leaves Triton's default scheduler
(every request executes alone), on enables its dynamic batcher with
--max-queue-delay-us. --tau0-ms/--alpha-ms make each execution sleep
tau0 + alpha*b milliseconds, so batching has a cost model like a GPU's.

Every listener binds to --address (127.0.0.1 by default). When the models are
loaded the server prints one line to stdout:

  READY http=127.0.0.1:PORT grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT

SIGINT or SIGTERM stops Triton and its Python backends, then the process exits
with status 0; if Triton or a backend dies on its own, the status is 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np

IMAGE_SHAPE = (3, 224, 224)
IMAGE_CLASSES = 1000
VECTOR_LEN = 16


# The echo model's inputs (and outputs): one per datatype Triton writes as
# JSON numbers. (FP16 and BF16 have no JSON form in Triton.)
ECHO_DATATYPES = {
    "FP32": np.float32,
    "FP64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
}


def image_reference(batch: np.ndarray) -> np.ndarray:
    """The image model's function: per-row sums of stride-1000 slices.

    batch has shape (b, 3, 224, 224); the result has shape (b, 1000), FP32.
    Tests use this to check answers; the server uses it to compute them.
    """
    b = batch.shape[0]
    flat = batch.reshape(b, -1).astype(np.float32, copy=False)
    n = flat.shape[1]
    rows = -(-n // IMAGE_CLASSES)  # ceil
    padded = np.zeros((b, rows * IMAGE_CLASSES), dtype=np.float32)
    padded[:, :n] = flat
    return padded.reshape(b, rows, IMAGE_CLASSES).sum(axis=1, dtype=np.float32)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default="127.0.0.1", help="address every listener binds to (default %(default)s)")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--max-batch-size", type=int, default=8, help="max_batch_size of both models (default %(default)s)")
    p.add_argument(
        "--dynamic-batching",
        choices=["off", "on"],
        default="off",
        help="Triton's dynamic batcher for both models (default %(default)s)",
    )
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=0,
        help="dynamic_batching.max_queue_delay_microseconds (needs --dynamic-batching on)",
    )
    p.add_argument("--tau0-ms", type=float, default=0.0, help="fixed sleep per execution, ms")
    p.add_argument("--alpha-ms", type=float, default=0.0, help="extra sleep per batched request, ms")
    p.add_argument("--decoupled", action="store_true", help="also serve the decoupled model countdown")
    p.add_argument("--log-verbose", type=int, default=0, help="Triton's --log-verbose level")
    p.add_argument(
        "--trace-url",
        default="",
        help="OTLP/HTTP traces URL (host:port/v1/traces): Triton's OpenTelemetry trace mode, every request traced",
    )
    p.add_argument(
        "--access-token",
        default="",
        help="protect PyTriton's default endpoint set (statistics, model-repository, shared-memory, trace, logging)"
        " with header triton-access-token: TOKEN; empty (default) leaves every endpoint open, as stock Triton does",
    )
    p.add_argument(
        "--workspace",
        default=None,
        help="new directory (must not exist) for PyTriton's model store, sockets and server copy (default: one under"
        " ~/.cache/pytriton); removed on exit",
    )
    p.add_argument(
        "--grpc-server-cert",
        default=None,
        help="PEM certificate of the gRPC port; with --grpc-server-key it speaks TLS (Triton's --grpc-use-ssl)",
    )
    p.add_argument("--grpc-server-key", default=None, help="PEM key of --grpc-server-cert")
    p.add_argument(
        "--grpc-root-cert",
        default=None,
        help="PEM CA certificates: gRPC clients must present a certificate one signed (Triton's --grpc-use-ssl-mutual)",
    )
    p.add_argument(
        "--ready-file",
        default=None,
        help="also write the READY line to this file (atomically, once serving); Triton's own log"
        " shares stdout, so a reader that must not parse interleaved output waits for this file",
    )
    args = p.parse_args(argv)

    for name in ("http_port", "grpc_port", "metrics_port"):
        port = getattr(args, name)
        if not 1 <= port <= 65535:
            p.error(f"--{name.replace('_', '-')} {port}: want a port in 1..65535")
    if len({args.http_port, args.grpc_port, args.metrics_port}) != 3:
        p.error("--http-port, --grpc-port and --metrics-port must differ")
    if args.max_batch_size < 1:
        p.error(f"--max-batch-size {args.max_batch_size}: want >= 1")
    if args.max_queue_delay_us < 0:
        p.error(f"--max-queue-delay-us {args.max_queue_delay_us}: want >= 0")
    if args.max_queue_delay_us > 0 and args.dynamic_batching == "off":
        p.error("--max-queue-delay-us needs --dynamic-batching on")
    if bool(args.grpc_server_cert) != bool(args.grpc_server_key) or (args.grpc_root_cert and not args.grpc_server_cert):
        p.error("--grpc-server-cert and --grpc-server-key go together, and --grpc-root-cert needs them")
    if args.tau0_ms < 0 or args.alpha_ms < 0:
        p.error("--tau0-ms and --alpha-ms must be >= 0")
    return args


def check_ports_free(address: str, ports: list[int]) -> str | None:
    """An error naming the first port already bound on address, else None.

    Triton would fail to bind it, and PyTriton would then talk to whatever
    server holds the port; better to stop before either happens.
    """
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as e:
                return f"port {port} on {address}: address already in use ({e.strerror})"
    return None


def _sleep_for(batch_size: int, tau0_ms: float, alpha_ms: float) -> None:
    ms = tau0_ms + alpha_ms * batch_size
    if ms > 0:
        time.sleep(ms / 1000.0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    busy = check_ports_free(args.address, [args.http_port, args.grpc_port, args.metrics_port])
    if busy:
        print(f"server.py: {busy}", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    # Imported here so that --help and argument errors do not pay for pytriton.
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    @batch
    def infer_simple(INPUT0: np.ndarray, INPUT1: np.ndarray):
        _sleep_for(INPUT0.shape[0], args.tau0_ms, args.alpha_ms)
        return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}

    @batch
    def infer_image(INPUT: np.ndarray):
        _sleep_for(INPUT.shape[0], args.tau0_ms, args.alpha_ms)
        return {"OUTPUT": image_reference(INPUT)}

    @batch
    def infer_echo(**inputs):
        # Every output is its input: the JSON answer shows how the server
        # writes each datatype's numbers (tests/triton/test_json_numbers.py).
        return {name.replace("IN_", "OUT_"): value for name, value in inputs.items()}

    @batch
    def infer_half(IN: np.ndarray):
        # FP16 in and out: Triton takes and gives those values only in binary
        # form (tests/triton/test_half.py).
        return {"OUT": (IN * 2).astype(np.float16)}

    batcher = None
    if args.dynamic_batching == "on":
        batcher = DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)
    # batcher=None keeps max_batch_size but writes no dynamic_batching block,
    # which is Triton's default scheduler.
    model_config = ModelConfig(batching=True, max_batch_size=args.max_batch_size, batcher=batcher)

    config = TritonConfig(
        http_address=args.address,
        http_port=args.http_port,
        grpc_address=args.address,
        grpc_port=args.grpc_port,
        metrics_address=args.address,
        metrics_port=args.metrics_port,
        allow_metrics=True,
        allow_gpu_metrics=False,
        allow_cpu_metrics=True,
        log_verbose=args.log_verbose,
        exit_timeout_secs=5,
    )
    if args.trace_url:
        # Triton's OpenTelemetry mode: a request carrying traceparent gets
        # its spans in the caller's trace.
        config.trace_config = [
            "mode=opentelemetry",
            "rate=1",
            "level=TIMESTAMPS",
            f"opentelemetry,url={args.trace_url}",
            "opentelemetry,resource=service.name=triton",
        ]
    if args.grpc_server_cert:
        config.grpc_use_ssl = True
        config.grpc_server_cert = Path(args.grpc_server_cert)
        config.grpc_server_key = Path(args.grpc_server_key)
        if args.grpc_root_cert:
            config.grpc_use_ssl_mutual = True
            config.grpc_root_cert = Path(args.grpc_root_cert)

    asked_to_stop = False

    def _terminate(signum, _frame):
        nonlocal asked_to_stop
        asked_to_stop = True
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)

    started = time.monotonic()
    if args.access_token:
        security = TritonSecurityConfig(access_token=args.access_token)
    else:
        # PyTriton's default puts a random token on these APIs; stock Triton does not.
        security = TritonSecurityConfig(access_token=None, restricted_endpoints=[])
    triton = Triton(config=config, workspace=args.workspace, security_config=security)
    try:
        triton.bind(
            model_name="simple",
            infer_func=infer_simple,
            inputs=[
                Tensor(name="INPUT0", dtype=np.int32, shape=(VECTOR_LEN,)),
                Tensor(name="INPUT1", dtype=np.int32, shape=(VECTOR_LEN,)),
            ],
            outputs=[
                Tensor(name="OUTPUT0", dtype=np.int32, shape=(VECTOR_LEN,)),
                Tensor(name="OUTPUT1", dtype=np.int32, shape=(VECTOR_LEN,)),
            ],
            config=model_config,
            strict=True,
        )
        triton.bind(
            model_name="image",
            infer_func=infer_image,
            inputs=[Tensor(name="INPUT", dtype=np.float32, shape=IMAGE_SHAPE)],
            outputs=[Tensor(name="OUTPUT", dtype=np.float32, shape=(IMAGE_CLASSES,))],
            config=model_config,
            strict=True,
        )
        triton.bind(
            model_name="half",
            infer_func=infer_half,
            inputs=[Tensor(name="IN", dtype=np.float16, shape=(-1,))],
            outputs=[Tensor(name="OUT", dtype=np.float16, shape=(-1,))],
            config=model_config,
            strict=True,
        )
        triton.bind(
            model_name="echo",
            infer_func=infer_echo,
            inputs=[Tensor(name=f"IN_{dt}", dtype=t, shape=(-1,)) for dt, t in ECHO_DATATYPES.items()],
            outputs=[Tensor(name=f"OUT_{dt}", dtype=t, shape=(-1,)) for dt, t in ECHO_DATATYPES.items()],
            config=model_config,
            strict=True,
        )
        if args.decoupled:

            def infer_countdown(requests):
                # One answer per request per step; a request of n answers n times.
                n = max(int(r["IN"].reshape(-1)[0]) for r in requests)
                for step in range(n):
                    yield [{"OUT": np.array([int(r["IN"].reshape(-1)[0]) - step], dtype=np.int32)} for r in requests]

            triton.bind(
                model_name="countdown",
                infer_func=infer_countdown,
                inputs=[Tensor(name="IN", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="OUT", dtype=np.int32, shape=(1,))],
                config=ModelConfig(batching=False, decoupled=True),
                strict=False,
            )
        triton.run()
        a = args.address
        ready = (
            f"READY http={a}:{args.http_port} grpc={a}:{args.grpc_port} metrics={a}:{args.metrics_port}"
            f" dynamic_batching={args.dynamic_batching} max_queue_delay_us={args.max_queue_delay_us}"
            f" max_batch_size={args.max_batch_size} startup_s={time.monotonic() - started:.1f}"
        )
        if args.ready_file:
            tmp = f"{args.ready_file}.tmp"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(ready + "\n")
            os.replace(tmp, args.ready_file)
        print(ready, flush=True)
        triton.serve()  # returns on SIGINT/SIGTERM or when Triton or a model backend dies
    except KeyboardInterrupt:
        pass
    finally:
        triton.stop()
    if not asked_to_stop:
        print("server.py: Triton or a model backend stopped unexpectedly", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
