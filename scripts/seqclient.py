#!/usr/bin/env python3
"""seqclient.py: one sequential client that opens a new connection for every
call, as `requests.post` without a Session, urllib or curl in a shell loop
do, for traffic-check.sh's shapes curl and post:THINK_MS.

    seqclient.py URL SECONDS MODE THINK_MS

URL is the model's infer URL (http://host:port/v2/models/simple/infer);
MODE is urllib (a new HTTP connection from Python per call) or curl (one
curl process per call, its own time_total taken as the latency). It sends
the simple model's two 16-element INT32 inputs for SECONDS, thinking
THINK_MS between an answer and the next call, and prints one JSON line:
the mean and p99 latency in ms, the calls answered per second, the count
and the errors. A call answered other than 200 is an error and fails the
run (exit 1), since a shape whose calls fail measures nothing.
"""
import json
import subprocess
import sys
import time
import urllib.request

url, seconds, mode, think_ms = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
body = json.dumps({"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
]}).encode()


def call_urllib():
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        ok = r.status == 200
    return time.perf_counter() - t0, ok


def call_curl():
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "-X", "POST",
                          "-H", "Content-Type: application/json", "--data-binary", "@-", url],
                         input=body, capture_output=True, timeout=15).stdout.decode().split()
    return float(out[1]), out[0] == "200"


call = {"urllib": call_urllib, "curl": call_curl}[mode]
lat, errors = [], 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    try:
        d, ok = call()
    except Exception as e:  # noqa: BLE001 - any failure of a call is an error
        print("seqclient: %s" % e, file=sys.stderr)
        d, ok = 0.0, False
    if ok:
        lat.append(d * 1000)
    else:
        errors += 1
    if think_ms > 0:
        time.sleep(think_ms / 1000)
elapsed = time.perf_counter() - start
lat.sort()
if not lat:
    sys.exit("seqclient: no call answered")
p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
print(json.dumps({"avg": sum(lat) / len(lat), "p99": p99, "rps": len(lat) / elapsed, "count": len(lat), "errors": errors}))
sys.exit(1 if errors else 0)
