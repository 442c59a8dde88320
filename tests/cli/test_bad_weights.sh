#!/usr/bin/env bash
# test_bad_weights.sh - broken weights in files of the newer formats are
# refused with an error naming the tensor and the file offset (exit 1):
# tensor data cut short, a type id ggml does not have, a row length the
# type's block cannot hold, a known type pagellm does not compute, and a
# truncated shard of a split model (named by its own path).
source tests/cli/lib.sh

M=$SHARED/models/stories260K.gguf
if [ ! -f "$M" ]; then skip bad_weights "$M not found"; exit 0; fi

# set_type FILE TENSOR ID: rewrite TENSOR's type id in FILE's directory
set_type() {
  python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
path, name, tid = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
i = b.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
nd = struct.unpack_from("<I", b, i)[0]
struct.pack_into("<I", b, i + 4 + 8 * nd, tid)
open(path, "wb").write(b)
PY
}
run1() { "$PAGELLM" run -m "$1" -p "Once" -n 1; }

"$PAGELLM" quantize "$M" "$T/s.gguf" q5_k_m >/dev/null 2>&1 || { fail bad_weights_setup "quantize failed"; exit 0; }

cp "$T/s.gguf" "$T/cut.gguf"; truncate -s -100 "$T/cut.gguf"
expect_exit truncated_tensor_data 1 "cut.gguf: offset [0-9]+: tensor\[[0-9]+\] '[a-z0-9_.]+' offset: data at [0-9]+ \+ [0-9]+ bytes runs past the end" -- run1 "$T/cut.gguf"

cp "$T/s.gguf" "$T/type.gguf"; set_type "$T/type.gguf" blk.1.attn_q.weight 99
expect_exit unknown_type_id 1 "offset [0-9]+: tensor\[[0-9]+\] 'blk.1.attn_q.weight' type: 99 is not a known ggml type" -- run1 "$T/type.gguf"

cp "$T/s.gguf" "$T/row.gguf"; set_type "$T/row.gguf" blk.1.attn_q.weight 13  # q5_K: rows of 256, these are 64
expect_exit row_not_a_block_multiple 1 "offset [0-9]+: tensor\[[0-9]+\] 'blk.1.attn_q.weight' ne\[0\]: row length 64 is not a multiple of the q5_K block size 256" -- run1 "$T/row.gguf"

# a type ggml has but pagellm does not compute: mxfp4
if "$PAGELLM" synth --shape tiny256 --type q4_K -o "$T/k.gguf" >/dev/null 2>&1; then
  set_type "$T/k.gguf" blk.2.ffn_up.weight 39
  expect_exit known_type_not_computed 1 "tensor 'blk.2.ffn_up.weight' \(data at offset [0-9]+\): type mxfp4 is not supported" -- run1 "$T/k.gguf"
else
  fail known_type_not_computed "synth tiny256 failed"
fi

# a split model whose second shard is cut short: that shard is named
if "$PAGELLM" quantize "$M" "$T/sp.gguf" q5_k_m --split 3 >/dev/null 2>&1; then
  truncate -s -64 "$T/sp-00002-of-00003.gguf"
  expect_exit truncated_shard 1 "shard 2 of 3: .*sp-00002-of-00003.gguf: offset [0-9]+: tensor\[[0-9]+\] '[a-z0-9_.]+' offset: data at .* runs past the end" -- run1 "$T/sp-00001-of-00003.gguf"
else
  fail truncated_shard "quantize --split failed"
fi
