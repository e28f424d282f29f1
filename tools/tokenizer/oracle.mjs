// Independent reference for the lfm tokenizer tests: encodes strings with Hugging Face's
// tokenizers.js (@huggingface/tokenizers), loading tokenizer.json from disk (no network).
//
// usage: node oracle.mjs TOKENIZER_JSON < strings.json > results.json
//   stdin:  a JSON array of strings
//   stdout: a JSON array, per string: {"with_special": [ids], "without_special": [ids],
//           "decoded": text of decode(with_special ids)}
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokenizerPath] = process.argv.slice(2);
if (!tokenizerPath) {
  console.error("usage: node oracle.mjs TOKENIZER_JSON < strings.json");
  process.exit(2);
}
const tokenizerJson = JSON.parse(readFileSync(tokenizerPath, "utf8"));
// clean_up_tokenization_spaces would rewrite " ." etc.; LFM2 turns it off for decoding.
const tokenizer = new Tokenizer(tokenizerJson, { clean_up_tokenization_spaces: false });

const strings = JSON.parse(readFileSync(0, "utf8"));
const results = strings.map((text) => {
  const withSpecial = tokenizer.encode(text, { add_special_tokens: true }).ids;
  const withoutSpecial = tokenizer.encode(text, { add_special_tokens: false }).ids;
  return {
    with_special: withSpecial,
    without_special: withoutSpecial,
    decoded: withSpecial.length ? tokenizer.decode(withSpecial, { skip_special_tokens: false }) : "",
  };
});
process.stdout.write(JSON.stringify(results));
