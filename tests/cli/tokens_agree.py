#!/usr/bin/env python3
"""tokens_agree.py - do our greedy tokens agree with llama.cpp's?

    tokens_agree.py PEER_LOGITS MODEL TIE SCRATCH OURS PEER

OURS and PEER are JSON lines [prompt_ids, gen_ids] from `pagellm run --json`
and peer-bench. They agree when the generated ids are equal, or when they
first differ at a near tie: llama.cpp's logits at that position, computed
the way its generation computed them (the prompt as one batch, then one
token at a time: peer-logits -split), put both engines' choices within TIE
of the row's best. Rounding in another summation order (ours, or llama.cpp's
own kernels on another CPU) can flip such a tie and nothing else.

Exit 0 when they agree; otherwise exit 1 and print why on stdout. At a tie
it prints the position and both gaps, for the test's INFO line.
"""
import json
import struct
import subprocess
import sys


def main():
    logits, model, tie, scratch, ours, peer = sys.argv[1:7]
    tie = float(tie)
    try:
        pa, ga = json.loads(ours)
        pb, gb = json.loads(peer)
    except ValueError:
        print("a run failed: ours %r, llama.cpp %r" % (ours, peer))
        return 1
    if pa != pb:
        print("prompt ids differ: ours %s, llama.cpp %s" % (pa, pb))
        return 1
    if ga == gb:
        return 0
    if len(ga) != len(gb):
        print("generated lengths differ: ours %d, llama.cpp %d" % (len(ga), len(gb)))
        return 1
    i = next(k for k in range(len(ga)) if ga[k] != gb[k])
    ids = ",".join(map(str, pa + gb[:i]))
    subprocess.run([logits, "-m", model, "-ids", ids, "-split", str(len(pa)), "-o", scratch, "-t", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    raw = open(scratch, "rb").read()
    row = struct.unpack("<%df" % (len(raw) // 4), raw)
    if max(ga[i], gb[i]) >= len(row):
        print("token id past llama.cpp's vocabulary of %d" % len(row))
        return 1
    best = max(row)
    gap_ours, gap_peer = best - row[ga[i]], best - row[gb[i]]
    ok = gap_ours <= tie and gap_peer <= tie
    print("first difference at token %d: ours %d, llama.cpp %d; below llama.cpp's best logit by %.3g and %.3g%s"
          % (i, ga[i], gb[i], gap_ours, gap_peer, "" if ok else " (not a near tie of %g)" % tie))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
