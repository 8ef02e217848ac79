// Token ids from Tokenizers.js (@huggingface/tokenizers), the parity reference.
// usage: node reference.mjs TOKENIZER.json STRINGS.jsonl [--time]
// Each line of STRINGS.jsonl is one JSON string; each output line is its ids as a JSON array
// (special tokens added, no truncation). With --time, prints one JSON object instead:
// {"texts": N, "tokens": T, "seconds": S, "tokens_per_second": R}.
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath, stringsPath, flag] = process.argv.slice(2);
if (!tokenizerPath || !stringsPath) {
  process.stderr.write("usage: node reference.mjs TOKENIZER.json STRINGS.jsonl [--time]\n");
  process.exit(64);
}
const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const texts = readFileSync(stringsPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
if (flag === "--time") {
  tokenizer.encode(texts[0]);
  const start = process.hrtime.bigint();
  let tokens = 0;
  for (const t of texts) tokens += tokenizer.encode(t).ids.length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  process.stdout.write(JSON.stringify({ texts: texts.length, tokens, seconds, tokens_per_second: tokens / seconds }) + "\n");
} else {
  const out = texts.map((t) => JSON.stringify(tokenizer.encode(t).ids));
  process.stdout.write(out.join("\n") + "\n");
}
