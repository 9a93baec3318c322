#!/usr/bin/env bash
# Sanitizer builds and runs in one command (docs/RELIABILITY.md, "Sanitizers"). clang is required.
#
#   tools/sanitize.sh asan [ctest arguments...]
#       ASan + UBSan (every UB check fatal) into build-asan/, with the libFuzzer harnesses
#       (PSK_FUZZ=ON), then the whole suite (fuzz smoke tests included) but the consume tests.
#   tools/sanitize.sh tsan [ctest arguments...]
#       TSan into build-tsan/, then ctest on threads_test (the threading rules of the header) and
#       context_lifecycle_test's 8 threads, with the validation layer and without it.
#
# ctest arguments replace the default selection, e.g. `tools/sanitize.sh asan -R Decode` (the
# asan run keeps synchronization validation off, see below, so the Validation.SynchronizationHazard*
# control tests fail in a selection of their own unless PSK_VALIDATION_SYNC=1 is given).
# Environment: PSK_SANITIZE_JOBS (default 2), PSK_SANITIZE_BUILD (the build folder),
# PSK_REQUIRE_VALIDATION (default 1: the Vulkan validation layers stay on; 0 runs without them).
# The suppressions in tools/sanitizers/ cover frames of Mesa (lavapipe), LLVM, the Vulkan loader
# and the validation layer only, never polysketch's; each is explained there.
set -euo pipefail

mode=${1:-}
[[ $# -gt 0 ]] && shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
supp="$root/tools/sanitizers"
jobs=${PSK_SANITIZE_JOBS:-2}
export PSK_REQUIRE_VALIDATION=${PSK_REQUIRE_VALIDATION:-1}

# The ASan run: the whole suite (4 min 43 s on two cores with lavapipe) except the consume tests,
# which build other projects against the library without the sanitizer runtimes, and the
# synchronization-validation control tests, which run on their own (below).
asan_exclude='^consume_'
sync_controls='^Validation\.SynchronizationHazard'

need_clang() {
    command -v clang++ >/dev/null || { echo "sanitize.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
}

case "$mode" in
asan)
    need_clang
    build=${PSK_SANITIZE_BUILD:-$root/build-asan}
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DPSK_FUZZ=ON -DPSK_FUZZ_SANITIZERS=address,undefined \
        -DPSK_INSTALL=OFF -DPSK_BUILD_SAMPLES=OFF >/dev/null
    cmake --build "$build" -j"$jobs"
    # The validation layer (1.3.239) leaks about 3 KB per command buffer under synchronization
    # validation, in a module the loader has unloaded (dlclose) by the time LeakSanitizer looks at
    # exit, so no suppression can name it: synchronization validation stays off in this run (the
    # normal validated suite covers it; tools/sanitizers/lsan.supp explains).
    export PSK_VALIDATION_SYNC=${PSK_VALIDATION_SYNC:-0}
    # lavapipe kept loaded for the whole process: a test that destroys its last context (the
    # app-device tests, pipeline_statistics_test) lets the loader unload the driver, whose
    # unfreed per-load allocations (128 bytes each) then have no module left to name them, so the
    # lsan.supp entry for the driver cannot match ("<unknown module>"); loaded from the start,
    # its frames are named and suppressed as in every other test.
    lvp=$(sed -n 's/.*"library_path": *"\([^"]*libvulkan_lvp[^"]*\)".*/\1/p' /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1)
    [[ -n "$lvp" && -f "$lvp" ]] && export LD_PRELOAD="$lvp${LD_PRELOAD:+:$LD_PRELOAD}"
    export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1:suppressions=$supp/asan.supp"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    cd "$build"
    if [[ $# -gt 0 ]]; then
        ctest -j"$jobs" --timeout 1800 --output-on-failure "$@"
    else
        status=0
        ctest -j"$jobs" --timeout 1800 --output-on-failure -LE '^cases$' -E "$asan_exclude|$sync_controls" || status=1
        # The synchronization-validation control tests need it on: with it, and without the
        # leak check (the layer's leak above); ASan and UBSan still check every access.
        PSK_VALIDATION_SYNC=1 ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" \
            ctest -j"$jobs" --timeout 1800 --output-on-failure -R "$sync_controls" || status=1
        exit $status
    fi
    ;;
tsan)
    need_clang
    build=${PSK_SANITIZE_BUILD:-$root/build-tsan}
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
        -DPSK_INSTALL=OFF -DPSK_BUILD_SAMPLES=OFF >/dev/null
    # Only the two test programs are built (the tests' configuration names the psk tool too).
    cmake --build "$build" -j"$jobs" --target threads_test context_lifecycle_test
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$supp/tsan.supp"
    cd "$build"
    if [[ $# -gt 0 ]]; then
        ctest -j1 --timeout 1800 --output-on-failure "$@"
    else
        # Twice: with the validation layer, and without it (its internal locks order the threads'
        # calls and could hide a race of polysketch's own).
        threads='^(SharedContextThreads\.|SeparateContextThreads\.|ContextLifecycle\.EightThreads)'
        status=0
        ctest -j1 --timeout 1800 --output-on-failure -R "$threads" || status=1
        PSK_REQUIRE_VALIDATION=0 VK_LOADER_LAYERS_DISABLE='~explicit~' \
            ctest -j1 --timeout 1800 --output-on-failure -R "$threads" || status=1
        exit $status
    fi
    ;;
*)
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
