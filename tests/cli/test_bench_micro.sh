#!/usr/bin/env bash
# test_bench_micro.sh - the kernel micro-benchmarks in bench/micro/ work (not
# how fast): make builds each; each refuses a missing, extra or bad argument
# (environment knobs too) with exit 2 and a message naming it; a tiny case
# prints the documented columns. The attention ones need AVX2 (x86-64).
source "$(dirname "$0")/lib.sh"

D=$BUILD/bench
# tiny NAME CMD...: runs CMD (at most 60 s) with its output in $T/NAME.txt;
# NAME_exit and NAME_quiet: it exits 0 with nothing on stderr.
tiny() {
  local name=$1 rc; shift
  timeout 60 "$@" >"$T/$name.txt" 2>"$T/$name.err"; rc=$?
  check "${name}_exit" [ "$rc" -eq 0 ]
  check "${name}_quiet" [ ! -s "$T/$name.err" ]
}
for p in bench_fma_peak bench_matmul bench_matmul_stream bench_matmul_layers bench_attn_calls bench_attn_decode bench_attn_prefill bench_read_runs; do
  check "${p}_built" [ -x "$D/$p" ]
done

# bench_matmul [TYPE M N_IN N_OUT]
B=$D/bench_matmul
if [ -x "$B" ]; then
  expect_exit matmul_type 2 "TYPE.*q9" -- "$B" q9 1 64 16
  expect_exit matmul_missing 2 "N_IN missing" -- "$B" f32 1
  expect_exit matmul_m 2 "M: 'x'" -- "$B" f32 x 64 16
  expect_exit matmul_blocks 2 "N_IN: 100 is not a multiple" -- "$B" q4_0 1 100 16
  expect_exit matmul_extra 2 "unexpected argument 'more'" -- "$B" f32 1 64 16 more
  expect_exit matmul_memory 2 "N_IN x N_OUT" -- "$B" f32 1 1048576 1048576
  check matmul_help "$B" --help
  # f32 has no packed layout: rows on 1 and 2 threads
  tiny matmul "$B" f32 2 64 16
  re='^[a-z0-9-]+ +f32 +rows +m=2 +16x64 threads=[12]: +[0-9.]+ us \(caller cpu +[0-9.]+ us\) +[0-9.]+ GFLOP/s +[0-9.]+ GB/s of weights$'
  check matmul_rows [ "$(grep -Ec "$re" "$T/matmul.txt")" -eq 2 ]
fi

# bench_matmul_stream TYPE N_IN N_OUT COUNT [M [THREADS]]
B=$D/bench_matmul_stream
if [ -x "$B" ]; then
  expect_exit stream_missing 2 "COUNT missing" -- "$B" q4_0 256 64
  expect_exit stream_type 2 "TYPE.*q8_k" -- "$B" q8_k 256 64 2
  expect_exit stream_count 2 "COUNT: '0'" -- "$B" q4_0 256 64 0
  expect_exit stream_m 2 "M: '65'" -- "$B" q4_0 256 64 2 65
  expect_exit stream_threads 2 "THREADS: '0'" -- "$B" q4_0 256 64 2 1 0
  expect_exit stream_blocks 2 "N_IN: 250" -- "$B" q4_0 250 64 2
  tiny stream "$B" q4_0 256 64 2 1 1
  re='^[a-z0-9-]+ q4_0 stream m=1 2 x 64x256 \([0-9]+ MiB\) 1 threads: kernel [0-9.]+ GB/s, probe [0-9.]+ GB/s \(medians of 15\); kernel/probe median [0-9.]+ \(quartiles [0-9.]+-[0-9.]+\)$'
  check stream_line [ "$(grep -Ec "$re" "$T/stream.txt")" -eq 1 ]
fi

# bench_matmul_layers TYPE LAYERS [DIM FFN KV_DIM [THREADS]]
B=$D/bench_matmul_layers
if [ -x "$B" ]; then
  expect_exit layers_type 2 "TYPE: 'f16'" -- "$B" f16 1
  expect_exit layers_layers 2 "LAYERS: '0'" -- "$B" q4_0 0
  expect_exit layers_ffn_missing 2 "FFN missing" -- "$B" q4_0 1 64
  expect_exit layers_dim 2 "DIM: 100 is not a multiple" -- "$B" q4_0 1 100 128 32
  expect_exit layers_kv 2 "KV_DIM: 'x'" -- "$B" q4_0 1 64 128 x
  tiny layers "$B" q8_0 2 64 128 32 1
  check layers_head grep -Eq '^[a-z0-9-]+ q8_0 layers 2 x \(dim 64, ffn 128, kv 32\), [0-9]+ MiB, 1 threads: probe [0-9.]+ GB/s, step/probe [0-9.]+ \(quartiles [0-9.]+-[0-9.]+\)$' "$T/layers.txt"
  check layers_kinds [ "$(grep -E '^  (qkv|wo|gate\+up|down) +[0-9.]+ ms a step +[0-9.]+ GB/s$' "$T/layers.txt" | awk '{print $1}' | tr '\n' ' ')" = "qkv wo gate+up down " ]
