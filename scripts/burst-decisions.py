#!/usr/bin/env python3
"""burst-decisions.py: each call's latency in the proxy by its time into a burst.

From a decision log (RATEBATCH_DECISION_LOG=FILE on `serve`, load such
as perf_analyzer --async --request-intervals of `ratebatch load --trace
onoff --write-intervals`), it rebuilds each call's arrival and answer (the
queue is first in, first out: a batch of k rows takes the k oldest), finds
the bursts (an arrival after fewer than 7 arrivals in the 20 ms around the
previous 5 ms step), and prints the calls' mean latency in 50 ms bins of
time since their burst began, and between bursts ("off"). The first tenth
of the calls (the warm-up) is left out.

    scripts/burst-decisions.py LOG [LOG ...] [--model simple]
"""
import argparse
import bisect
import collections


def analyse(path, model):
    queue, inflight, arrivals, calls = collections.deque(), collections.deque(), [], []
    for line in open(path):
        p = line.split()
        if len(p) < 3 or p[2] != model:
            continue
        t, kind = float(p[0]), p[1]
        kv = dict(x.split('=', 1) for x in p[3:] if '=' in x)
        if kind == 'A':
            queue.append(t)
            arrivals.append(t)
        elif kind == 'S':
            n = min(int(kv['rows']), len(queue))
            inflight.append([queue.popleft() for _ in range(n)])
        elif kind == 'E' and inflight:
            for a in inflight.popleft():
                calls.append((a, t - a))
    calls.sort()
    calls = calls[len(calls) // 10:]
    dense = lambda t: bisect.bisect(arrivals, t + 10) - bisect.bisect(arrivals, t - 10) > 6
    starts, was = [], False
    for t in range(int(arrivals[0]), int(arrivals[-1]), 5):
        now = dense(t)
        if now and not was:
            starts.append(t)
        was = now
    bins = collections.defaultdict(list)
    for a, lat in calls:
        i = bisect.bisect(starts, a) - 1
        if i >= 0:
            since = a - starts[i]
            bins['off' if since > 520 else int(since // 50) * 50].append(lat)
    print(path)
    for k in sorted(k for k in bins if k != 'off') + ['off']:
        v = bins[k]
        print('  %5s ms: %5d calls, mean %.2f ms' % (k, len(v), sum(v) / len(v)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('log', nargs='+')
    ap.add_argument('--model', default='simple')
    a = ap.parse_args()
    for f in a.log:
        analyse(f, a.model)


if __name__ == '__main__':
    main()
