#!/bin/bash
# GPT-2 tokenization speed: skiff-train's C BPE against the npm package
# gpt-3-encoder's own JavaScript encoder (the reference of
# tests/integration/trainer-gpt2-bpe.sh) under node, on the same documents:
# the Debian fortunes corpus, one document per fortune. tokens/s counts the
# encode calls alone (each side times its own; file reading and shard writing
# excluded), median of RUNS (3) runs; the token sequences are checked equal.
# Prints a markdown table. Needs `make gpt2-bpe`, node and Debian's fortunes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
TRAIN=${SKIFF_TRAIN:-$BUILD/bin/skiff-train}
PKG=$BUILD/npm/package
RUNS=${RUNS:-3}
export SKIFF_GPT2_BPE=$BUILD/share/skiff/gpt2-bpe.bin
for need in "$SKIFF_GPT2_BPE" "$PKG/Encoder.js" /usr/share/games/fortunes; do
  [ -e "$need" ] || { echo "bench: $need is missing (make gpt2-bpe; Debian fortunes)" >&2; exit 1; }
done
command -v node >/dev/null || { echo "bench: node is not installed" >&2; exit 1; }
W=$(mktemp -d /tmp/skiff-tok-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
mapfile -t files < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
bytes=$(cat "${files[@]}" | wc -c)

rate() { grep -o '[0-9]* tokens/s' "$1" | cut -d' ' -f1; }
ntok() { sed -n 's/^encoded \([0-9]*\) tokens.*/\1/p' "$1"; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
c=() js=()
for ((i = 0; i < RUNS; i++)); do
  rm -rf "$W/c"
  "$TRAIN" tokenize --tokenizer gpt2 --val-frac 0 --doc-sep % --out "$W/c/f" "${files[@]}" >"$W/c.log" || exit 1
  node "$ROOT/tests/integration/lib/gpt2-reference.js" "$PKG" "$W/js.bin" --doc-sep % "${files[@]}" >"$W/js.log" || exit 1
  c+=("$(rate "$W/c.log")") js+=("$(rate "$W/js.log")")
done
same=no; cmp -s "$W/c/f_train_000000.bin" "$W/js.bin" && same=yes
mc=$(printf '%s\n' "${c[@]}" | median) mj=$(printf '%s\n' "${js[@]}" | median)
echo "### GPT-2 BPE encoding, Debian fortunes ($((bytes / 1024)) KiB, ${#files[@]} files, one document per fortune; $RUNS runs, median; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| encoder | tokens | tokens/s (median) | runs | vs npm gpt-3-encoder | same tokens |"
echo "|---|---:|---:|---|---:|---|"
echo "| skiff-train tokenize --tokenizer gpt2 (C) | $(ntok "$W/c.log") | $mc | ${c[*]} | $(awk -v a="$mc" -v b="$mj" 'BEGIN { printf "%.1fx", a / b }') | $same |"
echo "| npm gpt-3-encoder 1.1.4 encode() (node $(node --version)) | $(ntok "$W/js.log") | $mj | ${js[*]} | 1.0x | |"
