"""Builds the language-model corpus of examples/lm/train.py from text that
Debian packages install, trains a sentencepiece BPE tokenizer on it and
writes the token arrays:

    /usr/bin/python3 examples/lm/prepare.py                 # -> build/lm/data
    /usr/bin/python3 examples/lm/prepare.py --input DIR     # any folder of text files instead

The default corpus (scripts/setup installs its packages; about 31 MB to download):
  python3-doc   the Python 3 manual's reStructuredText sources (prose with code), ~11 MB
  perl-doc      Perl's manual pages in POD (prose), ~9 MB
  golang-src    the Go distribution's hand-written source: the standard library,
                its tools and test suite, heavily commented (files marked
                "Code generated ... DO NOT EDIT" and testdata/ left out), ~44 MB

Output (--out): tokenizer.model, train.bin and val.bin (token ids, uint16
below 65,536 pieces, else int32, one end-of-text id after each file) and
meta.json (vocabulary, dtype, counts, sources). The validation split is
fixed: a file belongs to it when the CRC-32 of its path (relative to its
source's root) is 0 modulo --val-every, so it does not move when files are
added or the order of the walk changes.
"""

import argparse
import glob
import json
import os
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class PrepareError(Exception):
    """A missing package, file or a corpus too small: the message says what to do."""


def _go_is_generated(text):
    head = text[:4096]
    return "Code generated" in head and "DO NOT EDIT" in head


# name -> (Debian package, root globs, file suffix, skip(relpath, text) or None).
# The roots are globs so that the next Debian release's versioned paths match.
SOURCES = {
    "python-docs": ("python3-doc", ["/usr/share/doc/python3*/html/_sources"], ".rst.txt", None),
    "perl-docs": ("perl-doc", ["/usr/share/perl/5*/pod"], ".pod", None),
    "go-src": ("golang-src", ["/usr/share/go-1*/src", "/usr/share/go-1*/test", "/usr/share/go-1*/misc"], ".go",
               lambda rel, text: "/testdata/" in f"/{rel}" or _go_is_generated(text)),
}


def _newest(paths):
    """The root of the newest installed version (go-1.19 before go-1.2)."""
    def key(p):
        return [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in p.replace("-", ".").split(".")]
    return sorted(paths, key=key)[-1:] if paths else []


