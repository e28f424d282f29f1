// Load test and serving benchmark for an OpenAI-compatible server (lfm serve or llama-server).
//   node load.mjs bench URL [--concurrency 1,4,16] [--requests 32] [--prompt 128 | LO-HI] [--max-tokens 64]
//                          [--vocab N (prompt ids below N)] [--ban-undecodable VOCAB_SIZE [--ban-file F]]
//                          [--native 1 (llama-server's /completion)]
//       per concurrency: generated tokens/s, TTFT and inter-token latency p50/p95/p99 (streamed
//       /v1/completions with random token-id prompts, of --prompt tokens or uniformly LO to HI;
//       ignore_eos so every request runs in full)
//   node load.mjs load URL [--requests 200] [--concurrency 32] [--rounds 3] [--pid PID]
//       mixed prompt/output lengths (token ids below --vocab, default 32000); fails on any error; after each round prints the server's
//       running requests and KV blocks in use (/metrics) and its RSS (/proc/PID/status)
import { existsSync, readFileSync, writeFileSync } from "node:fs";

const [mode, base, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = rest[i + 1];
const num = (k, d) => (opt[k] === undefined ? d : Number(opt[k]));
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

// --ban-undecodable V: logit_bias -100 on every id below V (the model's vocabulary size) that is a
// special token or does not decode to whole UTF-8 on its own, found by asking the server's
// /detokenize (lfm serve and llama-server both have it). Random weights emit such byte fragments,
// which llama-server's output parser rejects mid-stream (HTTP 500); both servers get the same list.
let ban = {};
async function findUndecodable(vocabSize) {
  const bad = [];
  let next = 0;
  async function worker() {
    while (next < vocabSize) {
      const id = next++;
      const r = await fetch(`${base}/detokenize`, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ tokens: [id] }) });
      const text = r.status === 200 ? (await r.json()).content ?? "" : "";
      if (text === "" || text.includes("\uFFFD") || /^<\|.*\|>$/.test(text)) bad.push(id);
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker));
  return bad;
}

async function oneRequest(prompt, maxTokens) {
  const t0 = performance.now();
  // --native: llama-server's own /completion endpoint (its OpenAI route rejects some random
  // outputs while streaming); one SSE event per token either way.
  const native = opt.native !== undefined;
  const res = await fetch(`${base}${native ? "/completion" : "/v1/completions"}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(native
      ? { prompt, n_predict: maxTokens, temperature: 0, stream: true, ignore_eos: true, cache_prompt: false,
          logit_bias: Object.keys(ban).map((id) => [Number(id), false]) }
      : { prompt, max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
          ...(Object.keys(ban).length ? { logit_bias: ban } : {}) }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!frame.startsWith("data: ")) continue;
      const data = frame.slice(6);
      if (data === "[DONE]") continue;
      const j = JSON.parse(data);
      if (j.error) throw new Error(JSON.stringify(j.error));
      // One event per generated token; the closing event (finish_reason set, no text) is not one.
      if (native) {
        if (j.stop) continue;
      } else {
        const c = j.choices?.[0];
        if (!c || (c.finish_reason && !c.text)) continue;
      }
      times.push(performance.now());
    }
  }
  return { ttft: times[0] - t0, itl: times.slice(1).map((t, i) => t - times[i]), tokens: times.length };
}

async function runPool(jobs, concurrency) {
  const results = [];
  let next = 0;
  async function worker() {
    while (next < jobs.length) {
      const job = jobs[next++];
      results.push(await oneRequest(job.prompt, job.maxTokens));
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : 0;
};
const vocab = num("vocab", 32000);
const randomPrompt = (n) => Array.from({ length: n }, () => 2 + Math.floor(rand() * (vocab - 2)));

if (mode === "bench") {
  if (opt["ban-undecodable"]) {
    // --ban-file F: reuse the list from an earlier scan (same tokenizer), or save this scan there.
    const file = opt["ban-file"];
    const bad = file && existsSync(file) ? JSON.parse(readFileSync(file, "utf8"))
      : await findUndecodable(num("ban-undecodable", 0));
    if (file && !existsSync(file)) writeFileSync(file, JSON.stringify(bad));
    ban = Object.fromEntries(bad.map((id) => [String(id), -100]));
    console.error(`banned ${bad.length} ids that do not decode alone`);
  }
  const rows = [];
  for (const c of (opt.concurrency ?? "1,4,16").split(",").map(Number)) {
    const range = String(opt.prompt ?? "128").match(/^(\d+)-(\d+)$/);
    const promptLength = () => (range ? Number(range[1]) + Math.floor(rand() * (Number(range[2]) - Number(range[1]) + 1))
      : num("prompt", 128));
    const jobs = Array.from({ length: num("requests", Math.max(8, 2 * c)) }, () => ({
      prompt: randomPrompt(promptLength()), maxTokens: num("max-tokens", 64) }));
    const t0 = performance.now();
    const r = await runPool(jobs, c);
    const seconds = (performance.now() - t0) / 1000;
    const tokens = r.reduce((a, x) => a + x.tokens, 0);
    const itl = r.flatMap((x) => x.itl);
    rows.push({ concurrency: c, requests: r.length, generated_tokens: tokens, seconds: +seconds.toFixed(2),
      tokens_per_second: +(tokens / seconds).toFixed(2),
      ttft_p50_ms: +pct(r.map((x) => x.ttft), 50).toFixed(1), ttft_p95_ms: +pct(r.map((x) => x.ttft), 95).toFixed(1),
      ttft_p99_ms: +pct(r.map((x) => x.ttft), 99).toFixed(1),
      itl_p50_ms: +pct(itl, 50).toFixed(1), itl_p95_ms: +pct(itl, 95).toFixed(1), itl_p99_ms: +pct(itl, 99).toFixed(1) });
    console.log(JSON.stringify(rows[rows.length - 1]));
  }
} else if (mode === "load") {
  const metric = async (name) => {
    const text = await (await fetch(`${base}/metrics`)).text();
    const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
    return m ? Number(m[1]) : NaN;
  };
  const rss = () => {
    if (!opt.pid) return null;
    const m = readFileSync(`/proc/${opt.pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) : null;
  };
  let failed = 0;
  for (let round = 1; round <= num("rounds", 3); ++round) {
    const jobs = Array.from({ length: num("requests", 200) }, () => ({
      prompt: randomPrompt(1 + Math.floor(rand() * 200)), maxTokens: 1 + Math.floor(rand() * 48) }));
    let errors = 0;
    const t0 = performance.now();
    await runPool(jobs.map((j) => ({ ...j })), num("concurrency", 32)).catch((e) => {
      errors += 1;
      console.error(String(e));
    });
    await new Promise((r) => setTimeout(r, 200));
    const row = { round, requests: jobs.length, errors, seconds: +((performance.now() - t0) / 1000).toFixed(1),
      running: await metric("lfm:num_requests_running"), kv_blocks_used: await metric("lfm:kv_blocks_used"),
      rss_kb: rss() };
    console.log(JSON.stringify(row));
    if (errors || row.running !== 0 || row.kv_blocks_used !== 0) failed += 1;
  }
  process.exit(failed ? 1 : 0);
} else {
  console.error("usage: node load.mjs bench|load URL [options]");
  process.exit(2);
}
