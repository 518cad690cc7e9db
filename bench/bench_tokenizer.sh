#!/usr/bin/env bash
# Tokenizer throughput, ctrain against the gpt-3-encoder reference, one thread
# each, on the Brown corpus (data/brown/text, ~6 MB, 500 documents), one
# encode call per document. The runs alternate (ours, reference, ours on the
# whole corpus in one call, then again) so that both see the same machine
# state; each run is a fresh process with a cold word cache. Prints a table of
# medians and fails when the two disagree on the token count.
# usage: bench/bench_tokenizer.sh [BUILD_DIR] [REPEATS]      (make bench-tokenizer)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
repeats="${2:-5}"
bin="$build/bench/bench_tokenizer"
tok="$root/data/gpt2-tokenizer"
corpus="$root/data/brown/text"

die() { echo "bench_tokenizer: error: $1" >&2; echo "  hint: $2" >&2; exit 2; }
[ -x "$bin" ] || die "$bin is missing" "build it with \`make\` (CT_BENCH=ON, the default)"
command -v node >/dev/null 2>&1 || die "node is not installed" "run scripts/bootstrap.sh"
[ -f "$root/deps/npm/node_modules/gpt-3-encoder/Encoder.js" ] || die "the reference is missing" "run scripts/fetch_data.sh"
[ -d "$corpus" ] || die "$corpus is missing" "run scripts/fetch_data.sh"

field() { sed -n "s/^RESULT .*$1=\([^ ]*\).*/\1/p"; }
ours=() ; ref=() ; whole=()
ours_tok="" ; ref_tok="" ; bytes=""
for i in $(seq "$repeats"); do
  out="$("$bin" --tokenizer "$tok" --corpus "$corpus" --mode docs --repeats 1)"
  ours+=("$(field median_mbps <<<"$out")"); ours_tok="$(field tokens <<<"$out")"; bytes="$(field bytes <<<"$out")"
  out="$(node "$root/bench/gpt3_encode_bench.js" "$corpus" 1)"
  ref+=("$(field median_mbps <<<"$out")"); ref_tok="$(field tokens <<<"$out")"
  out="$("$bin" --tokenizer "$tok" --corpus "$corpus" --mode whole --repeats 1)"
  whole+=("$(field median_mbps <<<"$out")")
  echo "run $i/$repeats: ours ${ours[-1]} MB/s, reference ${ref[-1]} MB/s, ours (one call) ${whole[-1]} MB/s" >&2
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
m_ours="$(median "${ours[@]}")"; m_ref="$(median "${ref[@]}")"; m_whole="$(median "${whole[@]}")"
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)"
echo
echo "GPT-2 tokenizer, 1 thread, Brown corpus: $bytes bytes, 500 documents; median of $repeats runs"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores; node $(node --version)"
printf '%-44s %10s %12s\n' "encoder" "MB/s" "tokens"
printf '%-44s %10.2f %12s\n' "ctrain (one call per document)" "$m_ours" "$ours_tok"
printf '%-44s %10.2f %12s\n' "gpt-3-encoder 1.1.4 (one call per document)" "$m_ref" "$ref_tok"
printf '%-44s %10.2f %12s\n' "ctrain (one call, whole corpus)" "$m_whole" ""
awk -v a="$m_ours" -v b="$m_ref" 'BEGIN { printf "ratio ctrain / reference: %.1fx\n", a / b }'
if [ "$ours_tok" != "$ref_tok" ]; then
  echo "bench_tokenizer: error: token counts differ: ctrain $ours_tok, reference $ref_tok" >&2
  exit 1
fi
echo "token counts agree: $ours_tok"
