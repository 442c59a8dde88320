#!/usr/bin/env bash
# Runs the kernel tests with the AVX-512 variant on SIMDe's emulation, so
# that a machine without AVX-512 (CI may be one) still checks every AVX-512
# kernel against the reference, and a machine with it checks that the
# AVX-512 sources stay within what the emulation has (avx512_intrin.h).
#
# Each src/kernels/*avx512*.c is compiled with -DPL_AVX512_EMU (SIMDe with
# native names; kern_cpu_avx512() then reports every feature) and linked
# before the normal library, whose own AVX-512 objects are then not pulled
# in. Correctness only: the emulation is slow, and its float operations are
# SIMDe's (e.g. vdpbf16ps), within the tests' tolerances of the hardware's.
#
# Output: the tests' own PASS/FAIL/SKIP lines, each name prefixed with
# "avx512-emu/". Without SIMDe's headers (apt-get install libsimde-dev) it
# prints one SKIP line and exits 0. Env: BUILD, AVX512_EMU_TESTS (default
# test_kernels test_kernels_elem test_kernels_iq4p test_kernels_q3kp test_kernels_q4kp test_attention).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CC=${CC:-cc}
read -r -a tests <<<"${AVX512_EMU_TESTS:-test_kernels test_kernels_elem test_kernels_iq4p test_kernels_q3kp test_kernels_q4kp test_attention}"
if [ "$(uname -m)" != x86_64 ]; then echo "SKIP avx512-emu: x86-64 only"; exit 0; fi
if [ ! -f /usr/include/simde/x86/avx512.h ]; then
  echo "SKIP avx512-emu: SIMDe headers not found (apt-get install libsimde-dev)"
  exit 0
fi
lib=$BUILD/libpagellm.a
if [ ! -f "$lib" ]; then echo "FAIL avx512-emu/build: $lib not built"; exit 1; fi

out=$BUILD/avx512-emu
mkdir -p "$out"
flags=(-std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -Isrc -Iinclude -Itests -Wno-psabi)
[ "${CI:-}" = true ] && flags+=(-Werror)
# SIMDe runs its 256-bit halves natively when the host has AVX2
grep -qw avx2 /proc/cpuinfo && flags+=(-mavx2 -mfma -mf16c)
newest_header=$(ls -t src/*/*.h tests/*.h | head -n 1)
export CC newest_header out
# SIMDe's headers make each object a slow compile: as many at a time as
# the machine has cores (xargs fails if any does)
emu_object() {
  local f=$1 o=$out/$(basename "${1%.c}").o; shift
  if [ "$o" -nt "$f" ] && [ "$o" -nt "$newest_header" ] && [ "$o" -nt tests/avx512.sh ]; then return 0; fi
  "$CC" "$@" -DPL_AVX512_EMU -c "$f" -o "$o" ||
    { echo "FAIL avx512-emu/build: $f does not compile against SIMDe (see above)"; return 1; }
}
export -f emu_object
objs=()
for f in src/kernels/*avx512*.c; do objs+=("$out/$(basename "${f%.c}").o"); done
if ! printf '%s\n' src/kernels/*avx512*.c | xargs -P "$(nproc)" -I{} bash -c 'emu_object "$@"' _ {} "${flags[@]}"; then
  exit 1
fi

# the tests' own flags, without the AVX2 ones (they would change the
# reference kernels' code, which stay as in the library); linked as many
# at a time as the compiles, then run one after the other
emu_test() {
  local t=$1 bin=$out/$1; shift
  if [ "$bin" -nt "tests/$t.c" ] && [ "$bin" -nt "$lib" ] && [ "$bin" -nt "$newest_header" ] &&
     [ -z "$(find "$@" -newer "$bin")" ]; then return 0; fi
  rm -f "$bin"
  "$CC" -std=c11 -O2 -g -D_GNU_SOURCE -pthread -Isrc -Iinclude -Itests -o "$bin" "tests/$t.c" "$@" "$lib" \
    -lpcre2-8 -lxxhash -ljansson -lmicrohttpd -lm -lpthread || echo "link of $t failed" >&2
  return 0
}
export -f emu_test; export lib
printf '%s\n' "${tests[@]}" | xargs -P "$(nproc)" -I{} bash -c 'emu_test "$@"' _ {} "${objs[@]}"

rc=0
for t in "${tests[@]}"; do
  bin=$out/$t
  if [ ! -x "$bin" ]; then
    echo "FAIL avx512-emu/$t: link failed"; rc=1; continue
  fi
  res=$("$bin" 2>&1); trc=$?
  printf '%s\n' "$res" | sed -E "s#^(PASS|FAIL|SKIP|INFO) #\1 avx512-emu/$t: #"
  if [ "$trc" -ne 0 ]; then
    rc=1
    grep -q '^FAIL ' <<<"$res" || echo "FAIL avx512-emu/$t: exited $trc"
  fi
done
exit $rc
