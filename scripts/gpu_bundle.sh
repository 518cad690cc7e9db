#!/usr/bin/env bash
# A build made here that runs on a GPU machine that cannot install packages:
# ctrain and the GPU kernel tests, built for any x86-64 CPU (no -march=native:
# the CPU kernels pick their ISA at run time as always) with the CUDA backend
# for sm_80 and sm_90a plus compute_80 PTX (any later GPU compiles that) and
# -lineinfo (compute-sanitizer and ncu name source lines), and every shared
# library they load that is not the C library's own, packed into one ignored
# folder that a GPU command carries:
#
#   scripts/gpu_bundle.sh [OUTDIR]     build and pack (OUTDIR: .gpu-bundle)
#   scripts/gpu_bundle.sh --check [OUTDIR]
#       unpack the bundle into a fresh directory and run it there: `ctrain
#       hw` and a two-step training run from an empty working directory, with
#       only the bundle's libraries on the path; with root (or user
#       namespaces) also with the system's library directory hidden, so that
#       only the C library's own files and the GCC runtimes are there
#
# OUTDIR then holds ctrain-gpu.tar.xz (bin/ wrappers that put the bundle's
# lib/ on the library path of ctrain alone, libexec/ the binaries, lib/ the
# libraries, MANIFEST.txt) and MANIFEST.txt beside it: the commit, a hash of
# the sources it was built from (scripts/gpu_check.sh compares it with the
# tree it runs in), the compiler and architectures, the newest glibc symbol
# version any file needs (the GPU machine's glibc must be at least that; 2.34
# here: Ubuntu 22.04, Debian 12, RHEL 9 and later), and
# the files with their sizes. The GPU machine's own CUDA driver, cuBLAS and cuBLASLt
# (/usr/local/cuda, loaded at run time) are used; CUDA's runtime is static.
# The whole folder stays under 64 MiB (what a GPU command may carry in all).
# Environment: CT_BUNDLE_BUILD (the build folder, build-bundle), CT_BUNDLE_JOBS.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHECK=0
if [ "${1:-}" = "--check" ]; then CHECK=1; shift; fi
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] || [ $# -gt 1 ]; then
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
OUTDIR=${1:-$ROOT/.gpu-bundle}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
TARBALL=$OUTDIR/ctrain-gpu.tar.xz
LIMIT_MIB=64
# the C library's own files (in the version the MANIFEST's glibc line asks
# for) and the GCC runtimes, which every Linux with a Python has: the
# binaries ask libstdc++ for CXXABI_1.3 only, and Debian 12's own libstdc++
# would need glibc 2.36, a newer one than the binaries do (2.34). Everything
# else they load travels.
GLIBC_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
BINS=(ctrain test_kernels test_kernels_bf16 test_kernels_f16 test_kernels_llama)

# a hash of the sources a build depends on (scripts/gpu_check.sh computes the same)
src_hash() {
  (cd "$ROOT" && find src include cli tests/kernels tests/gpu CMakeLists.txt tests/CMakeLists.txt \
     -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \
     -o -name CMakeLists.txt \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
     sha256sum | cut -c1-16)
}

# the newest GLIBC_x.y symbol version the ELF files given need
glibc_needed() {
  for f in "$@"; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9][0-9.]*' |
    sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -1
}

