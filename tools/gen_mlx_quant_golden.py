#!/usr/bin/env python3
"""Golden data for the MLX affine kernels, produced by mlx itself (mx.quantize,
mx.dequantize, mx.quantized_matmul; mode "affine", CPU).

For every bits in {2,3,4,5,6,8} x group in {32,64,128} x scale dtype in
{float32, float16, bfloat16}, writes tests/data/mlx_affine/b<bits>_g<group>_<dtype>.bin:
    char[4] magic "LSMA"; u32 bits, group, sb_type (lockstep/ggml id: 0 f32, 1 f16, 30 bf16),
    rows, cols, n_act
    f32 src[rows][cols]          the weights given to mx.quantize (already rounded to the
                                 scale dtype, as mlx quantizes in that dtype)
    u8  packed[rows][cols*bits/8]  mx.quantize's packed codes (uint32 words, little-endian)
    sb  scales[rows][cols/group]   in the scale dtype (2 or 4 bytes each)
    sb  biases[rows][cols/group]
    f32 deq[rows][cols]          mx.dequantize with scales/biases upcast to float32: the
                                 float formula the engine computes (for f16/bf16 scales the
                                 upcast is exact, so the inputs are the same)
    f32 x[n_act][cols]           activation rows
    f32 y[n_act][rows]           mx.quantized_matmul(x, packed, scales_f32, biases_f32,
                                 transpose=True)
all little-endian. manifest.txt lists the files, one per line. tests/test_mlx_affine.c
checks dequantization bit for bit, the matmul within a tolerance (different summation
order), and the reference quantizer against mx.quantize.

The source rows include special groups: all zeros (scale 1e-7, bias 0), a constant group,
an all-negative group, a large-magnitude row, so both scale signs appear (checked).

Run: python3 tools/gen_mlx_quant_golden.py [out_dir]   (deterministic: fixed seed)
"""
import os
import struct
import sys

import mlx.core as mx
import numpy as np

ROWS, COLS, N_ACT = 6, 384, 3
DTYPES = [("f32", mx.float32, 0), ("f16", mx.float16, 1), ("bf16", mx.bfloat16, 30)]


def source(rng):
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    w[1] = w[1] * 0.02 + 0.3  # all positive: |max| > |min| gives negative scales (edge = max)
    w[2] = -np.abs(w[2])  # all negative: positive scales, edge = min
    w[3] *= 100.0  # large magnitudes
    w[0, :32] = 0.0  # all-zero group (q0 = 0 -> bias 0)
    w[4, 32:64] = 0.5  # constant group
    return w


def raw(a, dtype):
    """Bytes of an mlx array in its own dtype (bf16 has no numpy dtype: view as uint16)."""
    if dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16)).astype("<u2").tobytes()
    if dtype == mx.float16:
        return np.array(a).astype("<f2").tobytes()
    return np.array(a).astype("<f4").tobytes()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                                  "mlx_affine")
    os.makedirs(out_dir, exist_ok=True)
    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(20240611)
    names = []
    neg_seen = pos_seen = 0
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            for dname, dtype, sb_id in DTYPES:
                w = mx.array(source(rng)).astype(dtype)
                q, s, b = mx.quantize(w, group_size=group, bits=bits, mode="affine")
                s32, b32 = s.astype(mx.float32), b.astype(mx.float32)
                deq = mx.dequantize(q, s32, b32, group_size=group, bits=bits, mode="affine")
                x = mx.array(rng.standard_normal((N_ACT, COLS)).astype(np.float32))
                y = mx.quantized_matmul(x, q, s32, b32, transpose=True, group_size=group, bits=bits, mode="affine")
                mx.eval(q, s, b, deq, y)
                sv = np.array(s32)
                neg_seen += int((sv < 0).sum())
                pos_seen += int((sv > 0).sum())
                assert (sv < 0).any() and (sv > 0).any(), "want both scale signs in every case"
                packed = np.array(q).astype("<u4").tobytes()
                assert len(packed) == ROWS * COLS * bits // 8
                name = f"b{bits}_g{group}_{dname}.bin"
                with open(os.path.join(out_dir, name), "wb") as f:
                    f.write(b"LSMA")
                    f.write(struct.pack("<6I", bits, group, sb_id, ROWS, COLS, N_ACT))
                    f.write(np.array(w.astype(mx.float32)).astype("<f4").tobytes())
                    f.write(packed)
                    f.write(raw(s, dtype))
                    f.write(raw(b, dtype))
                    f.write(np.array(deq).astype("<f4").tobytes())
                    f.write(np.array(x).astype("<f4").tobytes())
                    f.write(np.array(y).astype("<f4").tobytes())
                names.append(name)
    with open(os.path.join(out_dir, "manifest.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    print(f"{out_dir}: {len(names)} cases (mlx {mx.__version__}); scales: {neg_seen} negative, {pos_seen} positive")


if __name__ == "__main__":
    main()
