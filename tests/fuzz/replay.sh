#!/bin/sh
# The `fuzz_replay` test: runs every harness's replay build over its corpus
# (tests/fuzz/corpus/NAME, which must hold inputs) and its saved reproducers
# (tests/fuzz/reproducers/NAME, may be absent). Goes on after a failure, so
# one run names every harness that fails; exits 1 when any did.
#   replay.sh BIN_DIR FUZZ_SRC_DIR NAME...
set -u
bin=$1 src=$2
shift 2
failed=""
for name in "$@"; do
  exe="$bin/fuzz_${name}_replay"
  corpus="$src/corpus/$name"
  if [ ! -x "$exe" ]; then
    echo "fuzz_replay: $exe is not built" >&2
    failed="$failed $name"
    continue
  fi
  if [ -z "$(ls -A "$corpus" 2>/dev/null)" ]; then
    echo "fuzz_replay: $corpus is empty or missing (tests/fuzz/make_corpus.sh makes it)" >&2
    failed="$failed $name"
    continue
  fi
  if "$exe" "$corpus" "$src/reproducers/$name" 2>"$bin/replay_$name.log"; then
    echo "fuzz_replay: $name: $(tail -n 1 "$bin/replay_$name.log")"
  else
    rc=$?
    echo "fuzz_replay: $name FAILED (exit $rc); its last lines ($bin/replay_$name.log):" >&2
    tail -n 40 "$bin/replay_$name.log" >&2
    failed="$failed $name"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz_replay: failed:$failed" >&2
  exit 1
fi
echo "fuzz_replay: all $# harnesses replayed their corpus and reproducers"
