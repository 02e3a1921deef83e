#!/usr/bin/env python3
"""Writes a small seed corpus of valid encodings (every value/index encoding) for codec_fuzz.

Usage: make_codec_seeds.py OUT_DIR   (fuzz/corpus/codec)
"""
import os
import struct
import sys


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode(dense, idx, vals, venc, ienc):
    if ienc in (2, 3):
        blocks = sorted({i // 16 for i in idx})
        idx = [i for b in blocks for i in range(b * 16, min(b * 16 + 16, dense))]
        vals = [float(i % 7) - 3.0 for i in idx]
        count = len(blocks)
    else:
        count = len(idx)
    out = bytearray(struct.pack("<IBBBBQQQ", 0x56535246, 1, venc, ienc, 0, dense, len(idx), count))
    if ienc == 0:
        out += b"".join(struct.pack("<I", i) for i in idx)
    elif ienc == 1:
        body = b"".join(varint(i if j == 0 else i - idx[j - 1]) for j, i in enumerate(idx))
        out += struct.pack("<Q", len(body)) + body
    elif ienc == 2:
        out += b"".join(struct.pack("<I", b) for b in blocks)
    else:
        body = b"".join(varint(b if j == 0 else b - blocks[j - 1]) for j, b in enumerate(blocks))
        out += struct.pack("<Q", len(body)) + body
    for v in vals:
        if venc == 0:
            out += struct.pack("<f", v)
        elif venc == 1:
            out += struct.pack("<e", v)
        else:
            out += struct.pack("<f", v)[2:]
    return bytes(out)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    cases = [(0, [], []), (1, [0], [1.5]), (37, [0, 3, 16, 17, 36], [1, -2, 0.5, 3, -0.25]),
             (100000, [5, 300, 70000, 99999], [1e-3, -7.0, 2.0, 0.0])]
    n = 0
    for dense, idx, vals in cases:
        for venc in range(3):
            for ienc in range(4):
                with open(os.path.join(out_dir, f"seed_{n}"), "wb") as f:
                    f.write(encode(dense, idx, [float(v) for v in vals], venc, ienc))
                n += 1


if __name__ == "__main__":
    main()