fi

# bench_fma_peak [THREADS]: a line a kind the CPU runs (zmm FMAs only with
# AVX-512, dpbusd only with AVX512-VNNI, AVX2's maddubs triple always); the
# figures must be positive
B=$D/bench_fma_peak
if [ -x "$B" ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  expect_exit fma_threads 2 "THREADS: '0'" -- "$B" 0
  expect_exit fma_extra 2 "unexpected argument 'x'" -- "$B" 2 x
  check fma_help "$B" -h
  tiny fma "$B" 2
  re=': [0-9]*[1-9][0-9]*\.[0-9]+ G instr/s a thread, [0-9.]+ G multiply-adds/s a thread, [0-9]*[1-9][0-9]*\.[0-9] G multiply-adds/s over 2 threads$'
  want="f32 fma ymm"
  grep -qw avx512f /proc/cpuinfo && want="f32 fma zmm,$want"
  grep -qw avx512f /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && want="$want,int8 dpbusd zmm"
  want="$want,int8 maddubs ymm"
  check fma_lines [ "$(grep -E "$re" "$T/fma.txt" | sed 's/:.*//' | paste -sd,)" = "$want" ]
fi

if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  skip bench_attn "the attention benches time the AVX2 variant"
  exit 0
fi

# bench_attn_calls (no arguments)
B=$D/bench_attn_calls
if [ -x "$B" ]; then
  expect_exit attn_calls_extra 2 "unexpected argument 'x'" -- "$B" x
  tiny attn_calls "$B"
  re=' hd 64 n_ctx 2048: ref [0-9.]+ us/row, avx2 [0-9.]+ us/row alone, [0-9.]+ us/row in 16s$'
  check attn_calls_types [ "$(grep -E "$re" "$T/attn_calls.txt" | sed -E 's/ +hd 64.*//' | tr '\n' ',')" = "f32,f16,bf16,q8_0,q4_0,e4m3,e5m2,f16 pool," ]
fi

# bench_attn_decode L REPS TYPE N_KV REP ROWS, env NCTX BS TILES NOEVICT MINT ONECALL
B=$D/bench_attn_decode
if [ -x "$B" ]; then
  expect_exit attn_decode_missing 2 "ROWS missing" -- "$B" 1 1 f16 2 2
  expect_exit attn_decode_layers 2 "L: '0'" -- "$B" 0 1 f16 2 2 4
  expect_exit attn_decode_type 2 "TYPE: 'q9'" -- "$B" 1 1 q9 2 2 4
  expect_exit attn_decode_type_index 2 "TYPE: '8'" -- "$B" 1 1 8 2 2 4
  expect_exit attn_decode_rows 2 "ROWS: 5 rows need" -- "$B" 1 1 f16 2 2 5
  expect_exit attn_decode_nctx 2 "NCTX: 'x'" -- env NCTX=x "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_bs 2 "BS: '0'" -- env BS=0 "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_tiles 2 "ROWS: 4 x 2 rows .TILES. need 4 KV heads" -- env TILES=2 "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_tiles_onecall 2 "TILES and ONECALL" -- env TILES=2 ONECALL=1 "$B" 1 1 f16 4 2 4
  re='^decode (f16|f16 pool) +hd 64 n_ctx 100, 2 layers x 4 rows \(GQA 2\): avx2 [0-9.]+, avx512 [0-9.]+ ms/token/thread$'
  tiny attn_decode env NCTX=100 BS=8 "$B" 2 2 f16 2 2 4
  check attn_decode_line [ "$(grep -Ec "$re" "$T/attn_decode.txt")" -eq 1 ]
  tiny attn_decode_index env NCTX=100 NOEVICT=1 MINT=1 "$B" 2 2 7 2 2 4
  check attn_decode_index_line [ "$(grep -Ec "$re" "$T/attn_decode_index.txt")" -eq 1 ]
  tiny attn_decode_all env NCTX=100 NOEVICT=1 "$B" 2 1 -1 2 2 4
  check attn_decode_all_lines [ "$(grep -c '^decode ' "$T/attn_decode_all.txt")" -eq 8 ]
  # 16 rows past one call's score scratch: refused in one call, walked in chunks as the engine does
  expect_exit attn_decode_onecall 2 "ROWS: 16 rows over 20000 keys" -- env ONECALL=1 NCTX=20000 "$B" 1 1 f16_pool 2 8 16
  tiny attn_decode_chunked env NCTX=20000 NOEVICT=1 "$B" 1 1 f16_pool 2 8 16
  check attn_decode_chunked_line [ "$(grep -Ec '^decode f16 pool +hd 64 n_ctx 20000, 1 layers x 16 rows' "$T/attn_decode_chunked.txt")" -eq 1 ]
  # the blocks in order, spaced as a block-major pool spaced one layer's planes, and N blocks apart
  expect_exit attn_decode_layout 2 "LAYOUT: 'rows' is not shuffled, inorder, split, engine or apart:N" -- env LAYOUT=rows "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_layout_apart 2 "LAYOUT: 'apart:0': apart:N takes N in 1..64" -- env LAYOUT=apart:0 "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_layout_apart_junk 2 "LAYOUT: 'apart:2x': apart:N takes N in 1..64" -- env LAYOUT=apart:2x "$B" 1 1 f16 2 2 4
  expect_exit attn_decode_layout_kivi 2 "LAYOUT: KIVI blocks are laid out shuffled only" -- env LAYOUT=engine "$B" 1 1 kivi4 2 2 4
  tiny attn_decode_engine env LAYOUT=engine NCTX=300 NOEVICT=1 "$B" 3 1 q4_0 2 2 4
  check attn_decode_engine_line [ "$(grep -Ec '^decode q4_0 +hd 64 n_ctx 300, 3 layers x 4 rows \(GQA 2\), blocks engine: avx2 [0-9.]+, avx512 [0-9.]+ ms/token/thread$' "$T/attn_decode_engine.txt")" -eq 1 ]
  tiny attn_decode_inorder env LAYOUT=inorder NCTX=300 NOEVICT=1 "$B" 1 1 f16_pool 2 2 4
  tiny attn_decode_apart env LAYOUT=apart:3 NCTX=300 NOEVICT=1 "$B" 1 1 q8_0 2 2 4
  tiny attn_decode_split env LAYOUT=split NCTX=300 NOEVICT=1 "$B" 1 1 e4m3 2 2 4
  check attn_decode_apart_line [ "$(grep -Ec ', blocks apart:3: avx2 ' "$T/attn_decode_apart.txt")" -eq 1 ]
  check attn_decode_inorder_line [ "$(grep -Ec ', blocks inorder: avx2 ' "$T/attn_decode_inorder.txt")" -eq 1 ]
  check attn_decode_split_line [ "$(grep -Ec ", blocks split: avx2 " "$T/attn_decode_split.txt")" -eq 1 ]
  # two tiles of 16 rows (TinyLlama's 4 KV heads) walking the chunks together
  tiny attn_decode_tiles env TILES=2 NCTX=9000 NOEVICT=1 "$B" 1 1 q8_0 4 8 16
  check attn_decode_tiles_line [ "$(grep -Ec '^decode q8_0 +hd 64 n_ctx 9000, 1 layers x 32 rows' "$T/attn_decode_tiles.txt")" -eq 1 ]
fi

# bench_read_runs RUN SLOT [MIB], env ORDER PF
B=$D/bench_read_runs
if [ -x "$B" ]; then
  expect_exit read_runs_missing 2 "SLOT missing" -- "$B" 4096
  expect_exit read_runs_run 2 "RUN: '8192'" -- "$B" 8192 4096
  expect_exit read_runs_lines 2 "whole 64-byte lines" -- "$B" 100 4096
  expect_exit read_runs_order 2 "ORDER: 'back' is not inorder or shuffled" -- env ORDER=back "$B" 4096 16384 8
  expect_exit read_runs_pf 2 "PF: 'x'" -- env PF=x "$B" 4096 16384 8
  expect_exit read_runs_slots 2 "fewer than 2 slots" -- "$B" 4096 4194304 4
  check read_runs_help "$B" --help
  tiny read_runs env ORDER=inorder PF=8192 "$B" 4096 16384 8
  check read_runs_line [ "$(grep -Ec '^read runs of 4096 B every 16384 B, inorder, pf 8192 B: [0-9.]+ GB/s$' "$T/read_runs.txt")" -eq 1 ]
  tiny read_runs_shuffled "$B" 128 4096 4
  check read_runs_shuffled_line [ "$(grep -Ec '^read runs of 128 B every 4096 B, shuffled, pf 0 B: [0-9.]+ GB/s$' "$T/read_runs_shuffled.txt")" -eq 1 ]
fi

# bench_attn_prefill TYPE [TYPE...], env DEPTH CHUNK REPS
B=$D/bench_attn_prefill
if [ -x "$B" ]; then
  expect_exit attn_prefill_missing 2 "TYPE missing" -- "$B"
  expect_exit attn_prefill_type 2 "TYPE: 'q9'" -- "$B" f16 q9
  expect_exit attn_prefill_depth 2 "DEPTH: 'x'" -- env DEPTH=x "$B" f16
  expect_exit attn_prefill_reps 2 "REPS: '0'" -- env REPS=0 "$B" f16
  check attn_prefill_help "$B" --help
  tiny attn_prefill env DEPTH=40 CHUNK=24 REPS=1 "$B" f16_pool e4m3 kivi4
  re='^prefill (f16_pool|e4m3|kivi4) +depth 40 chunk 24: [0-9.]+ ms/layer median, [0-9.]+ fastest, [0-9.]+ GFLOP/s$'
  check attn_prefill_lines [ "$(grep -Ec "$re" "$T/attn_prefill.txt")" -eq 3 ]
fi
