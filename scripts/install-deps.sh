#!/usr/bin/env bash
# Install every Debian package that traincache's build, tests, demo and benchmarks need.
# Idempotent: when everything is present it only says so. Needs root (or sudo) to install.
#   scripts/install-deps.sh          install what is missing
#   scripts/install-deps.sh --check  exit 1 (and list them) when packages are missing
#   scripts/install-deps.sh --fuzz   also clang-14 and libFuzzer, for make fuzz (with or without
#                                    --check, in either order)
. "$(dirname "$0")/help.sh"
set -euo pipefail

check=0
fuzz=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --fuzz) fuzz=1 ;;
    *) echo "install-deps: error: unknown option '$arg' (use --check and/or --fuzz)" >&2; exit 64 ;;
  esac
done

# Debian 12 (bookworm) and 13 (trixie) are supported; a few package names differ between them.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
case "$codename" in
  bookworm) clang_format=clang-format-14 fuzz_packages=(clang-14 libfuzzer-14-dev) host_packages=(debootstrap) ;;
  trixie) clang_format=clang-format fuzz_packages=() host_packages=() ;;
  *)
    echo "install-deps: error: Debian 12 (bookworm) or 13 (trixie) expected, this is '${codename:-unknown}'" >&2
    exit 69
    ;;
esac

PACKAGES=(
  build-essential cmake ninja-build git ccache pkg-config
  libtorch-dev libgloo-dev          # LibTorch (1.13 on Debian 12, 2.6 on 13, CPU) and Gloo for c10d
  libopenblas0-openmp               # LibTorch's BLAS: without it matrix products are ~30x slower
  libhdf5-dev libcli11-dev catch2 nlohmann-json3-dev libssl-dev libxxhash-dev
  libzip-dev                        # .npz archives (NumPy's zip of .npy members)
  libarchive-dev                    # WebDataset tar shards (.tar, .tar.gz), read as streams
  zlib1g-dev                        # CRC-32 checks of .npz members
  libturbojpeg0-dev libspng-dev      # JPEG (libjpeg-turbo's TurboJPEG) and PNG decoding
  libjpeg-dev                       # libjpeg-turbo's libjpeg API: decoding only the part of a photo a crop reads
  libdeflate-dev                    # inflating PNG photos (8-bit grey and RGB) faster than libspng's zlib
  qemu-user                         # the image tests on emulated AVX2-only and SSE2-only CPUs (tests/CMakeLists.txt)
  libexif-dev                       # EXIF orientation, for --exif-transpose
  libutf8proc-dev libpcre2-dev      # tokenizers: Unicode categories/normalisation, \p{L} regexes
  libsentencepiece-dev sentencepiece python3-sentencepiece  # .model files; spm_train and the parity reference
  wordnet-base                      # WordNet glosses: tokenizer fixtures and the text demo
  python3 python3-torch python3-h5py python3-numpy   # fixtures, encoder export, h5py read-back
  python3-pil python3-torchvision   # the reference image pipeline in the parity test and benchmark
  python3-matplotlib                # scripts/plot-bench
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install ./python into a venv (docs/python.md)
  dataset-fashion-mnist             # demo data
  jq                                # the docs' shell examples pipe --json through it (cli.docs_shell)
  "$clang_format"                   # make format, and the lint.format test (clang-format 14's style)
)
# make test-debian13 (CI's second leg) makes its Debian 13 root with debootstrap.
PACKAGES+=("${host_packages[@]}")
# Hugging Face's tokenizers, the tokenizer parity tests' reference, is not needed: its ids are
# committed (tests/data/hf-reference). make test-pip, make test-tokenizers and make bench compare
# with it live, from PyPI in the virtual environment that scripts/pip-env makes.
if [ "$fuzz" -eq 1 ]; then
  if [ "${#fuzz_packages[@]}" -eq 0 ]; then
    echo "install-deps: error: --fuzz: make fuzz is set up for Debian 12's clang-14 and libFuzzer" >&2
    exit 69
  fi
  PACKAGES+=("${fuzz_packages[@]}")  # make fuzz: libFuzzer harnesses built with clang
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  [ "$check" -eq 1 ] || echo "install-deps: all ${#PACKAGES[@]} packages are installed" >&2
  exit 0
fi
if [ "$check" -eq 1 ]; then
  echo "install-deps: missing: ${missing[*]}" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: error: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