check() {
  [ -f "$TARBALL" ] || { echo "gpu_bundle: no $TARBALL: build it first (scripts/gpu_bundle.sh)" >&2; exit 2; }
  CHECK_DIR=$(mktemp -d /tmp/ctrain-bundle-check.XXXXXX)
  trap 'rm -rf "$CHECK_DIR"' EXIT
  local t=$CHECK_DIR
  tar -xJf "$TARBALL" -C "$t"
  mkdir "$t/work"
  cd "$t/work"
  local b=$t/bin/ctrain fails=0
  echo "gpu_bundle: unpacked into $t; MANIFEST says:"
  sed -n '1,12p' "$t/MANIFEST.txt" | sed 's/^/    /'
  # 1. every library resolves into the bundle or to the C library's own
  local bad
  bad=$(for f in "$t"/libexec/* "$t"/lib/*; do
          LD_LIBRARY_PATH=$t/lib ldd "$f" 2>&1 | awk '{print $1, $3}'; done |
        while read -r name path; do
          case "$path" in "$t"/lib/*|"") continue ;; esac
          [[ "$name" =~ $GLIBC_LIBS ]] && continue
          [[ "$name" == /* ]] && continue # the loader itself, by path
          echo "$name => $path"
        done | sort -u)
  if [ -n "$bad" ]; then
    echo "gpu_bundle: FAIL: libraries resolved outside the bundle:"; echo "$bad" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "gpu_bundle: ok: every library of the bundle's binaries resolves into its lib/ or is the C library's"
  fi
  # 2. it runs from an empty directory with only its own libraries
  run() { # label, command...
    local label=$1; shift
    if "$@" >"$t/out.log" 2>&1; then echo "gpu_bundle: ok: $label"
    else echo "gpu_bundle: FAIL: $label:"; tail -5 "$t/out.log" | sed 's/^/    /'; fails=$((fails + 1)); fi
  }
  run "ctrain hw --no-bench" "$b" hw --no-bench
  "$b" synth --out "$t/work/t.bin" --tokens 20000 --vocab 64 >/dev/null 2>&1
  run "a two-step training run (cpu)" "$b" train model.preset=gpt2-tiny model.vocab_size=64 \
      data.train="$t/work/t.bin" train.batch_size=2 train.seq_len=16 train.steps=2 run.dir="$t/work/run"
  run "run.device=cuda refused clearly without a GPU, or runs with one" \
      sh -c "'$b' train model.preset=gpt2-tiny model.vocab_size=64 data.train='$t/work/t.bin' \
             train.batch_size=2 train.seq_len=16 train.steps=1 run.device=cuda run.dir='$t/work/cu' \
             2>&1 | tee /dev/stderr | grep -Eq 'no CUDA device|done; model saved'"
  # 3. the same with the system's library directory hidden (only glibc's own left)
  if [ "$(id -u)" = 0 ] || unshare -rm true 2>/dev/null; then
    local libdir; libdir=$(dirname "$(readlink -f "$(ldd "$t/libexec/ctrain" | awk '/libc\.so\.6/ {print $3}')")")
    mkdir "$t/glibc"
    for f in "$libdir"/*; do
      n=$(basename "$f")
      [[ "$n" =~ $GLIBC_LIBS ]] && cp -aL "$f" "$t/glibc/$n"
    done
    local u=(unshare -m); [ "$(id -u)" = 0 ] || u=(unshare -rm)
    run "hidden system libraries ($libdir holds only: $(ls "$t/glibc" | tr '\n' ' '))" \
      "${u[@]}" sh -c "mount --bind /dev/null /etc/ld.so.cache && mount --bind '$t/glibc' '$libdir' &&
                       '$b' hw --no-bench >/dev/null &&
                       '$b' train model.preset=gpt2-tiny model.vocab_size=64 data.train='$t/work/t.bin' \
                         train.batch_size=2 train.seq_len=16 train.steps=2 run.dir='$t/work/run2' &&
                       LD_LIBRARY_PATH='$t/lib' '$t/libexec/test_kernels' >/dev/null"
  else
    echo "gpu_bundle: note: no root and no user namespaces: the run with hidden system libraries is skipped"
  fi
  [ $fails = 0 ] && echo "gpu_bundle: the bundle runs here ($(du -h "$TARBALL" | cut -f1))" || exit 1
}

if [ $CHECK = 1 ]; then check; exit; fi

command -v objdump >/dev/null || { echo "gpu_bundle: needs objdump (binutils)" >&2; exit 2; }
cd "$ROOT"
BUILD=${CT_BUNDLE_BUILD:-build-bundle}
JOBS=${CT_BUNDLE_JOBS:-$(nproc)}
echo "gpu_bundle: configuring $BUILD (no -march=native; CUDA sm_80, sm_90a, compute_80 PTX; -lineinfo)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCT_NATIVE=OFF -DCT_MPI=OFF -DCT_ONEDNN=OFF \
      -DCT_BENCH=OFF -DCT_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=80-real;90a-real;80-virtual" \
      >"$OUTDIR/build.log" 2>&1 || { tail -20 "$OUTDIR/build.log"; exit 1; }
grep -q 'CUDA      ✓' "$OUTDIR/build.log" ||
  { echo "gpu_bundle: this machine's build has no CUDA backend (nvcc and cuBLAS's headers needed)" >&2; exit 1; }
if grep -rqs -- '-march=native' "$BUILD"/CMakeFiles/ctrain_lib.dir/flags.make; then
  echo "gpu_bundle: -march=native is still in the flags of $BUILD: remove $BUILD and run again" >&2
  exit 1
fi
echo "gpu_bundle: building (${JOBS} jobs)"
cmake --build "$BUILD" -j "$JOBS" --target "${BINS[@]}" >>"$OUTDIR/build.log" 2>&1 ||
  { tail -30 "$OUTDIR/build.log"; exit 1; }
warnings=$(grep -c 'warning' "$OUTDIR/build.log" || true)
# the CPU code is baseline x86-64: vector registers wider than SSE's only in
# the functions that pick their ISA at run time (target attributes)
wide=$(objdump -d --no-show-raw-insn "$BUILD/ctrain" |
       awk '/^[0-9a-f]+ <.*>:$/ {fn = $2} /%[yz]mm/ {n[fn]++} END {for (f in n) print f}' |
       grep -v -x -e '<bf16_loop>:' || true)
if [ -n "$wide" ]; then
  echo "gpu_bundle: AVX registers outside the run-time dispatched functions: $(echo $wide | cut -c1-200)" >&2
  echo "  (was $BUILD configured with CT_NATIVE=ON? remove it and run again)" >&2
  exit 1
fi

STAGE=$(mktemp -d /tmp/ctrain-bundle.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/libexec" "$STAGE/lib"
for b in "${BINS[@]}"; do
  src=$BUILD/$b; [ -x "$src" ] || src=$BUILD/tests/$b
  [ -x "$src" ] || { echo "gpu_bundle: $b was not built" >&2; exit 1; }
  cp "$src" "$STAGE/libexec/$b"
  # the wrapper puts the bundle's libraries on ctrain's path only (a Python
  # that runs it keeps its own libraries)
  cat >"$STAGE/bin/$b" <<'EOF'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")/..
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/libexec/$(basename "$0")" "$@"
EOF
  chmod +x "$STAGE/bin/$b"
done
# every library the binaries load, but glibc's own, by soname
ldd "$STAGE"/libexec/* | awk '/=>/ && $3 ~ /^\// {print $1, $3}' | sort -u |
while read -r name path; do
  [[ "$name" =~ $GLIBC_LIBS ]] && continue
  cp -L "$path" "$STAGE/lib/$name"
done
nlibs=$(ls "$STAGE/lib" | wc -l)
glibc=$(glibc_needed "$STAGE"/libexec/* "$STAGE"/lib/*)

{
  echo "ctrain GPU bundle"
  echo "commit:      $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "source hash: $(src_hash)"
  echo "built:       $(date -u +%FT%TZ) on $(uname -m), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "compiler:    $(cc --version | head -1); $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -2 | head -1)"
  echo "flags:       Release, CT_NATIVE=OFF (runtime ISA dispatch only), CT_MPI=OFF, CT_ONEDNN=OFF, -lineinfo"
  echo "cuda:        sm_80, sm_90a, compute_80 PTX; runtime static; cuBLAS, cuBLASLt and the driver: the GPU machine's"
  echo "glibc:       needs GLIBC_$glibc or newer (ldd --version on the GPU machine), and the system's libstdc++ (CXXABI_1.3) and libgcc_s"
  echo "warnings:    $warnings in the build"
  echo "files:"
  (cd "$STAGE" && find . -type f -printf '%10s  %P\n' | sort -k2)
} >"$STAGE/MANIFEST.txt"
cp "$STAGE/MANIFEST.txt" "$OUTDIR/MANIFEST.txt"
rm -f "$TARBALL"
(cd "$STAGE" && XZ_OPT=-9 tar -cJf "$TARBALL" .)
rm -f "$OUTDIR/build.log.gz"
gzip -f "$OUTDIR/build.log"
mib=$(du -sm "$OUTDIR" | cut -f1)
echo "gpu_bundle: $TARBALL: $(du -h "$TARBALL" | cut -f1) ($(du -sh "$STAGE" | cut -f1) unpacked), ${#BINS[@]} programs, $nlibs libraries, needs GLIBC_$glibc"
deps=0
[ -d "$ROOT/.offline-deps" ] && deps=$(du -sm "$ROOT/.offline-deps" | cut -f1)
if [ "$mib" -ge "$LIMIT_MIB" ]; then
  echo "gpu_bundle: FAIL: $OUTDIR is $mib MiB, over the $LIMIT_MIB MiB a GPU command may carry" >&2
  exit 1
fi
echo "gpu_bundle: $OUTDIR is $mib MiB$([ "$deps" -gt 0 ] && echo "; with .offline-deps ($deps MiB) $((mib + deps)) MiB of the $LIMIT_MIB MiB a command may carry")"
echo "gpu_bundle: try it here: scripts/gpu_bundle.sh --check"
