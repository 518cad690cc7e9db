#!/usr/bin/env node
// The reference for `ctrain tokenize --render`: renders chat templates with
// @huggingface/jinja (the Jinja transformers.js uses; deps/npm, installed by
// scripts/fetch_data.sh), with the variables transformers.js passes to
// apply_chat_template: messages, add_generation_prompt, tools and documents
// (null unless given), the special tokens of the config (bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token: a string
// or an AddedToken's "content", when non-empty), then the keyword arguments.
//
// usage: node chat_render.js CONFIG.json [--generation-prompt] < conversations
//   CONFIG.json  a tokenizer_config.json (chat_template: a string, or a list
//                of {name, template} whose "default" is taken)
//   stdin        one conversation per line: a JSON array of messages, or an
//                object {"messages", "tools", "chat_template_kwargs"} as TRL's
//                datasets hold them (the kwargs are apply_chat_template's)
// stdout: per line, the rendered text as a JSON string, or {"error": MESSAGE}
// when the template (or the parser) throws.
"use strict";
const fs = require("fs");
const path = require("path");

const ROOT = path.resolve(__dirname, "..", "..");
const { Template } = require(path.join(ROOT, "deps", "npm", "node_modules", "@huggingface", "jinja"));

const SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function main() {
  const args = process.argv.slice(2);
  const agp = args.includes("--generation-prompt");
  const file = args.find((a) => !a.startsWith("--"));
  if (!file) {
    process.stderr.write("usage: node chat_render.js CONFIG.json [--generation-prompt] < conversations\n");
    process.exit(2);
  }
  const config = JSON.parse(fs.readFileSync(file, "utf8"));
  let source = config.chat_template;
  if (Array.isArray(source)) source = source.find((t) => t.name === "default").template;
  const tokens = {};
  for (const key of SPECIAL) {
    let v = config[key];
    if (v && typeof v === "object") v = v.content;
    if (typeof v === "string" && v) tokens[key] = v;
  }
  let template = null;
  let parseError = null;
  try {
    template = new Template(source);
  } catch (e) {
    parseError = String(e.message);
  }
  const lines = fs.readFileSync(0, "utf8").split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const out = [];
  for (const line of lines) {
    if (parseError !== null) {
      out.push(JSON.stringify({ error: parseError }));
      continue;
    }
    try {
      const conv = JSON.parse(line);
      const messages = Array.isArray(conv) ? conv : conv.messages;
      const tools = Array.isArray(conv) ? null : conv.tools ?? null;
      const kwargs = Array.isArray(conv) ? {} : conv.chat_template_kwargs ?? {};
      const text = template.render({
        messages, add_generation_prompt: agp, tools, documents: null, ...tokens, ...kwargs,
      });
      out.push(JSON.stringify(text));
    } catch (e) {
      out.push(JSON.stringify({ error: String(e.message) }));
    }
  }
  process.stdout.write(out.length ? out.join("\n") + "\n" : "");
}

main();
