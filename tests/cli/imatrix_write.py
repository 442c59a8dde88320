#!/usr/bin/env python3
"""imatrix_write.py - writes an importance matrix for a model in llama.cpp's
legacy .dat layout, for the tests: every weight matrix's entry (ne0 x
experts values), ncall 1.

usage: imatrix_write.py TENSORS.json OUT.dat [uniform|random SEED]
  TENSORS.json: `pagellm inspect --json --tensors MODEL`
  uniform: every value 1 (what tests/peer/peer_quantize_iq.c gives llama.cpp)
  random:  log-normal values (sigma 1), seeded
"""
import json
import random
import struct
import sys


def main():
    tensors = json.load(open(sys.argv[1]))["tensors"]
    mode = sys.argv[3] if len(sys.argv) > 3 else "uniform"
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    entries = [t for t in tensors if len(t["ne"]) >= 2 and t["name"].endswith(".weight") and t["ne"][1] > 1]
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for t in entries:
            name = t["name"].encode()
            n = t["ne"][0] * (t["ne"][2] if len(t["ne"]) > 2 else 1)
            f.write(struct.pack("<i", len(name)) + name + struct.pack("<ii", 1, n))
            vals = [1.0] * n if mode == "uniform" else [rng.lognormvariate(0, 1) for _ in range(n)]
            f.write(struct.pack("<%df" % n, *vals))
        f.write(struct.pack("<i", 1))
        ds = b"tests"
        f.write(struct.pack("<i", len(ds)) + ds)


if __name__ == "__main__":
    main()
