#!/usr/bin/env bash
# Runs each fuzz target (pkg:FuzzName) for FUZZTIME. A failing input found
# is written to the package's testdata/fuzz and fails the run. One failure
# is retried: Go's bare "context deadline exceeded" at the -fuzztime
# boundary with no failing input written, a race between the fuzzing
# coordinator's deadline and its busy workers (golang/go#51484, #75804) that
# says nothing about the code; any other failure, or the same again, fails.
#   scripts/fuzz.sh FUZZTIME pkg:FuzzName...
set -uo pipefail
fuzztime=$1
shift
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	pkg=${t%%:*}
	fn=${t##*:}
	for attempt in 1 2; do
		echo "fuzz ./$pkg $fn for $fuzztime"
		"$go" test -run '^$' -fuzz "^$fn\$" -fuzztime "$fuzztime" "./$pkg" 2>&1 | tee "$log"
		[ "${PIPESTATUS[0]}" -eq 0 ] && break
		if [ "$attempt" = 1 ] && grep -qx '    context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
			echo "fuzz: $fn stopped on Go's -fuzztime deadline race, no failing input: once more"
			continue
		fi
		exit 1
	done
done