def gather(names, inputs):
    """[(source, relpath, text)] of the chosen sources (or of the --input
    folders and files), sorted by (source, relpath)."""
    docs = []
    for path in inputs:
        if not os.path.exists(path):
            raise PrepareError(f"--input {path} does not exist")
        files = [path] if os.path.isfile(path) else sorted(
            os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
        base = path if os.path.isdir(path) else os.path.dirname(path)
        for f in files:
            if os.path.islink(f):  # the same text under a second name
                continue
            text = _read(f)
            if text is not None:
                docs.append(("input", os.path.relpath(f, base), text))
    for name in names:
        package, root_globs, suffix, skip = SOURCES[name]
        found = 0
        for pattern in root_globs:
            for root in _newest(glob.glob(pattern)):
                for d, _, fs in os.walk(root):
                    for f in fs:
                        if not f.endswith(suffix):
                            continue
                        rel = os.path.relpath(os.path.join(d, f), os.path.dirname(root))
                        text = _read(os.path.join(d, f))
                        if text is None or (skip and skip(rel, text)):
                            continue
                        docs.append((name, rel, text))
                        found += 1
        if not found:
            raise PrepareError(f"source {name!r}: no *{suffix} files under {' or '.join(root_globs)}; install its "
                               f"package: apt-get install -y {package} (or run scripts/setup)")
    docs.sort(key=lambda d: (d[0], d[1]))
    return docs


def _read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:  # binary
        return None
    return data.decode("utf-8", errors="replace")


def split(docs, val_every):
    train, val = [], []
    for doc in docs:
        (val if zlib.crc32(f"{doc[0]}/{doc[1]}".encode()) % val_every == 0 else train).append(doc)
    if not val or not train:
        raise PrepareError(f"{len(docs)} files give {len(train)} for training and {len(val)} for validation with "
                           f"--val-every {val_every}: give more text or a smaller --val-every")
    return train, val


def train_tokenizer(docs, vocab_size, sample_mb, prefix, threads):
    """A BPE model on up to sample_mb of the training files' lines (an even
    spread over the files). Whitespace is kept as it is (code's indentation
    and tabs), and byte fallback spells anything unseen, newlines included,
    so every text encodes without an unknown token."""
    try:
        import sentencepiece as spm
    except ImportError:
        raise PrepareError("the sentencepiece module is missing: apt-get install -y python3-sentencepiece "
                           "(or run scripts/setup)") from None
    total = sum(len(d[2]) for d in docs)
    keep = min(1.0, sample_mb * 1e6 / max(1, total))
    sample = prefix + ".sample.txt"
    with open(sample, "w", encoding="utf-8") as f:
        budget = 0.0
        for _, _, text in docs:
            budget += keep * len(text)
            for line in text.splitlines():
                if budget <= 0:
                    break
                if line.strip():
                    f.write(line[:2048] + "\n")
                    budget -= len(line) + 1
    spm.SentencePieceTrainer.train(
        input=sample, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size, character_coverage=0.9995,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, allow_whitespace_only_pieces=True, max_sentence_length=4096,
        input_sentence_size=2_000_000, shuffle_input_sentence=True, num_threads=threads, minloglevel=2,
        unk_id=0, bos_id=-1, eos_id=1, pad_id=-1)
    os.remove(sample)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def encode(sp, docs, dtype, threads):
    eos = sp.eos_id()
    parts = []
    batch = 256
    for i in range(0, len(docs), batch):
        for ids in sp.encode([d[2] for d in docs[i:i + batch]], num_threads=threads):
            parts.append(np.asarray(ids + [eos], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(REPO, "build", "lm", "data"), help="output folder (default build/lm/data)")
    p.add_argument("--sources", default=",".join(SOURCES),
                   help=f"comma-separated Debian text sources, of {', '.join(SOURCES)} (default: all); "
                        "empty with --input")
    p.add_argument("--input", action="append", default=[], help="a folder or file of text (repeatable), added to --sources")
    p.add_argument("--vocab-size", type=int, default=8192, help="BPE pieces (default 8192)")
    p.add_argument("--val-every", type=int, default=100, help="about one file in N goes to validation (default 100)")
    p.add_argument("--tokenizer-sample-mb", type=float, default=20.0,
                   help="MB of text the tokenizer is trained on (default 20)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    names = [s for s in args.sources.split(",") if s]
    unknown = [s for s in names if s not in SOURCES]
    if unknown:
        p.error(f"unknown source(s) {', '.join(unknown)}: choose from {', '.join(SOURCES)}")
    if not names and not args.input:
        p.error("nothing to read: give --sources or --input")
    if not 256 + 2 < args.vocab_size <= 1 << 20:
        p.error(f"--vocab-size must be in (258, 1048576] (byte fallback takes 256 pieces), got {args.vocab_size}")
    if args.val_every < 2:
        p.error(f"--val-every must be at least 2, got {args.val_every}")
    if not args.tokenizer_sample_mb > 0:
        p.error(f"--tokenizer-sample-mb must be > 0, got {args.tokenizer_sample_mb}")
    try:
        run(args, names)
    except PrepareError as e:
        print(f"prepare.py: {e}", file=sys.stderr)
        return 1
    return 0


def run(args, names):
    start = time.time()
    os.makedirs(args.out, exist_ok=True)
    docs = gather(names, args.input)
    train, val = split(docs, args.val_every)
    nbytes = sum(len(d[2].encode("utf-8")) for d in docs)
    print(f"corpus: {len(docs)} files, {nbytes / 1e6:.1f} MB ({len(val)} files held out)", flush=True)
    prefix = os.path.join(args.out, "tokenizer")
    sp = train_tokenizer(train, args.vocab_size, args.tokenizer_sample_mb, prefix, args.threads)
    print(f"tokenizer: {sp.get_piece_size()} BPE pieces ({time.time() - start:.0f} s)", flush=True)
    dtype = np.uint16 if sp.get_piece_size() <= 1 << 16 else np.int32
    counts = {}
    for name, part in (("train", train), ("val", val)):
        tokens = encode(sp, part, dtype, args.threads)
        tokens.tofile(os.path.join(args.out, f"{name}.bin"))
        counts[name] = int(tokens.size)
    per_source = {}
    for d in docs:
        s = per_source.setdefault(d[0], {"files": 0, "bytes": 0})
        s["files"] += 1
        s["bytes"] += len(d[2].encode("utf-8"))
    meta = dict(vocab_size=sp.get_piece_size(), dtype=np.dtype(dtype).name, eos_id=sp.eos_id(),
                train_tokens=counts["train"], val_tokens=counts["val"], bytes=nbytes, val_every=args.val_every,
                sources={k: dict(v, package=SOURCES[k][0] if k in SOURCES else None) for k, v in per_source.items()})
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"tokens: {counts['train']:,} train, {counts['val']:,} val ({nbytes / max(1, sum(counts.values())):.2f} "
          f"bytes/token) in {args.out} ({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
