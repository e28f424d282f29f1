// Exercises `lfm serve`'s spoken chat (modalities ["text", "audio"]) on an LFM2-Audio model with
// speech output through the official OpenAI client and prints one JSON object of what it got, for
// tests/server_speech_chat_test.cpp to check.
// Usage: node openai_speech_chat.mjs URL (e.g. http://127.0.0.1:PORT/v1).
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const ask = { model, modalities: ["text", "audio"], audio: { voice: "us_female", format: "wav" },
              max_tokens: 30, temperature: 0, seed: 5 };
const messages = [{ role: "user", content: "Hello there." }];
const out = {};
const whole = await client.chat.completions.create({ ...ask, messages });
out.whole = { content: whole.choices[0].message.content, audio: whole.choices[0].message.audio, usage: whole.usage };
const stream = await client.chat.completions.create({ ...ask, messages, stream: true });
out.stream = { transcript: "", data: "", ids: [], expires_at: 0 };
for await (const chunk of stream) {
  const audio = chunk.choices[0]?.delta?.audio;
  if (!audio) continue;
  if (audio.id && !out.stream.ids.includes(audio.id)) out.stream.ids.push(audio.id);
  if (audio.transcript) out.stream.transcript += audio.transcript;
  if (audio.data) out.stream.data += audio.data;
  if (audio.expires_at) out.stream.expires_at = audio.expires_at;
}
const second = await client.chat.completions.create({
  ...ask, messages: [...messages, { role: "assistant", audio: { id: whole.choices[0].message.audio.id } },
                     { role: "user", content: "Go on." }] });
out.second = { audio: second.choices[0].message.audio, usage: second.usage };
try {
  await client.chat.completions.create({
    ...ask, messages: [...messages, { role: "assistant", audio: { id: "audio_gone" } }, { role: "user", content: "?" }] });
  out.bad = "accepted";
} catch (e) {
  out.bad = { status: e.status, param: e.param ?? e.error?.param, message: e.message };
}
console.log(JSON.stringify(out));
