#!/usr/bin/env bash
# Builds tests/consume/consume.c against polysketch the ways an application would, and runs it.
#
#   run_consume.sh SOURCE_DIR SCRATCH_DIR [--build-dir BUILD_DIR] [MODE...]
#
# MODE (default: all three, in this order):
#   find_package  cmake --install into SCRATCH_DIR/find_package/prefix, then a consumer project
#                 with find_package(polysketch) links polysketch::polysketch and ::polysketch_static
#   subdirectory  a consumer project that add_subdirectory()s SOURCE_DIR (tests, tools, samples off
#                 by default there); builds the library again, incrementally on later runs
#   pkg-config    cmake --install into SCRATCH_DIR/pkg-config/prefix, then
#                 cc $(pkg-config --cflags --libs polysketch) (shared), and the static archive
#                 with pkg-config --static --libs
# With --build-dir the install steps copy an existing build of SOURCE_DIR (fast); without it the
# library is configured and built once in SCRATCH_DIR/library (tests and tools off) first.
# CC / CXX / CMAKE_GENERATOR from the environment are honoured. Exits non-zero on the first failure.
set -euo pipefail

usage() {
  echo "usage: $0 SOURCE_DIR SCRATCH_DIR [--build-dir BUILD_DIR] [find_package|subdirectory|pkg-config]..." >&2
  exit 2
}
[ $# -ge 2 ] || usage
source_dir="$(cd "$1" && pwd)"
mkdir -p "$2"
scratch="$(cd "$2" && pwd)"
shift 2
build_dir=""
modes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || usage; build_dir="$(cd "$2" && pwd)"; shift 2 ;;
    find_package|subdirectory|pkg-config) modes+=("$1"); shift ;;
    *) usage ;;
  esac
done
[ ${#modes[@]} -gt 0 ] || modes=(find_package subdirectory pkg-config)

here="$source_dir/tests/consume"
jobs="$(nproc 2>/dev/null || echo 2)"
compilers=()
[ -n "${CC:-}" ] && compilers+=("-DCMAKE_C_COMPILER=$CC")
[ -n "${CXX:-}" ] && compilers+=("-DCMAKE_CXX_COMPILER=$CXX")

step() { echo "== consume: $*"; }

# Installs polysketch into $1 (a fresh directory), from the given build or from a scratch build.
install_into() {
  local prefix="$1"
  rm -rf "$prefix"
  if [ -z "$build_dir" ]; then
    build_dir="$scratch/library"
    step "building the library in $build_dir"
    cmake -S "$source_dir" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DPSK_BUILD_TESTS=OFF \
      -DPSK_BUILD_TOOLS=OFF -DPSK_BUILD_SAMPLES=OFF -DPSK_INSTALL=ON "${compilers[@]}" >/dev/null
    cmake --build "$build_dir" -j "$jobs" >/dev/null
  fi
  step "cmake --install $build_dir --prefix $prefix"
  cmake --install "$build_dir" --prefix "$prefix" >/dev/null
  # What an application relies on: the header, the versioned shared library behind its SONAME
  # link, the static archive, the CMake package and the pkg-config file.
  local lib
  lib="$(find "$prefix" -name libpolysketch.so.0 -print -quit)"
  [ -n "$lib" ] || { echo "consume: no libpolysketch.so.0 was installed under $prefix" >&2; return 1; }
  lib="$(dirname "$lib")"
  [ -f "$prefix/include/polysketch/polysketch.h" ] \
    || { echo "consume: $prefix/include/polysketch/polysketch.h was not installed" >&2; return 1; }
  for f in libpolysketch.so libpolysketch.so.0 libpolysketch.a cmake/polysketch/polysketchConfig.cmake \
           cmake/polysketch/polysketchConfigVersion.cmake cmake/polysketch/polysketchTargets.cmake \
           pkgconfig/polysketch.pc; do
    [ -e "$lib/$f" ] || { echo "consume: $lib/$f was not installed" >&2; return 1; }
  done
  if command -v readelf >/dev/null; then
    grep -q 'SONAME.*\[libpolysketch\.so\.0\]' <<<"$(readelf -d "$lib/libpolysketch.so.0")" \
      || { echo "consume: libpolysketch.so.0 has no SONAME libpolysketch.so.0" >&2; return 1; }
  fi
  installed_libdir="$lib"
}

run() {
  step "running $*"
  "$@"
}

for mode in "${modes[@]}"; do
  work="$scratch/$mode"
  mkdir -p "$work"
  case "$mode" in
    find_package)
      install_into "$work/prefix"
      rm -rf "$work/build"
      step "find_package(polysketch) with CMAKE_PREFIX_PATH=$work/prefix"
      cmake -S "$here" -B "$work/build" -DPSK_CONSUME_MODE=find_package -DCMAKE_PREFIX_PATH="$work/prefix" \
        -DCMAKE_BUILD_TYPE=Release "${compilers[@]}" >/dev/null
      cmake --build "$work/build" -j "$jobs" >/dev/null
      # The shared build must load the installed library (through CMake's RPATH), not another one.
      # ldd's output is captured first: `ldd | grep -q` under pipefail fails at random when grep
      # exits on its first match while ldd is still writing (SIGPIPE).
      if command -v ldd >/dev/null; then
        linked="$(ldd "$work/build/consume_shared")"
        grep -q "$work/prefix/.*libpolysketch.so.0" <<<"$linked" \
          || { echo "consume: consume_shared does not load the installed libpolysketch.so.0:" >&2; echo "$linked" >&2; exit 1; }
      fi
      run "$work/build/consume_shared"
      run "$work/build/consume_static"
      ;;
    subdirectory)
      # Kept between runs: a later run rebuilds only what changed.
      step "add_subdirectory($source_dir)"
      cmake -S "$here" -B "$work/build" -DPSK_CONSUME_MODE=subdirectory -DPSK_SOURCE_DIR="$source_dir" \
        -DCMAKE_BUILD_TYPE=Release "${compilers[@]}" >/dev/null
      cmake --build "$work/build" -j "$jobs" >/dev/null
      run "$work/build/consume_shared"
      run "$work/build/consume_static"
      ;;
    pkg-config)
      command -v pkg-config >/dev/null || { echo "consume: pkg-config is not installed" >&2; exit 1; }
      install_into "$work/prefix"
      export PKG_CONFIG_PATH="$installed_libdir/pkgconfig"
      version="$(pkg-config --modversion polysketch)"
      step "pkg-config finds polysketch $version"
      cc="${CC:-cc}"
      flags=(-std=c99 -Wall -Wextra -pedantic -Werror)
      # shellcheck disable=SC2046  # pkg-config output is meant to be split into words
      "$cc" "${flags[@]}" "$here/consume.c" -o "$work/consume_shared" $(pkg-config --cflags --libs polysketch) -lm
      # Static: the archive by file name, then what Libs.private says it needs (C++ runtime, dl).
      static_libs="$(pkg-config --static --libs polysketch)"
      static_libs="${static_libs/-lpolysketch/$installed_libdir/libpolysketch.a}"
      # shellcheck disable=SC2046,SC2086
      "$cc" "${flags[@]}" "$here/consume.c" -o "$work/consume_static" $(pkg-config --cflags polysketch) \
        $static_libs -lm
      if command -v ldd >/dev/null && grep -q libpolysketch <<<"$(ldd "$work/consume_static")"; then
        echo "consume: consume_static links libpolysketch dynamically" >&2
        exit 1
      fi
      LD_LIBRARY_PATH="$installed_libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run "$work/consume_shared"
      run "$work/consume_static"
      ;;
  esac
done
echo "consume: all of ${modes[*]} passed"
