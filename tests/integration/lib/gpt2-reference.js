// The reference side of tests/integration/trainer-gpt2-bpe.sh: the npm
// package gpt-3-encoder's own encode() (its Encoder.js, unmodified) turns
// each document of the input files into GPT-2 tokens, written in the shard
// layout `skiff-train tokenize` writes (llm.c's: 256 int32 header, uint16
// tokens; every document starts with <|endoftext|> = 50256).
//   node gpt2-reference.js PACKAGE_DIR OUT.bin [--doc-sep LINE] FILE...
// Documents are split exactly as skiff-train splits them: whole files, or
// the blocks between lines equal to --doc-sep. Prints the tokens per second
// of the encode() calls alone.
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, out, ...rest] = process.argv.slice(2);
let sep = null;
if (rest[0] === '--doc-sep') { sep = rest[1]; rest.splice(0, 2); }
const { encode } = require(path.resolve(pkg, 'Encoder.js'));

function docs(text) {
  if (sep === null) return text.length ? [text] : [];
  const found = [];
  let pos = 0;
  while (pos < text.length) {
    let end = text.length, next = text.length;
    for (let q = pos; q < text.length;) {
      const after = q + sep.length;
      if (text.startsWith(sep, q) && (after === text.length || text[after] === '\n')) {
        end = q;
        next = after + (after < text.length ? 1 : 0);
        break;
      }
      const nl = text.indexOf('\n', q);
      q = nl < 0 ? text.length : nl + 1;
    }
    if (end > pos) found.push(text.slice(pos, end));
    pos = next;
  }
  return found;
}

const chunks = [];
let ntok = 0, ns = 0n;
for (const f of rest) {
  for (const d of docs(fs.readFileSync(f, 'utf-8'))) {
    const t0 = process.hrtime.bigint();
    const ids = encode(d);
    ns += process.hrtime.bigint() - t0;
    for (const id of ids) {
      if (!Number.isInteger(id)) throw new Error(`${f}: encode() gave ${id}`);
    }
    chunks.push([50256], ids);
    ntok += ids.length;
  }
}
const all = [].concat(...chunks);
const buf = Buffer.alloc(1024 + 2 * all.length);
buf.writeInt32LE(20240520, 0);
buf.writeInt32LE(1, 4);
buf.writeInt32LE(all.length, 8);
all.forEach((t, i) => buf.writeUInt16LE(t, 1024 + 2 * i));
fs.writeFileSync(out, buf);
const s = Number(ns) / 1e9;
console.log(`encoded ${ntok} tokens in ${s.toFixed(3)} s: ${Math.round(ntok / s)} tokens/s`);
