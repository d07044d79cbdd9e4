#!/usr/bin/env python3
"""gotrace-runs.py: the longest goroutine runs in a Go execution trace, and
whether anything else ran meanwhile.

    curl -H "Authorization: Bearer $RATEBATCH_ADMIN_TOKEN" -o proxy.trace 'http://ADMIN/debug/pprof/trace?seconds=10'   (serve --admin-pprof)
    go tool trace -d=parsed proxy.trace > proxy.parsed
    scripts/gotrace-runs.py proxy.parsed [--over-ms 5] [--top 6]

For each of the longest runs (a goroutine Running until it leaves that
state) it prints its length, its P, when it started, and how many runs of
other goroutines overlapped it: zero means the process ran nothing else,
as a policy's solve did on a proxy sized to one P (docs/LEARNING.md, "A
solve stalled a proxy sized to one P"). It also lists the GOMAXPROCS
values the trace saw.
"""
import argparse
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('parsed')
    ap.add_argument('--over-ms', type=float, default=5)
    ap.add_argument('--top', type=int, default=6)
    a = ap.parse_args()
    rx = re.compile(r'^M=\S+ P=(\S+) G=\S+ StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+)')
    first, running, runs, procs = None, {}, [], set()
    for line in open(a.parsed):
        if first is None and (m := re.search(r'Time=(\d+)', line)):
            first = int(m.group(1))
        if 'gomaxprocs' in line and (m := re.search(r'Uint64\((\d+)\)', line)):
            procs.add(int(m.group(1)))
        m = rx.match(line)
        if not m:
            continue
        p, t, g, src, dst = m.groups()
        if dst == 'Running':
            running[g] = (int(t), p)
        elif src == 'Running' and g in running:
            t0, p0 = running.pop(g)
            runs.append((t0, int(t), g, p0))
    long = sorted((r for r in runs if r[1] - r[0] > a.over_ms * 1e6), key=lambda r: r[0] - r[1])
    print('goroutine runs over %g ms: %d; GOMAXPROCS seen: %s' % (a.over_ms, len(long), sorted(procs)))
    for t0, t1, g, p in long[:a.top]:
        others = sum(1 for r in runs if r[2] != g and r[0] < t1 and r[1] > t0)
        print('  G%s %.1f ms on P%s at +%.0f ms: %d runs of other goroutines meanwhile' % (
            g, (t1 - t0) / 1e6, p, (t0 - first) / 1e6, others))


if __name__ == '__main__':
    main()
