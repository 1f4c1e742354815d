#!/usr/bin/env python3
"""stage_file.py - writes a shoal stage file (models/checkpoint.c's layout,
version 2, no extras) for integration suites: a real header, a float count
its model and layers make (kernels/layout.c), arbitrary parameters and
zero AdamW moments, and the FNV-1a 64 checksum.  Standard library only.

usage: stage_file.py OUT V T C NH L LAYER_START LAYER_END FIRST LAST STEP [SEED]
"""
import random
import struct
import sys


def floats(V, T, C, ls, le, first, last):
    """Floats per buffer of the stage (layout.c): 12C^2 + 13C a block,
    (V + T) C for the embeddings, (V + 2) C for the final LN and head."""
    return (12 * C * C + 13 * C) * (le - ls) + (first and (V + T) * C) + (last and (V + 2) * C)


def main(argv):
    if len(argv) not in (12, 13):
        sys.exit(__doc__.strip().splitlines()[-1])
    out = argv[1]
    V, T, C, NH, L, ls, le, first, last, step = (int(x) for x in argv[2:12])
    seed = int(argv[12]) if len(argv) == 13 else 1
    n = floats(V, T, C, ls, le, first, last)
    rng = random.Random(seed)
    head = b"SHOALSTG" + struct.pack("<I10iQQ", 2, V, T, C, NH, L, ls, le, first, last, 0, step, n)
    params = struct.pack("<%df" % n, *(rng.uniform(-0.02, 0.02) for _ in range(n)))
    data = head + params + bytes(8 * n)   # adam_m, adam_v: zeros
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    with open(out, "wb") as f:
        f.write(data + struct.pack("<Q", h))


if __name__ == "__main__":
    main(sys.argv)
