#!/usr/bin/env python3
"""promdelta.py: how much a Prometheus counter grew between two scrapes.

    scripts/promdelta.py REGEX AFTER [BEFORE]

Prints the sum of the samples whose line matches REGEX (from the line's
start: a metric name, and a label set to pick one series) in the text
exposition AFTER, less the same sum in BEFORE when given. The live checks
(budget-grid.sh, traffic-check.sh) scrape the proxy and the emulator
before and after a segment and read their counters' growth with it.
"""
import re
import sys


def total(path, pattern):
    rx = re.compile(pattern)
    with open(path) as f:
        return sum(float(line.split()[-1]) for line in f if not line.startswith('#') and rx.match(line))


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    pattern, after = sys.argv[1:3]
    d = total(after, pattern)
    if len(sys.argv) == 4:
        d -= total(sys.argv[3], pattern)
    print(d)


if __name__ == '__main__':
    main()
