#!/usr/bin/env bash
# Cross-builds the kernel unit tests for aarch64 and runs them under
# qemu-user, so that the NEON variant (src/kernels/kern_neon*.c) is checked
# against the reference by every `make test` on an x86 machine.
#
# The tests need only src/{base,tensor,kernels} (no pcre2/xxhash/jansson),
# linked statically, so no aarch64 libraries are needed at run time. Two
# builds, which differ only in the NEON files (kern_neon*.c):
#   neon          -march=armv8-a: integer dots by widening multiplies, run
#                 on qemu's Cortex-A53 (no dot-product instructions);
#   neon-dotprod  those with -march=armv8.2-a+dotprod (SDOT), run on
#                 qemu's "max" CPU.
# Objects are rebuilt only when a source or header they use changed.
#
# Output: the tests' own PASS/FAIL/SKIP lines, each name prefixed with the
# build. Without the cross compiler or qemu it prints one SKIP line and exits
# 0. Env: BUILD, CROSS_ARM64, QEMU_ARM64, ARM64_TESTS (default test_kernels
# test_kernels_q3kp test_kernels_q4kp, ~12 s each a build under qemu: the
# portable packed Q3_K and Q4_K GEMMs and to_kpack, which aarch64 runs only
# there; test_attention runs too but
# only exercises the reference on aarch64 and takes ~40 s of CPU under qemu).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CC=${CROSS_ARM64:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_ARM64:-qemu-aarch64}
read -r -a tests <<<"${ARM64_TESTS:-test_kernels test_kernels_q3kp test_kernels_q4kp}"
for tool in "$CC" "$QEMU"; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP arm64: $tool not found (apt-get install gcc-aarch64-linux-gnu qemu-user)"
    exit 0
  fi
done

out=$BUILD/arm64
flags=(-std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Isrc -Iinclude -Itests)
mkdir -p "$out/obj" "$out/obj-dotprod"

# Compiles $1 with the remaining flags into $2 unless $2 is newer than the
# source and every header of src/ and tests/ (coarse, but always safe).
newest_header=$(ls -t src/*/*.h tests/*.h | head -n 1)
compile() {
  local f=$1 o=$2; shift 2
  if [ "$o" -nt "$f" ] && [ "$o" -nt "$newest_header" ] && [ "$o" -nt "$0" ]; then return 0; fi
  "$CC" "${flags[@]}" "$@" -c "$f" -o "$o"
}
export -f compile; export CC newest_header
src=(src/base/*.c src/tensor/*.c src/kernels/*.c)
neon_src=(src/kernels/kern_neon*.c)
objs=()
obj_of() { local f=${1%.c}; echo "$out/obj/${f//\//_}.o"; } # src/a/b.c -> obj/src_a_b.o
dotprod_of() { local f=${1##*/}; echo "$out/obj-dotprod/${f%.c}.o"; }
for f in "${src[@]}"; do objs+=("$(obj_of "$f")"); done
neon_dotprod=()
for f in "${neon_src[@]}"; do neon_dotprod+=("$(dotprod_of "$f")"); done
# two compilers at a time (the machine's cores); xargs fails if any does
if ! for f in "${src[@]}"; do echo "$f $(obj_of "$f") -march=armv8-a"; done |
     { cat; for f in "${neon_src[@]}"; do echo "$f $(dotprod_of "$f") -march=armv8.2-a+dotprod"; done; } |
     xargs -P 2 -L 1 bash -c 'flags=('"${flags[*]}"'); compile "$@"' "$0"; then
  echo "FAIL arm64/build: cross compilation failed"
  exit 1
fi

rc=0
# name : qemu -cpu : the NEON objects (space-separated)
plain_neon=()
for f in "${neon_src[@]}"; do plain_neon+=("$(obj_of "$f")"); done
for cfg in "neon:cortex-a53:${plain_neon[*]}" "neon-dotprod:max:${neon_dotprod[*]}"; do
  IFS=: read -r name cpu kn_list <<<"$cfg"
  read -r -a kn <<<"$kn_list"
  lib=()
  for o in "${objs[@]}"; do [[ $o == */src_kernels_kern_neon*.o ]] || lib+=("$o"); done
  for t in "${tests[@]}"; do
    bin=$out/$name-$t
    if ! { [ "$bin" -nt "tests/$t.c" ] && [ "$bin" -nt "$newest_header" ] &&
           [ -z "$(find "${lib[@]}" "${kn[@]}" -newer "$bin")" ]; }; then
      # dlopen (test_kernels' llama.cpp oracle, x86-only, skipped here)
      # warns when linked statically: filtered
      if ! "$CC" "${flags[@]}" -static -o "$bin" "tests/$t.c" "${lib[@]}" "${kn[@]}" -lm -lpthread \
           2> >(grep -Ev "statically linked applications|in function .ggml_oracle" >&2); then
        echo "FAIL $name/$t: link failed"; rc=1; continue
      fi
    fi
    res=$("$QEMU" -cpu "$cpu" "$bin" 2>&1); trc=$?
    printf '%s\n' "$res" | sed -E "s#^(PASS|FAIL|SKIP|INFO) #\1 $name/$t: #"
    if [ "$trc" -ne 0 ]; then
      rc=1 # a crash without a FAIL line still counts as one failure (as tests/run.sh)
      grep -q '^FAIL ' <<<"$res" || echo "FAIL $name/$t: exited $trc under $QEMU -cpu $cpu"
    fi
  done
done
exit $rc
