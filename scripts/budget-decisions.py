#!/usr/bin/env python3
"""budget-decisions.py: what the dispatcher did, per decision, from its decision log.

Run the proxy with RATEBATCH_DECISION_LOG=FILE (server.DecisionLogEnv),
offer load, then:

    scripts/budget-decisions.py FILE [--model simple] [--skip 0.3]

    scripts/budget-decisions.py FILE --client LOAD.csv   (ratebatch load --csv)

It prints, for the decisions taken with an instance free: how many distinct
decision epochs found the queue in each state (rows waiting), the share of
those whose first decision waited (the live mix, to compare with the plan's
"mixed p" in /status), how waits ended (the next arrival, or the wait
bound), the batch sizes sent, the round trip per size, and the time from a
batch's end to the next decision while rows wait (the turnaround the plan
counts as hold). --skip drops that share of the log from the start (the
warm-up and the first windows).

With --client, it joins the client's requests (`ratebatch load --csv`'s
file of the same run, the proxy serving nothing else) to the log's
arrivals in order, each call to the batch that carried it, and splits
each call's latency into the proxy's share (its arrival in the dispatcher
to its batch's end) and the rest (the client, the network, reading the
request and writing the answer), by kind of call: sent at once (alone or
with others), queued behind a batch in flight, held by the rule (a
decision not to send while it was the oldest row), or a partner that
joined a held call. The rest is what a plan and the live trim, which both
measure inside the proxy, do not see.
"""
import argparse
import bisect
import collections
import csv
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('log')
    ap.add_argument('--model', default='')
    ap.add_argument('--skip', type=float, default=0.3)
    ap.add_argument('--client', help="ratebatch load --csv file of the same run")
    a = ap.parse_args()
    ev = []
    for line in open(a.log):
        f = line.split()
        if len(f) < 3 or (a.model and f[2] != a.model):
            continue
        ev.append((float(f[0]), f[1], {k: float(v) if v not in ('true', 'false') else v == 'true'
                                       for k, v in (x.split('=', 1) for x in f[3:])}))
    if a.client:
        client_split(ev, a.client, a.skip)
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


def client_split(ev, path, skip):
    """Prints the client's time per call split into the proxy's and the rest."""
    reqs = sorted((float(r['start_ms']), float(r['latency_ms']), r['status'] == '200') for r in csv.DictReader(open(path)))
    arrivals = [t for t, k, _ in ev if k == 'A']
    if len(reqs) != len(arrivals):
        # The join is by order: the proxy must have served this run alone.
        print('client: %d requests in %s, %d arrivals in the log: not the same run alone, not joined' % (
            len(reqs), path, len(arrivals)))
        return
    # Calls that reached the dispatcher late: the clocks differ by a
    # constant (and the network's time), the median of arrival less send.
    late = sorted(arr - st for (st, _, _), arr in zip(reqs, arrivals))
    off = late[len(late) // 2]
    late = [d - off for d in late if d - off > 1]
    print('client: %d of %d calls reached the dispatcher over 1 ms later than the median call, %.3f ms a call, the worst %.1f ms' % (
        len(late), len(reqs), sum(late) / len(reqs), max(late, default=0)))
    # A call the rule held: a decision not to send with it the oldest row.
    held = {round(t - d['oldest'], 2) for t, k, d in ev if k == 'D' and d['send'] == 0}
    # Each arrival's batch: calls leave FIFO; a batch's end is the first
    # end whose start (end less round trip) is at or after its send.
    queue, sends = collections.deque(), []
    for t, k, d in ev:
        if k == 'A':
            queue.append(t)
        elif k == 'S':
            sends.append((t, [queue.popleft() for _ in range(min(int(d.get('calls', d['rows'])), len(queue)))]))
    ends = sorted((t - d['rt'], t) for t, k, d in ev if k == 'E')
    starts = [b for b, _ in ends]
    batch_of = {}
    for st, calls in sends:
        i = bisect.bisect_left(starts, st - 0.05)
        if i < len(ends) and ends[i][0] - st < 0.2:
            for c in calls:
                batch_of[c] = (st, ends[i][1], calls)
    kinds = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for (st, lat, ok), arr in list(zip(reqs, arrivals))[int(skip * len(reqs)):]:
        if not ok or arr not in batch_of:
            continue
        sent, end, calls = batch_of[arr]
        if round(arr, 2) in held:
            kind = 'held'
        elif any(round(c, 2) in held for c in calls):
            kind = 'partner of a held call'
        elif sent - arr >= 0.3:
            kind = 'queued behind a batch'
        else:
            kind = 'sent at once, alone' if len(calls) == 1 else 'sent at once, with others'
        k = kinds[kind]
        k[0] += 1
        k[1] += end - arr
        k[2] += lat - (end - arr)
    n = sum(k[0] for k in kinds.values())
    print('client (%s): %d calls; per call, the proxy (arrival to batch end) + the rest = the client\'s latency' % (path, n))
    for kind in ('sent at once, alone', 'sent at once, with others', 'queued behind a batch', 'held', 'partner of a held call'):
        c, prox, rest = kinds.get(kind, (0, 0, 0))
        if c:
            print('  %-26s %6d (%.3f)  %.3f + %.3f = %.3f ms' % (kind, c, c / n, prox / c, rest / c, (prox + rest) / c))
    if n:
        prox, rest = sum(k[1] for k in kinds.values()) / n, sum(k[2] for k in kinds.values()) / n
        print('  %-26s %6d          %.3f + %.3f = %.3f ms' % ('all', n, prox, rest, prox + rest))

if __name__ == '__main__':
    main()
