#!/usr/bin/env python3
"""budget-trace.py: what the dispatcher did, per decision, from its trace.

Run the proxy with RATEBATCH_DECISION_TRACE=FILE (dispatcher.TraceEnv),
offer load, then:

    scripts/budget-trace.py FILE [--model simple] [--skip 0.3]

It prints, for the decisions taken with an instance free: how many distinct
decision epochs found the queue in each state (rows waiting), the share of
those whose first decision waited (the live mix, to compare with the plan's
"mixed p" in /status), how waits ended (the next arrival, or the wait
bound), the batch sizes sent, the round trip per size, and the time from a
batch's end to the next decision while rows wait (the turnaround the plan
counts as hold). --skip drops that share of the trace from the start (the
warm-up and the first windows).
"""
import argparse
import collections
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('trace')
    ap.add_argument('--model', default='')
    ap.add_argument('--skip', type=float, default=0.3)
    a = ap.parse_args()
    ev = []
    for line in open(a.trace):
        f = line.split()
        if len(f) < 3 or (a.model and f[2] != a.model):
            continue
        ev.append((float(f[0]), f[1], {k: float(v) if v not in ('true', 'false') else v == 'true'
                                       for k, v in (x.split('=', 1) for x in f[3:])}))
    ev = ev[int(len(ev) * a.skip):]
    # Epochs: decisions with an instance free, keyed by the oldest row's
    # arrival and the row count (the rule's own notion of a state).
    epochs = collections.OrderedDict()
    for t, k, d in ev:
        if k == 'D' and d['inflight'] == 0:
            key = (round(t - d["oldest"], 2), int(d["rows"]))
            epochs.setdefault(key, []).append((t, d))
    by_state = collections.defaultdict(lambda: [0, 0])
    for (_, rows), ds in epochs.items():
        by_state[rows][0] += 1
        by_state[rows][1] += ds[0][1]['send'] == 0
    print('state (rows waiting, instance free): epochs, first decision waits (share)')
    for rows in sorted(by_state)[:12]:
        n, w = by_state[rows]
        print('  %3d: %6d  %6d (%.3f)' % (rows, n, w, w / n))
    # Waits: from the first waiting decision on an oldest row to the send.
    waits, at_bound = [], 0
    open_wait = {}
    for t, k, d in ev:
        if k != 'D' or d['inflight'] != 0:
            continue
        oldest = round(t - d["oldest"], 2)
        if d['send'] == 0:
            open_wait.setdefault(oldest, (t, d['rows']))
        elif oldest in open_wait:
            t0, rows0 = open_wait.pop(oldest)
            waits.append(t - t0)
            at_bound += d['rows'] == rows0
    if waits:
        print('waits: %d, mean %.3f ms, p50 %.3f, max %.3f; ended by the wait bound (no arrival): %d' % (
            len(waits), statistics.mean(waits), statistics.median(waits), max(waits), at_bound))
    sizes = collections.Counter(int(d['rows']) for t, k, d in ev if k == 'S')
    rt = collections.defaultdict(list)
    for t, k, d in ev:
        if k == 'E':
            rt[int(d['rows'])].append(d['rt'])
    total = sum(sizes.values())
    print('batches: %d, mean size %.3f' % (total, sum(s * n for s, n in sizes.items()) / max(total, 1)))
    for s in sorted(sizes)[:12]:
        print('  size %3d: %6d batches, round trip mean %.3f ms' % (s, sizes[s], statistics.mean(rt[s]) if rt[s] else float('nan')))
    gaps, last = [], None
    for t, k, d in ev:
        if k == 'E':
            last = t
        elif k == 'D' and last is not None and d['inflight'] == 0:
            if d['oldest'] >= t - last:  # a row waited through the batch
                gaps.append(t - last)
            last = None
    if gaps:
        print('batch end to next decision with rows waiting: %d, mean %.3f ms, p90 %.3f' % (
            len(gaps), statistics.mean(gaps), sorted(gaps)[int(0.9 * len(gaps))]))


if __name__ == '__main__':
    main()
