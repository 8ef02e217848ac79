#!/usr/bin/env bash
# Installs Tokenizers.js (@huggingface/tokenizers, pinned in tests/js/package-lock.json) into
# tests/js/node_modules: the reference of the tokenizer parity tests. Idempotent: nothing happens
# when the pinned version is there. Needs node and npm (Debian: nodejs npm) and the npm registry;
# used by make test-js, make js-reference and make bench, not by make test (the ids are committed).
. "$(dirname "$0")/help.sh"
set -euo pipefail
cd "$(dirname "$0")/../tests/js"
want=$(sed -n 's/.*"@huggingface\/tokenizers": "\(.*\)".*/\1/p' package.json)
have=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' node_modules/@huggingface/tokenizers/package.json 2>/dev/null || true)
[ "$have" = "$want" ] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "install-js-deps: error: npm: not found (install Debian's nodejs and npm; make test-js and make bench need them)" >&2
  exit 69
fi
echo "install-js-deps: installing @huggingface/tokenizers $want into tests/js/node_modules" >&2
npm ci --no-audit --no-fund --loglevel=error >&2
