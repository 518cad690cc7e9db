#!/usr/bin/env bash
# The build's libraries for a machine that cannot reach a package registry (an
# air-gapped GPU server, say), in two steps:
#
#   scripts/offline_deps.sh fetch DIR
#       on a Debian 12 machine with apt: downloads the .debs the build needs
#       (headers, pkg-config files and libraries of OpenBLAS, libyaml, cJSON,
#       PCRE2, xxHash, zstd and libcurl, with the libraries they load, and
#       pkgconf), no root needed. Copy DIR to the other machine.
#   eval "$(scripts/offline_deps.sh unpack DIR PREFIX)"
#       on that machine (any x86-64 glibc Linux): unpacks them under PREFIX
#       (never over /), keeps only the shared libraries the system lacks
#       (the system's own are used where it has them; the link names point
#       at them), rewrites the .pc files to PREFIX, and prints the exports
#       (PATH, PKG_CONFIG_PATH, LD_LIBRARY_PATH, CT_DEPS_PREFIX) to eval.
#       Then: cmake -S . -B build -DCT_DEPS_PREFIX="$CT_DEPS_PREFIX" ...
#
# Left out: the C library and the compiler's runtime (the machine that builds
# has them), oneDNN (optional; run.gemm falls back to OpenBLAS) and MPI
# (optional; one process per machine without it).
set -euo pipefail

PKGS=(pkgconf libopenblas-openmp-dev libyaml-dev libcjson-dev libpcre2-dev libxxhash-dev
      libzstd-dev libcurl4-openssl-dev)
# never unpacked elsewhere: the C library, its headers and the compiler's runtime
SKIP='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto)$'

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

fetch() {
  local dir=$1
  command -v apt-get >/dev/null && command -v apt-cache >/dev/null ||
    { echo "offline_deps: fetch needs apt-get (Debian 12)" >&2; exit 2; }
  mkdir -p "$dir"
  local all
  all=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
          --no-replaces --no-enhances "${PKGS[@]}" | grep -E '^[a-z0-9]' | sort -u |
        grep -Ev "$SKIP")
  # shellcheck disable=SC2086
  (cd "$dir" && apt-get download -q $all >/dev/null)
  echo "offline_deps: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1), in $dir"
}

# the system loader's cache: "name path" per line
SYSLIBS=""
system_lib() {
  awk -v n="$1" '$1 == n { print $2; exit }' <<<"$SYSLIBS"
}

unpack() {
  local dir=$1 prefix=$2
  ls "$dir"/*.deb >/dev/null 2>&1 || { echo "offline_deps: no .deb files in $dir" >&2; exit 2; }
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  for f in "$dir"/*.deb; do
    dpkg-deb -x "$f" "$prefix" 2>/dev/null && continue
    # no dpkg-deb (or it refused): an .deb is an ar archive holding data.tar.*
    local t ok=0; t=$(mktemp -d)
    (cd "$t" && ar x "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" 2>/dev/null &&
       tar -xf data.tar.* -C "$prefix") && ok=1
    rm -rf "$t"
    if [ $ok = 0 ]; then
      echo "offline_deps: $f is not a readable .deb (cut short in the copy?): fetch it again" \
           "with scripts/offline_deps.sh fetch DIR" >&2
      exit 2
    fi
  done
  local arch=x86_64-linux-gnu lib="$prefix/usr/lib/x86_64-linux-gnu"
  [ -d "$lib" ] || { arch=aarch64-linux-gnu; lib="$prefix/usr/lib/aarch64-linux-gnu"; }
  # Debian's alternatives would have made these links: BLAS and pkgconf
  local blas="$lib/openblas-openmp"
  if [ -e "$blas/libopenblas.so.0" ] && [ ! -e "$lib/libopenblas.so" ]; then
    ln -sf openblas-openmp/libopenblas.so.0 "$lib/libopenblas.so"
  fi
  [ -e "$prefix/usr/bin/pkg-config" ] || ln -sf pkgconf "$prefix/usr/bin/pkg-config"
  # runtime libraries the system has: its own are used (a soname the loader
  # knows drops ours, with the file it links to), and link names that pointed
  # at ours point at the system's
  SYSLIBS=$( (ldconfig -p 2>/dev/null || true) | awk '/=>/ { print $1, $NF }')
  declare -A sys_of=()
  local dropped=0
  for so in "$lib"/lib*.so.* "$blas"/lib*.so.*; do
    [ -e "$so" ] || [ -L "$so" ] || continue
    local name sys; name=$(basename "$so")
    sys=$(system_lib "$name")
    [ -n "$sys" ] && [ "$sys" != "$so" ] || continue
    sys_of[$name]=$sys
    if [ -L "$so" ]; then
      local target; target=$(readlink "$so")
      sys_of[$(basename "$target")]=$sys
      rm -f "$(dirname "$so")/$target"
    fi
    rm -f "$so"
    dropped=$((dropped + 1))
  done
  for link in "$lib"/*.so "$blas"/*.so; do
    [ -L "$link" ] || continue
    local t; t=$(basename "$(readlink "$link")")
    [ -n "${sys_of[$t]:-}" ] && ln -sf "${sys_of[$t]}" "$link"
  done
  local kept; kept=$(find "$lib" "$blas" -maxdepth 1 -name 'lib*.so.*' -type f 2>/dev/null | wc -l)
  # .pc files name /usr: point them at the prefix
  for pc in "$lib"/pkgconfig/*.pc "$prefix"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] || continue
    sed -i -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|=/usr/|=$prefix/usr/|g" "$pc"
  done
  echo "offline_deps: unpacked under $prefix: $kept libraries kept, $dropped the system has" >&2
  echo "export CT_DEPS_PREFIX='$prefix'"
  echo "export PATH='$prefix/usr/bin':\"\$PATH\""
  echo "export PKG_CONFIG_PATH='$lib/pkgconfig:$prefix/usr/share/pkgconfig'\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
  echo "export LD_LIBRARY_PATH='$lib:$blas'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
}

case "${1:-}" in
  fetch) [ $# -eq 2 ] || usage; fetch "$2" ;;
  unpack) [ $# -eq 3 ] || usage; unpack "$2" "$3" ;;
  *) usage ;;
esac
