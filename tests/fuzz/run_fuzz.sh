#!/bin/sh
# The fuzzing campaign behind `make fuzz`: runs every libFuzzer harness of
# BUILD_DIR (configured with CT_FUZZ, see the Makefile) for SECONDS each, on a
# copy of its seed corpus (tests/fuzz/corpus/NAME is never written), JOBS
# harnesses at a time. Crashes, leaks, timeouts and out-of-memory inputs go to
# tests/fuzz/reproducers/NAME/ (replayed by the `fuzz_replay` test from then
# on). Prints the executions per harness at the end; exits 1 when a harness
# found something.
#   tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [JOBS [NAME...]]
# Environment: FUZZ_FLAGS adds libFuzzer flags (e.g. -rss_limit_mb=4096);
# FUZZ_KEEP_GOING=1 goes on after a finding (libFuzzer -fork=1 -ignore_crashes=1)
# until the time is up, so one run can find several bugs per harness.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
seconds=$2
jobs=${3:-1}
[ $# -ge 3 ] && shift 3 || shift $#
names=$*
[ -n "$names" ] || names=$(cd "$build/tests/fuzz" && ls fuzz_* | grep -v '_replay$' | sed 's/^fuzz_//')
[ -n "$names" ] || { echo "run_fuzz: no harness in $build/tests/fuzz (configure with CT_FUZZ=ON)" >&2; exit 2; }
work=$build/fuzz-work
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# one harness for $seconds: its log, summary line and artifacts
fuzz_one() {
  name=$1
  w=$work/$name
  repro=$here/reproducers/$name
  rm -rf "$w"
  mkdir -p "$w/corpus" "$w/artifacts" "$repro"
  cp "$here/corpus/$name/"* "$w/corpus/" 2>/dev/null
  dict=""
  [ -f "$here/dict/$name.dict" ] && dict="-dict=$here/dict/$name.dict"
  mode=""
  # keep going: libFuzzer's fork mode goes on after a finding (each saved once)
  [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && mode="-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1"
  # shellcheck disable=SC2086
  "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -artifact_prefix="$w/artifacts/" $mode $dict ${FUZZ_FLAGS:-} "$w/corpus" >"$w/fuzz.log" 2>&1
  # executions: the final stats (fork mode: the last status line, "#N: cov: ...")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/fuzz.log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$w/fuzz.log" | tail -n 1)
  found=$(ls "$w/artifacts" | wc -l)
  for a in "$w/artifacts"/*; do
    [ -f "$a" ] && cp "$a" "$repro/"
  done
  rmdir "$repro" 2>/dev/null
  corpus=$(ls "$w/corpus" | wc -l)
  verdict=ok
  [ "$found" -gt 0 ] && verdict="FOUND $found (copied into tests/fuzz/reproducers/$name/)"
  printf '%s %s %s %s\n' "$name" "${execs:-0}" "$corpus" "$verdict" >"$w/summary"
}

mkdir -p "$work"
echo "run_fuzz: $(echo $names | wc -w) harnesses, ${seconds}s each, $jobs at a time; logs in $work/NAME/"
running=0
for name in $names; do
  [ -x "$build/tests/fuzz/fuzz_$name" ] || { echo "run_fuzz: no fuzz_$name in $build/tests/fuzz" >&2; exit 2; }
  fuzz_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait
    running=0
  fi
done
wait

status=0
printf '\n%-12s %14s %10s  %s\n' harness executions corpus result
for name in $names; do
  if [ -f "$work/$name/summary" ]; then
    read -r n execs corpus verdict <"$work/$name/summary"
  else
    execs=0 corpus=0 verdict="did not run"
  fi
  printf '%-12s %14s %10s  %s\n' "$name" "$execs" "$corpus" "$verdict"
  case $verdict in ok) ;; *) status=1 ;; esac
done
[ "$status" -eq 0 ] || echo "run_fuzz: findings saved in $here/reproducers/ (see $work/NAME/fuzz.log)"
exit $status
