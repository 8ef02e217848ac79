#!/usr/bin/env python3
"""Hugging Face tokenizers' token ids (the Rust library, from PyPI) for a tokenizer.json and a JSON
Lines file of strings: the reference of the tokenizer parity tests. Its ids are committed under
tests/data/hf-reference, so that `make test` needs no PyPI package.

usage: tokenizer_reference.py TOKENIZER.json STRINGS.jsonl [--time]

Prints one JSON array of ids per string (special tokens added, no truncation). With --time (live
only), prints instead {"texts", "tokens", "seconds", "tokens_per_second"} of one encode_batch call
on one thread. The committed ids are found by the SHA-256 of both input files, so ids made from
other fixture files are never used: a changed tokenizer or string generator is an error naming what
to run. TRAINCACHE_TOKENIZERS selects the source:
  (unset)   the committed ids
  live      run tokenizers (make test-tokenizers; make test-pip's text tests)
  record    run tokenizers and store its ids under tests/data/hf-reference (scripts/make-tokenizer-reference)
Live and recorded runs import tokenizers in this Python, or else in TRAINCACHE_TOKENIZERS_PYTHON's
(scripts/pip-env makes one).
"""
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
STORE = os.path.join(SOURCE, "tests", "data", "hf-reference")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def encode(tokenizer, strings, timed):
    """(ids as JSON Lines bytes or the timing record, tokenizers' version), in this Python."""
    os.environ["RAYON_NUM_THREADS"] = "1"  # one thread, before the library starts its pool
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(tokenizer)
    with open(strings, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    if timed:
        tok.encode(texts[0])
        start = time.perf_counter()
        tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
        seconds = time.perf_counter() - start
        out = {"texts": len(texts), "tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds}
        return (json.dumps(out) + "\n").encode(), tokenizers.__version__
    ids = "".join(json.dumps(e.ids, separators=(",", ":")) + "\n" for e in tok.encode_batch(texts))
    return ids.encode(), tokenizers.__version__


def live(tokenizer, strings, timed):
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        other = os.environ.get("TRAINCACHE_TOKENIZERS_PYTHON")
        if not other:
            sys.exit("tokenizer_reference: error: tokenizers: not installed in %s (pip install tokenizers, or set "
                     "TRAINCACHE_TOKENIZERS_PYTHON to a Python that has it: scripts/pip-env makes one)"
                     % sys.executable)
        code = ("import sys; sys.path.insert(0, %r); import tokenizer_reference as r; ids, v = r.encode(%r, %r, %r); "
                "sys.stderr.write(v + '\\n'); sys.stdout.buffer.write(ids)" % (HERE, tokenizer, strings, timed))
        p = subprocess.run([other, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if p.returncode != 0:
            sys.exit("tokenizer_reference: error: %s: exit %d: %s" % (other, p.returncode, p.stderr.decode()[-500:]))
        return p.stdout, p.stderr.decode().strip().splitlines()[-1]
    return encode(tokenizer, strings, timed)


def record(name, tokenizer, strings, ids, version):
    """Stores ids as NAME.ids.gz and its provenance as NAME.json, each renamed into place."""
    os.makedirs(STORE, exist_ok=True)
    meta = {"tokenizer": os.path.basename(tokenizer), "tokenizer_sha256": sha256(tokenizer),
            "strings": os.path.basename(strings), "strings_sha256": sha256(strings),
            "tokenizers": version, "lines": ids.count(b"\n")}
    blobs = ((name + ".ids.gz", gzip.compress(ids, 9, mtime=0)),
             (name + ".json", (json.dumps(meta, indent=1) + "\n").encode()))
    for file_name, data in blobs:
        fd, tmp = tempfile.mkstemp(dir=STORE, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(STORE, file_name))


def committed(name, tokenizer, strings):
    path = os.path.join(STORE, name + ".ids.gz")
    if not os.path.exists(path):
        sys.exit("tokenizer_reference: error: no committed tokenizers ids for %s on %s (%s): the fixture or the "
                 "strings changed; scripts/make-tokenizer-reference remakes them" % (
                     os.path.basename(tokenizer), os.path.basename(strings), name))
    with gzip.open(path, "rb") as f:
        return f.read()


def main():
    args = sys.argv[1:]
    timed = args[-1:] == ["--time"]
    if timed:
        args = args[:-1]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 64
    tokenizer, strings = args
    name = sha256(tokenizer)[:16] + "-" + sha256(strings)[:16]
    mode = os.environ.get("TRAINCACHE_TOKENIZERS", "")
    if mode not in ("", "live", "record"):
        sys.exit("tokenizer_reference: error: TRAINCACHE_TOKENIZERS=%s: unknown (use live or record)" % mode)
    if timed and mode != "live":
        sys.exit("tokenizer_reference: error: --time needs TRAINCACHE_TOKENIZERS=live")
    if mode:
        ids, version = live(tokenizer, strings, timed)
        if mode == "record":
            record(name, tokenizer, strings, ids, version)
    else:
        ids = committed(name, tokenizer, strings)
    sys.stdout.buffer.write(ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
