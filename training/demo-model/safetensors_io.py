"""Reads and writes .safetensors files with numpy only (Debian has no python3-safetensors): F32,
BF16, F8_E4M3 and I32, the dtypes of DeepSeek's checkpoints and of the demo's compact file."""
import json
import struct

import numpy as np


def _e4m3_table():
    """The 256 E4M3 values (sign, 4 exponent bits with bias 7, 3 mantissa bits; 0x7F/0xFF NaN)."""
    v = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 0x7
        if exp == 0xF and man == 0x7:
            v[code] = np.nan
        elif exp == 0:
            v[code] = sign * man / 8.0 * 2.0 ** -6
        else:
            v[code] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return v


E4M3 = _e4m3_table()
_POSITIVE = E4M3[:0x7F]  # 0 .. 448, increasing


def to_e4m3(x):
    """Nearest E4M3 code of each value (ties to the even code), saturating at +-448."""
    a = np.minimum(np.abs(x.astype(np.float32)), 448.0)
    hi = np.clip(np.searchsorted(_POSITIVE, a), 1, len(_POSITIVE) - 1)
    lo = hi - 1
    d_lo, d_hi = a - _POSITIVE[lo], _POSITIVE[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    return np.where(x < 0, code | 0x80, code).astype(np.uint8)


def to_bf16(x):
    """Round-to-nearest-even BF16 bits of float32 values."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def bf16_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


_STORED = {"F32": np.float32, "BF16": np.uint16, "F8_E4M3": np.uint8, "I32": np.int32}


def write(path, tensors, metadata):
    """tensors: list of (name, dtype name, numpy array already in that dtype's storage)."""
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, dtype, array in tensors:
        blob = np.ascontiguousarray(array, dtype=_STORED[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read(path):
    """(metadata, {name: (dtype name, numpy array in storage form)})."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        out[name] = (t["dtype"], np.frombuffer(data[begin:end], dtype=_STORED[t["dtype"]])
                     .reshape(t["shape"]))
    return metadata, out


def dequantize_blocks(codes, scale_inv, block_rows, block_cols):
    """An FP8 matrix times its per-block scales (DeepSeek's weight_scale_inv)."""
    rows, cols = codes.shape
    scale = np.repeat(np.repeat(scale_inv, block_rows, 0), block_cols, 1)[:rows, :cols]
    return E4M3[codes] * scale


def quantize_blocks(w, block_rows, block_cols):
    """DeepSeek's block scheme: one scale per tile, amax / 448. Returns (codes, scale_inv)."""
    rows, cols = w.shape
    gr, gc = -(-rows // block_rows), -(-cols // block_cols)
    scale_inv = np.ones((gr, gc), dtype=np.float32)
    for i in range(gr):
        for j in range(gc):
            amax = np.abs(w[i * block_rows:(i + 1) * block_rows,
                            j * block_cols:(j + 1) * block_cols]).max()
            if amax > 0:
                scale_inv[i, j] = amax / 448.0
    scale = np.repeat(np.repeat(scale_inv, block_rows, 0), block_cols, 1)[:rows, :cols]
    return to_e4m3(w / scale), scale_inv


def load_float(tensors, name, block):
    """A checkpoint tensor as float32, FP8 ones through their `_scale_inv` of `block` tiles
    (config.json's quantization_config.weight_block_size)."""
    dtype, a = tensors[name]
    if dtype == "F8_E4M3":
        return dequantize_blocks(a, tensors[name + "_scale_inv"][1], *block)
    if dtype == "BF16":
        return bf16_to_float(a)
    return a.astype(np.float32)
