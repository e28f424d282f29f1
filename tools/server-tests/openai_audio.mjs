// Exercises `lfm serve`'s audio endpoints on an LFM2-Audio model through the official OpenAI client
// and prints one JSON object of what it got, for tests/server_audio_test.cpp to check.
// Usage: node openai_audio.mjs URL WAV_FILE (e.g. http://127.0.0.1:PORT/v1 /tmp/x/tone.wav).
import fs from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const wav = process.argv[3];
const model = (await client.models.list()).data[0].id;
const out = {};
const json = await client.audio.transcriptions.create({ model, file: fs.createReadStream(wav) });
out.json = json;
out.text = await client.audio.transcriptions.create({ model, file: fs.createReadStream(wav), response_format: "text" });
out.verbose = await client.audio.transcriptions.create({
  model, file: fs.createReadStream(wav), response_format: "verbose_json", language: "en", temperature: 0 });
out.srt = await client.audio.transcriptions.create({ model, file: fs.createReadStream(wav), response_format: "srt" });
const stream = await client.audio.transcriptions.create({ model, file: fs.createReadStream(wav), stream: true });
out.stream = { deltas: "", done: null };
for await (const ev of stream) {
  if (ev.type === "transcript.text.delta") out.stream.deltas += ev.delta;
  if (ev.type === "transcript.text.done") out.stream.done = ev;
}
out.translation = await client.audio.translations.create({ model, file: fs.createReadStream(wav) });
const chat = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 8,
  messages: [{ role: "user", content: [
    { type: "input_audio", input_audio: { data: fs.readFileSync(wav).toString("base64"), format: "wav" } },
    { type: "text", text: "What is this?" }] }],
});
out.chat = { content: chat.choices[0].message.content, usage: chat.usage };
try {
  await client.audio.transcriptions.create({ model, file: new File([Buffer.from("not audio at all")], "x.wav") });
  out.bad = "accepted";
} catch (e) {
  out.bad = { status: e.status, param: e.param ?? e.error?.param, message: e.message };
}
console.log(JSON.stringify(out));
