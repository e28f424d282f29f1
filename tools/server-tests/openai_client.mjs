// Exercises `lfm serve` through the official OpenAI client and prints one JSON object of what it
// got, for tests/server_test.cpp to check.
// Usage: node openai_client.mjs TEXT_MODEL_URL TOOL_MODEL_URL [VL_MODEL_URL IMAGE.png]
// (e.g. http://127.0.0.1:PORT/v1). The second server runs a model scripted to answer with a
// get_time(tz=1) call; the optional third serves an LFM2-VL model, sent IMAGE.png as an image_url.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const toolClient = new OpenAI({ baseURL: process.argv[3], apiKey: "unused", maxRetries: 0 });
const out = {};
const messages = [{ role: "user", content: "What time is it?" }];
const tools = [{ type: "function", function: { name: "get_time", description: "Current time",
  parameters: { type: "object", properties: { tz: { type: "integer" } } } } }];

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
const model = models.data[0].id;  // any other name is 404 model_not_found
const toolModel = (await toolClient.models.list()).data[0].id;

const chat = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 12 });
out.chat = { content: chat.choices[0].message.content, finish: chat.choices[0].finish_reason, usage: chat.usage };

let streamed = "";
let usage = null;
let finish = null;
const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 12,
  stream: true, stream_options: { include_usage: true } });
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length) {
    streamed += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
}
out.chat_stream = { content: streamed, finish, usage };

const tc = await toolClient.chat.completions.create({ model: toolModel, messages, tools, tool_choice: "auto", temperature: 0 });
out.tool_call = { message: tc.choices[0].message, finish: tc.choices[0].finish_reason };

const toolStream = await toolClient.chat.completions.create({ model: toolModel, messages, tools, stream: true, temperature: 0,
  tool_choice: { type: "function", function: { name: "get_time" } } });
const calls = [];
let toolFinish = null;
for await (const chunk of toolStream) {
  const d = chunk.choices[0]?.delta;
  for (const c of d?.tool_calls ?? []) calls.push(c);
  toolFinish = chunk.choices[0]?.finish_reason ?? toolFinish;
}
out.tool_stream = { calls, finish: toolFinish };

// Structured output (issue 38): a JSON schema as response_format, and a strict tool forced with
// tool_choice "required", on the random text model at temperature 1.
const weather = { type: "object", additionalProperties: false, required: ["city", "days", "metric"],
  properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 9 },
    metric: { type: "boolean" } } };
const rf = await client.chat.completions.create({ model, messages, temperature: 1, seed: 5, max_tokens: 60,
  response_format: { type: "json_schema", json_schema: { name: "weather", schema: weather, strict: true } } });
out.response_format = { content: rf.choices[0].message.content, finish: rf.choices[0].finish_reason };
const strictTools = [{ type: "function", function: { name: "get_weather", strict: true, parameters: weather } }];
const st = await client.chat.completions.create({ model, messages, tools: strictTools, tool_choice: "required",
  temperature: 1, seed: 3, max_tokens: 80 });
out.strict_tool = { message: st.choices[0].message, finish: st.choices[0].finish_reason };

const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
out.completion = { text: comp.choices[0].text, finish: comp.choices[0].finish_reason };
let compStreamed = "";
for await (const chunk of await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8,
  temperature: 0, stream: true })) compStreamed += chunk.choices[0]?.text ?? "";
out.completion_stream = compStreamed;

try {
  await client.chat.completions.create({ model, messages: [], max_tokens: 1 });
  out.bad_request = "no error";
} catch (e) {
  out.bad_request = { status: e.status, message: e.error?.message ?? String(e) };
}
if (process.argv[4]) {
  const vl = new OpenAI({ baseURL: process.argv[4], apiKey: "unused", maxRetries: 0 });
  const vlModel = (await vl.models.list()).data[0].id;
  const url = "data:image/png;base64," + readFileSync(process.argv[5]).toString("base64");
  const imageMessages = [{ role: "user", content: [{ type: "image_url", image_url: { url } },
    { type: "text", text: "Describe this." }] }];
  const ic = await vl.chat.completions.create({ model: vlModel, messages: imageMessages, temperature: 0,
    max_tokens: 12, ignore_eos: true });
  out.image = { content: ic.choices[0].message.content, finish: ic.choices[0].finish_reason, usage: ic.usage };
  try {
    await vl.chat.completions.create({ model: vlModel, max_tokens: 1, messages: [{ role: "user",
      content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }] }] });
    out.image_error = "no error";
  } catch (e) {
    out.image_error = { status: e.status, param: e.error?.param ?? null, message: e.error?.message ?? String(e) };
  }
}
console.log(JSON.stringify(out));
