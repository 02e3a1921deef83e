#!/usr/bin/python3
"""gpt-tiny and its corpus for the Python baselines, built exactly as Frugal builds them
(docs/design/models.md, docs/design/data.md; src/models/gpt_tiny.cc, src/data/text_corpus.cc).

The corpus is Debian's bible-kjv-text (/usr/lib/bible.data, the bible program's
windowed-LZW format, decoded here) or any plain text file. The last 65,536 bytes
are the validation split; each split is cut into non-overlapping 128-byte windows,
sample i predicting bytes [i*T+1, i*T+T+1) from [i*T, i*T+T).

`python3 gpt_tiny.py` decodes the installed corpus and checks the model's parameter
count (exit code 1 on a mismatch).
"""
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

BIBLE_KJV_PATH = "/usr/lib/bible.data"
HELD_OUT_BYTES = 65536
CONTEXT, WIDTH, LAYERS, HEADS, HIDDEN, VOCAB = 128, 256, 4, 4, 1024, 256
EXPECTED_PARAMS = 3323392


class CorpusError(ValueError):
    """A missing, corrupt or too short corpus; the message names the file."""


def _lzw_window(buf, max_bits, limit):
    """One window's LZW codes (Note [bible.data layout] in src/data/text_corpus.cc) -> bytes."""
    out, prefix, suffix = bytearray(), {}, {}
    bits, free, old, first, pos, group_start, total = 9, 257, -1, 0, 0, 0, len(buf) * 8

    def align(pos, group_start, bits):
        g = bits * 8
        return group_start + (pos - group_start + g - 1) // g * g

    while pos + bits <= total:
        code = (int.from_bytes(buf[pos >> 3:(pos >> 3) + 3], "little") >> (pos & 7)) & ((1 << bits) - 1)
        pos += bits
        if code == 256:
            pos = group_start = align(pos, group_start, bits)
            bits, free, old = 9, 256, -1
            continue
        if old < 0:
            if code > 255:
                raise CorpusError("LZW stream starts with code %d" % code)
            out.append(code)
            old = first = code
            free = 257
            continue
        if code > free:
            raise CorpusError("LZW code %d is past the table (%d entries)" % (code, free))
        c, s = (old if code == free else code), bytearray()
        while c > 255:
            s.append(suffix[c])
            c = prefix[c]
        s.append(c)
        s.reverse()
        if code == free:
            s.append(first)
        out += s
        first = s[0]
        if len(out) > limit:
            raise CorpusError("a window decodes to more than its size")
        if free < (1 << max_bits):
            prefix[free], suffix[free] = old, first
            free += 1
        old = code
        if free > (1 << bits) - 1 and bits < max_bits:
            pos = group_start = align(pos, group_start, bits)
            bits += 1
    return out


def decode_bible_data(b):
    """The text of a bible-kjv-text data file (bytes)."""
    if len(b) < 0x5c or b[:4] != b"EC02":
        raise CorpusError("not a bible-kjv-text data file (no EC02 header)")
    window, n = struct.unpack(">II", b[0x54:0x5c])
    if not (0 < window <= 1 << 24 and 0 < n <= 1 << 16) or len(b) < 0x5c + 4 * (n + 1) + 3:
        raise CorpusError("bad header")
    offs = struct.unpack(">%dI" % (n + 1), b[0x5c:0x5c + 4 * (n + 1)])
    if offs[-1] != len(b) or offs[0] < 0x5c + 4 * (n + 1) + 3 or any(x >= y for x, y in zip(offs, offs[1:])):
        raise CorpusError("offset table does not match the file (truncated?)")
    h = offs[0] - 3
    max_bits = b[h + 2] & 0x1f
    if b[h] != 0x1f or b[h + 1] != 0x9d or not b[h + 2] & 0x80 or not 9 <= max_bits <= 16:
        raise CorpusError("no block-mode compress header before the first window")
    text = bytearray()
    for i in range(n):
        w = _lzw_window(b[offs[i]:offs[i + 1]], max_bits, window)
        if (i + 1 < n and len(w) != window) or not w:
            raise CorpusError("window %d decodes to %d bytes, expected %d" % (i, len(w), window))
        text += w
    return bytes(text)


def read_text_corpus(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CorpusError("text corpus %s does not exist (install Debian's bible-kjv-text)" % path) from None
    if not raw:
        raise CorpusError("%s: the corpus is empty" % path)
    try:
        return decode_bible_data(raw) if raw[:4] == b"EC02" else raw
    except CorpusError as e:
        raise CorpusError("%s: %s" % (path, e)) from None


def split_windows(text, validation, context=CONTEXT, held_out=HELD_OUT_BYTES):
    """(inputs, targets) uint8 tensors [N, context] of the train or validation split."""
    if len(text) < held_out + context + 1:
        raise CorpusError("the corpus has %d bytes, too few for a %d-byte validation split" % (len(text), held_out))
    part = text[len(text) - held_out:] if validation else text[:len(text) - held_out]
    n = (len(part) - 1) // context
    t = torch.frombuffer(bytearray(part[:n * context + 1]), dtype=torch.uint8)
    return t[:n * context].view(n, context), t[1:n * context + 1].view(n, context)


def load_text(path):
    """(x_train, y_train, x_val, y_val) as in LoadTrainingData for --dataset text."""
    text = read_text_corpus(path)
    return split_windows(text, False) + split_windows(text, True)


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
        att = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, width, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GptTiny(nn.Module):
    """tokens [N, T] int64 -> logits [N, vocab, T] (the layout F.cross_entropy takes)."""

    def __init__(self, vocab=VOCAB):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, WIDTH)
        self.pos_emb = nn.Embedding(CONTEXT, WIDTH)
        for i in range(LAYERS):
            self.add_module("block%d" % i, Block(WIDTH, HEADS, HIDDEN))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))
        for i in range(LAYERS):
            x = getattr(self, "block%d" % i)(x)
        return self.head(self.ln_f(x)).transpose(1, 2)


@torch.no_grad()
def evaluate_lm(model, x, y, batch=64):
    """(next-byte accuracy, validation loss in nats per byte), as train::EvaluateModel."""
    correct, loss, count = evaluate_lm_sums(model, x, y, batch)
    return correct / count, loss / count


@torch.no_grad()
def evaluate_lm_sums(model, x, y, batch=64):
    """(correct next bytes, summed loss in nats, bytes) over the windows x, y: sums add across shards."""
    model.eval()
    correct, loss, count = 0, 0.0, 0
    for i in range(0, x.shape[0], batch):
        xb, yb = x[i:i + batch].long(), y[i:i + batch].long()
        logits = model(xb)
        correct += (logits.argmax(1) == yb).sum().item()
        loss += F.cross_entropy(logits, yb, reduction="sum").item()
        count += yb.numel()
    model.train()
    return correct, loss, count


def main():
    n = sum(p.numel() for p in GptTiny().parameters())
    print("gpt-tiny parameters:", n)
    if n != EXPECTED_PARAMS:
        print("MISMATCH with docs/design/models.md:", EXPECTED_PARAMS)
        return 1
    x, y, xv, yv = load_text(sys.argv[1] if len(sys.argv) > 1 else BIBLE_KJV_PATH)
    print("windows: %d train, %d validation" % (x.shape[0], xv.shape[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
