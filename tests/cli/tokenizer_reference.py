#!/usr/bin/env python3
"""Tokenizers.js's token ids for a tokenizer.json and a JSON Lines file of strings: the reference
of the tokenizer parity tests, committed under tests/data/js-reference so that `make test` needs
no node, npm or registry.

usage: js_reference.py TOKENIZER.json STRINGS.jsonl

Prints one JSON array of ids per string (special tokens added, no truncation), as
tests/js/reference.mjs does. The committed ids are found by the SHA-256 of both input files, so
ids made from other fixture files are never used: a changed tokenizer or string generator is an
error naming what to run. TRAINCACHE_JS selects another source:
  (unset)   the committed ids
  live      run Tokenizers.js (node tests/js/reference.mjs; make test-js)
  record    run Tokenizers.js and store its ids under tests/data/js-reference (scripts/make-js-reference)
"""
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
STORE = os.path.join(SOURCE, "tests", "data", "js-reference")
SCRIPT = os.path.join(SOURCE, "tests", "js", "reference.mjs")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tokenizers_js_version():
    with open(os.path.join(SOURCE, "tests", "js", "package.json")) as f:
        return json.load(f)["dependencies"]["@huggingface/tokenizers"]


def live(tokenizer, strings):
    p = subprocess.run(["node", SCRIPT, tokenizer, strings], stdout=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("js_reference: error: node %s: exit %d (scripts/install-js-deps.sh installs Tokenizers.js)"
                 % (SCRIPT, p.returncode))
    return p.stdout


def record(name, tokenizer, strings, ids):
    """Stores ids as NAME.ids.gz and its provenance as NAME.json, each renamed into place."""
    os.makedirs(STORE, exist_ok=True)
    meta = {"tokenizer": os.path.basename(tokenizer), "tokenizer_sha256": sha256(tokenizer),
            "strings": os.path.basename(strings), "strings_sha256": sha256(strings),
            "tokenizers_js": tokenizers_js_version(), "lines": ids.count(b"\n")}
    blobs = ((name + ".ids.gz", gzip.compress(ids, 9, mtime=0)),
             (name + ".json", (json.dumps(meta, indent=1) + "\n").encode()))
    for file_name, data in blobs:
        fd, tmp = tempfile.mkstemp(dir=STORE, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(STORE, file_name))


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 64
    tokenizer, strings = sys.argv[1:]
    name = sha256(tokenizer)[:16] + "-" + sha256(strings)[:16]
    mode = os.environ.get("TRAINCACHE_JS", "")
    if mode in ("live", "record"):
        ids = live(tokenizer, strings)
        if mode == "record":
            record(name, tokenizer, strings, ids)
    elif mode:
        sys.exit("js_reference: error: TRAINCACHE_JS=%s: unknown (use live or record)" % mode)
    else:
        path = os.path.join(STORE, name + ".ids.gz")
        if not os.path.exists(path):
            sys.exit("js_reference: error: no committed Tokenizers.js ids for %s on %s (%s): the fixture "
                     "or the strings changed; scripts/make-js-reference remakes them (needs node and npm)"
                     % (os.path.basename(tokenizer), os.path.basename(strings), name))
        with gzip.open(path, "rb") as f:
            ids = f.read()
    sys.stdout.buffer.write(ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
