#!/usr/bin/env python3
"""Golden data for the dequantizers, produced by the PyPI `gguf` package (gguf.quants).

For each type, writes tests/data/quant_golden/<type>.bin:
    char[4] magic "LSQG"; u32 ggml type id; u32 n (elements); u32 has_src
    f32 src[n]        the floats that were quantized (zeros when has_src == 0)
    u8  blocks[...]   n elements of that type, as gguf.quants.quantize wrote them
                      (or random valid blocks for the K-quants, which gguf can only decode)
    f32 deq[n]        gguf.quants.dequantize(blocks)
all little-endian. tests/test_kernels_reference.c checks our dequantizers against deq bit
for bit and, where has_src, our reference quantizer against the blocks.

Run: python3 tools/gen_quant_golden.py [out_dir]   (deterministic: fixed seed)
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
DECODE_ONLY = [T.Q4_K, T.Q5_K, T.Q6_K]
# byte offsets and values range of the f16 scale fields in each K-quant block
K_SCALES = {T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def source_floats(rng, n):
    """Blocks of different magnitudes, signs and offsets, plus a zero block."""
    x = rng.standard_normal(n).astype(np.float32)
    scale = np.repeat(rng.uniform(0.01, 4.0, n // 32).astype(np.float32), 32)
    shift = np.repeat(rng.uniform(-1.0, 1.0, n // 32).astype(np.float32), 32)
    x = x * scale + shift * (rng.uniform(size=n) < 0.5)
    x[32:64] = 0.0  # an all-zero block (d = 0 paths)
    return x.astype(np.float32)


def random_kquant_blocks(rng, qtype, nblocks):
    bs, ts = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    for off in K_SCALES[qtype]:
        h = rng.uniform(-0.01, 0.05, size=nblocks).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
        raw[:, off:off + 2] = h
    return raw


def write(out_dir, qtype, src, blocks, has_src):
    deq = quants.dequantize(blocks, qtype).astype(np.float32).reshape(-1)
    n = deq.size
    path = os.path.join(out_dir, qtype.name.lower() + ".bin")
    with open(path, "wb") as f:
        f.write(b"LSQG")
        f.write(struct.pack("<III", int(qtype), n, 1 if has_src else 0))
        f.write(src.astype("<f4").tobytes())
        f.write(np.ascontiguousarray(blocks).tobytes())
        f.write(deq.astype("<f4").tobytes())
    print(f"{path}: {n} elements, {blocks.size} block bytes")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(here, "..", "tests", "data",
                                                                                  "quant_golden"))
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20240611)
    for qtype in QUANTIZABLE:
        n = 8 * 32
        src = source_floats(rng, n)
        if qtype == T.F16:
            src[0:6] = [65504.0, 1e-7, -3e-8, 70000.0, -0.0, 5.96e-8]  # max, subnormals, overflow
        with np.errstate(over="ignore"):  # 70000 -> inf in f16 is intended
            blocks = quants.quantize(src.reshape(1, n), qtype).reshape(-1)
        write(out_dir, qtype, src, blocks, True)
    for qtype in DECODE_ONLY:
        nblocks = 4
        blocks = random_kquant_blocks(rng, qtype, nblocks).reshape(-1)
        write(out_dir, qtype, np.zeros(nblocks * 256, dtype=np.float32), blocks, False)


if __name__ == "__main__":
    main()
