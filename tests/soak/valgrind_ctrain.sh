#!/bin/sh
# ctrain under valgrind's memcheck, for the CLI tests: give this script to a
# tests/cli/test_*.py as its ctrain path (`make valgrind` does, through
# tests/soak/valgrind_run.py).
#
#   CT_VALGRIND_CTRAIN  the ctrain to run (default: build-valgrind/ctrain in
#                       the repository, built with -DCT_NATIVE=OFF: valgrind
#                       does not decode every AVX-512 instruction)
#   CT_VALGRIND_LOGS    a directory for one log per process, vg.<pid>.log
#                       (default: /tmp/ct-valgrind)
#
# Memory errors (invalid reads and writes, uses of uninitialised values, bad
# frees) and definite leaks make the program exit 1 (--error-exitcode=1) and
# are written to the log; the program's own stdout and stderr are left as
# they are, so the tests still read them. The logs are the verdict:
# valgrind_run.py reads them all at the end.
#
# Two concessions to speed, neither of which changes what the program does
# with its memory:
#  - `ctrain train` (not --print-config) gets alerts.gemm_peak_gflops=50
#    appended unless the command sets it: the start-up measurement of the
#    GEMM peak multiplies 1024x1024 matrices three times (6 GFLOP), minutes
#    under valgrind for every run;
#  - OpenMP threads wait passively (valgrind runs one thread at a time, so a
#    spinning thread holds up the others).
here=$(cd "$(dirname "$0")" && pwd)
ctrain=${CT_VALGRIND_CTRAIN:-$here/../../build-valgrind/ctrain}
logs=${CT_VALGRIND_LOGS:-/tmp/ct-valgrind}
mkdir -p "$logs" || exit 125
: "${OMP_WAIT_POLICY:=PASSIVE}" "${GOMP_SPINCOUNT:=0}"
export OMP_WAIT_POLICY GOMP_SPINCOUNT

if [ "$1" = train ]; then
    peak=yes
    for a in "$@"; do
        case $a in
            --print-config | alerts.gemm_peak_gflops=*) peak=no ;;
        esac
    done
    if [ $peak = yes ]; then set -- "$@" alerts.gemm_peak_gflops=50; fi
fi
exec valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --num-callers=30 --log-file="$logs/vg.%p.log" \
    "$ctrain" "$@"
