// The reference's throughput on the same work as bench_tokenizer --mode docs:
// every *.txt file of a corpus directory (sorted by name), one encode() call
// per document, on node's one JavaScript thread, --repeats times. Each repeat
// loads a fresh copy of the module, so its word cache starts cold, as ours
// does. (One call on the whole 6 MB corpus is out of reach: the reference
// grows its output with Array.concat per word, which is quadratic.)
// usage: node bench/gpt3_encode_bench.js [CORPUS_DIR] [REPEATS]
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const encoderPath = path.join(root, 'deps', 'npm', 'node_modules', 'gpt-3-encoder', 'Encoder.js');
const corpus = process.argv[2] || path.join(root, 'data', 'brown', 'text');
const repeats = parseInt(process.argv[3] || '1', 10);

if (!fs.existsSync(encoderPath)) {
  process.stderr.write('gpt3_encode_bench: ' + encoderPath + ' is missing\n  hint: run scripts/fetch_data.sh\n');
  process.exit(2);
}
const names = fs.readdirSync(corpus).filter((n) => n.endsWith('.txt')).sort();
const docs = names.map((n) => fs.readFileSync(path.join(corpus, n), 'utf-8'));
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d, 'utf-8');
console.log('reference gpt-3-encoder on node ' + process.version + '; corpus ' + corpus + ': ' + bytes +
            ' bytes, one call per document');
const secs = [];
let tokens = -1;
for (let r = 0; r < repeats; r++) {
  delete require.cache[require.resolve(encoderPath)];
  const enc = require(encoderPath);
  const t0 = process.hrtime.bigint();
  let count = 0;
  for (const d of docs) count += enc.encode(d).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  if (tokens >= 0 && count !== tokens) {
    process.stderr.write('gpt3_encode_bench: repeat ' + (r + 1) + ' gave ' + count + ' tokens, not ' + tokens + '\n');
    process.exit(1);
  }
  tokens = count;
  secs.push(s);
  console.log('repeat ' + (r + 1) + ': ' + s.toFixed(4) + ' s, ' + (bytes / s / 1e6).toFixed(2) + ' MB/s, ' + count +
              ' tokens');
}
secs.sort((a, b) => a - b);
const m = secs.length;
const med = m % 2 ? secs[(m - 1) / 2] : 0.5 * (secs[m / 2 - 1] + secs[m / 2]);
console.log('RESULT impl=reference mode=docs bytes=' + bytes + ' tokens=' + tokens + ' median_s=' + med.toFixed(6) +
            ' median_mbps=' + (bytes / med / 1e6).toFixed(3));
