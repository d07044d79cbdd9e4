#!/usr/bin/env bash
# Compares the proxy and dispatcher Go benchmarks of a base commit with the
# working tree on this machine: both test binaries are built once, then run
# in turns (base first in odd rounds, the working tree first in even ones)
# so that the load of a shared machine falls on both alike. Prints, per
# benchmark, the median ns/op of each side and their ratio (head / base;
# below 1 is faster), and the median of the per-round ratios. Read ratios,
# not absolute figures. RAW=FILE keeps the raw lines (benchmark side ns/op).
#
# Usage: scripts/bench-compare.sh [BASE_REV] [ROUNDS] [BENCH_REGEXP]
#        (defaults: main, 5, .)
# Env:   BENCHTIME  -test.benchtime per benchmark and round (default 200ms)
#        PKGS       packages to compare (default "proxy dispatcher")
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-main}
rounds=${2:-5}
bench=${3:-.}
benchtime=${BENCHTIME:-200ms}
pkgs=${PKGS:-proxy dispatcher}
go=${GO:-go}

tmp=$(mktemp -d)
cleanup() {
	git -C "$repo" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach -q "$tmp/base" "$base"
echo "base $(git -C "$tmp/base" rev-parse --short HEAD) vs head $(git -C "$repo" rev-parse --short HEAD) (+ working tree); $rounds rounds of $benchtime" >&2

for pkg in $pkgs; do
	(cd "$tmp/base" && "$go" test -c -o "$tmp/$pkg.base" "./$pkg")
	(cd "$repo" && "$go" test -c -o "$tmp/$pkg.head" "./$pkg")
done

run() { # side pkg
	local dir=$repo
	[[ $1 == base ]] && dir=$tmp/base
	(cd "$dir/$2" && "$tmp/$2.$1" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") |
		awk -v side="$1" '/^Benchmark/ { for (i = 3; i <= NF; i++) if ($(i+1) == "ns/op") { print $1, side, $i; break } }' >>"$tmp/results"
}
for r in $(seq "$rounds"); do
	for pkg in $pkgs; do
		if ((r % 2)); then run base "$pkg"; run head "$pkg"; else run head "$pkg"; run base "$pkg"; fi
	done
	echo "round $r of $rounds done" >&2
done

# Per benchmark: the median ns/op of each side, and the median of the
# per-round ratios (head / base of the same round, run back to back), the
# figure least moved by load that comes and goes between rounds.
printf "%-64s %12s %12s %7s %7s\n" "benchmark" "base ns/op" "head ns/op" "ratio" "paired"
awk '
	function median(a, m,    i, j, t) {
		for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	{ names[$1] = 1; v[$1, $2, ++n[$1, $2]] = $3 }
	END {
		for (name in names) {
			nb = n[name, "base"]; nh = n[name, "head"]
			delete x; for (i = 1; i <= nb; i++) x[i] = v[name, "base", i]; mb = nb ? median(x, nb) : 0
			delete x; for (i = 1; i <= nh; i++) x[i] = v[name, "head", i]; mh = nh ? median(x, nh) : 0
			np = nb < nh ? nb : nh
			delete x; for (i = 1; i <= np; i++) x[i] = v[name, "head", i] / v[name, "base", i]
			ratio = mb && mh ? sprintf("%.2f", mh / mb) : "-"
			paired = np ? sprintf("%.2f", median(x, np)) : "-"
			printf "%-64s %12.0f %12.0f %7s %7s\n", name, mb, mh, ratio, paired
		}
	}' "$tmp/results" | sort
if [[ -n ${RAW:-} ]]; then cp "$tmp/results" "$RAW"; fi
