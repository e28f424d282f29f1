// Exercises /v1/embeddings of `lfm serve` on a retriever through the official OpenAI client and
// prints one JSON object of what it got, for tests/server_embeddings_test.cpp to check.
// Usage: node openai_embeddings.mjs URL IDS_JSON (e.g. http://127.0.0.1:PORT/v1 '[[1,5],[1,6,7]]').
// The client asks for base64 by default and decodes it itself; float is asked for explicitly too.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const input = JSON.parse(process.argv[3]);
const model = (await client.models.list()).data[0].id;
const out = {};
const b64 = await client.embeddings.create({ model, input });
out.base64 = { data: b64.data.map((d) => ({ index: d.index, embedding: Array.from(d.embedding) })), usage: b64.usage,
  model: b64.model };
const flt = await client.embeddings.create({ model, input, encoding_format: "float" });
out.float = { data: flt.data.map((d) => ({ index: d.index, embedding: d.embedding })), usage: flt.usage };
try {
  await client.embeddings.create({ model, input: [] });
  out.empty = "accepted";
} catch (e) {
  out.empty = { status: e.status, message: e.message };
}
console.log(JSON.stringify(out));
