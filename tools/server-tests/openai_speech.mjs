// Exercises `lfm serve`'s /v1/audio/speech on an LFM2.5-Audio model through the official OpenAI
// client and writes what it got, for tests/server_speech_test.cpp to check: the audio files it
// received (OUT_DIR/speech.wav, speech.flac, speech_sse.wav) and one JSON object on stdout.
// Usage: node openai_speech.mjs URL OUT_DIR (e.g. http://127.0.0.1:PORT/v1 /tmp/x).
import fs from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const dir = process.argv[3];
const listed = (await client.models.list()).data[0];
const model = listed.id;
const out = { voices: listed.voices ?? null };
const input = "Hello from the test.";

// The whole answer, read as the SDK's users do (a binary Response).
for (const format of ["wav", "flac"]) {
  const speech = await client.audio.speech.create({ model, input, voice: "uk_male", response_format: format, seed: 3 });
  const bytes = Buffer.from(await speech.arrayBuffer());
  fs.writeFileSync(`${dir}/speech.${format}`, bytes);
  out[format] = { status: speech.status, type: speech.headers.get("content-type"), bytes: bytes.length };
}
// Server-sent events (stream_format is passed through as a body field).
const sse = await client.audio.speech.create({
  model, input, voice: "uk_male", response_format: "wav", stream_format: "sse", seed: 3 });
const text = await sse.text();
const chunks = [];
let done = null;
for (const line of text.split("\n")) {
  if (!line.startsWith("data: ")) continue;
  const ev = JSON.parse(line.slice(6));
  if (ev.type === "speech.audio.delta") chunks.push(Buffer.from(ev.audio, "base64"));
  if (ev.type === "speech.audio.done") done = ev;
}
fs.writeFileSync(`${dir}/speech_sse.wav`, Buffer.concat(chunks));
out.sse = { type: sse.headers.get("content-type"), deltas: chunks.length, done };
// OpenAI's voice names are not the model's: a 400 naming the field.
try {
  await client.audio.speech.create({ model, input, voice: "alloy" });
  out.bad = "accepted";
} catch (e) {
  out.bad = { status: e.status, param: e.param ?? e.error?.param, message: e.message };
}
console.log(JSON.stringify(out));
