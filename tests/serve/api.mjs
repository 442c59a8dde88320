// api.mjs - the official `openai` npm client against `pagellm serve`:
// embeddings, sampling fields (penalties, logit_bias, min_tokens,
// stop_token_ids, echo, best_of) and their 400s. Run by
// tests/cli/test_serve_api.sh:
//
//   node tests/serve/api.mjs CONFIG.json   (CONFIG: {baseURL, apiKey, model, nodeModules})
//
// Prints one "PASS name" / "FAIL name: why" line per check.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(cfg.nodeModules + '/');
const { default: OpenAI } = await import(require.resolve('openai'));
const client = new OpenAI({ baseURL: cfg.baseURL, apiKey: cfg.apiKey, maxRetries: 0, timeout: 60000 });
let failed = 0;

async function check(name, fn) {
  try {
    const why = await fn();
    if (why) { failed++; console.log(`FAIL ${name}: ${why}`); } else console.log(`PASS ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
}

const show = (s) => JSON.stringify(s).slice(0, 200);
const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
const greedy = { model: cfg.model, temperature: 0, max_tokens: 60, prompt: 'Once upon a time' };

// A 400 whose error names param.
async function expect400(param, fn) {
  try {
    await fn();
    return 'no error';
  } catch (e) {
    if (e.status !== 400) return `status ${e.status}: ${e.message}`;
    if (e.param !== param) return `param ${show(e.param)} != ${param}: ${e.message}`;
    return null;
  }
}

// ------------------------------------------------------------ embeddings
const texts = ['Once upon a time there was a little girl.', 'The big red ball was on the table.'];
let embA = null;
await check('api_embeddings_normalized', async () => {
  const r = await client.embeddings.create({ model: cfg.model, input: texts, encoding_format: 'float' });
  if (r.object !== 'list' || r.data.length !== 2) return `answer ${show(r)}`;
  if (r.data[0].index !== 0 || r.data[1].index !== 1) return `indices ${r.data.map((d) => d.index)}`;
  for (const d of r.data) {
    if (d.object !== 'embedding' || d.embedding.length !== cfg.nEmbd) return `length ${d.embedding.length} != ${cfg.nEmbd}`;
    if (Math.abs(norm(d.embedding) - 1) > 1e-4) return `norm ${norm(d.embedding)}`;
  }
  if (!(r.usage.prompt_tokens > 10) || r.usage.total_tokens !== r.usage.prompt_tokens) return `usage ${show(r.usage)}`;
  embA = r.data.map((d) => d.embedding);
  return null;
});
await check('api_embeddings_deterministic', async () => {
  // the second text alone, and again while another request runs beside it
  const [one, two] = await Promise.all([
    client.embeddings.create({ model: cfg.model, input: texts[1], encoding_format: 'float' }),
    client.embeddings.create({ model: cfg.model, input: [texts[1], texts[0]], encoding_format: 'float' }),
  ]);
  const d1 = Math.max(...one.data[0].embedding.map((x, i) => Math.abs(x - embA[1][i])));
  const d2 = Math.max(...two.data[1].embedding.map((x, i) => Math.abs(x - embA[0][i])));
  return d1 < 1e-5 && d2 < 1e-5 ? null : `differ by ${d1}, ${d2}`;
});
await check('api_embeddings_texts_differ', async () => {
  const c = dot(embA[0], embA[1]);
  return c < 0.999 ? null : `cosine of two different texts ${c}`;
});
await check('api_embeddings_base64_same_floats', async () => {
  // the client decodes base64 itself when it asked for it
  const r = await client.embeddings.create({ model: cfg.model, input: texts[0], encoding_format: 'base64' });
  const raw = r.data[0].embedding;
  if (typeof raw !== 'string') return `embedding is ${typeof raw}, not the base64 string asked for`;
  const v = Array.from(new Float32Array(Uint8Array.from(Buffer.from(raw, 'base64')).buffer));
  if (v.length !== cfg.nEmbd) return `length ${v.length}`;
  const f32 = Float32Array.from(embA[0]);
  const bad = v.findIndex((x, i) => x !== f32[i]);
  return bad < 0 ? null : `element ${bad}: ${v[bad]} != ${f32[bad]}`;
});
await check('api_embeddings_client_default_base64', async () => {
  // without encoding_format the client asks for base64 and decodes it
  const r = await client.embeddings.create({ model: cfg.model, input: texts[0] });
  const f32 = Float32Array.from(embA[0]), v = r.data[0].embedding;
  return v.length === f32.length && v.every((x, i) => x === f32[i]) ? null : `decoded ${show(v.slice(0, 4))}`;
});
await check('api_embeddings_token_ids', async () => {
  const tok = await (await fetch(cfg.baseURL.replace(/\/v1$/, '') + '/tokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${cfg.apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: texts[0], add_special: true }),
  })).json();
  const r = await client.embeddings.create({ model: cfg.model, input: [tok.tokens], encoding_format: 'float' });
  const d = Math.max(...r.data[0].embedding.map((x, i) => Math.abs(x - embA[0][i])));
  return d < 1e-5 ? null : `ids embed differently from the text (by ${d})`;
});
await check('api_embeddings_bad_dimensions', () =>
  expect400('dimensions', () => client.embeddings.create({ model: cfg.model, input: 'x', dimensions: 3 })));
await check('api_embeddings_bad_input', () =>
  expect400('input', () => client.embeddings.create({ model: cfg.model, input: [[1, 2], [999999]] })));
await check('api_embeddings_bad_format', () =>
  expect400('encoding_format', () => client.embeddings.create({ model: cfg.model, input: 'x', encoding_format: 'int8' })));

// ------------------------------------------------------------- sampling
const repeats = (ids) => ids.length - new Set(ids).size;
const tokensOf = async (text) => (await (await fetch(cfg.baseURL.replace(/\/v1$/, '') + '/tokenize', {
  method: 'POST', headers: { Authorization: `Bearer ${cfg.apiKey}`, 'Content-Type': 'application/json' },
  body: JSON.stringify({ content: text }),
})).json()).tokens;

let base = null;
await check('api_frequency_penalty_reduces_repeats', async () => {
  base = (await client.completions.create(greedy)).choices[0].text;
  const pen = (await client.completions.create({ ...greedy, frequency_penalty: 2 })).choices[0].text;
  const rb = repeats(await tokensOf(base)), rp = repeats(await tokensOf(pen));
  console.log(`# repeated tokens in 60 greedy tokens: ${rb} without, ${rp} with frequency_penalty 2`);
  return rp < rb ? null : `repeats ${rp} not below ${rb}: ${show(pen)}`;
});
await check('api_presence_penalty_changes_output', async () => {
  const pen = (await client.completions.create({ ...greedy, presence_penalty: 2 })).choices[0].text;
  const rb = repeats(await tokensOf(base)), rp = repeats(await tokensOf(pen));
  return pen !== base && rp < rb ? null : `presence_penalty 2: repeats ${rp} vs ${rb}: ${show(pen)}`;
});
await check('api_logit_bias_bans_a_token', async () => {
  const r = await client.completions.create({ ...greedy, logprobs: 0 });
  const ids = await tokensOf(r.choices[0].text);
  // the most frequent token of the greedy text
  const freq = new Map();
  for (const t of ids) freq.set(t, (freq.get(t) || 0) + 1);
  const victim = [...freq.entries()].sort((a, b) => b[1] - a[1])[0][0];
  const r2 = await client.completions.create({ ...greedy, logit_bias: { [victim]: -100 } });
  const ids2 = await tokensOf(r2.choices[0].text);
  if (ids2.includes(victim)) return `token ${victim} still in ${show(r2.choices[0].text)}`;
  return r2.choices[0].text !== r.choices[0].text ? null : 'output unchanged';
});
await check('api_logit_bias_forces_a_token', async () => {
  const r = await client.completions.create({ ...greedy, max_tokens: 5, logit_bias: { 300: 100 } });
  const want = await (await fetch(cfg.baseURL.replace(/\/v1$/, '') + '/detokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${cfg.apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ tokens: [1, 300, 300, 300, 300, 300] }),
  })).json();
  return r.choices[0].text.trim() === want.content.trim() ? null : `text ${show(r.choices[0].text)} != ${show(want.content)}`;
});
await check('api_stop_token_ids', async () => {
  const ids = await tokensOf(base);
  const stopAt = ids[5];
  const r = await client.completions.create({ ...greedy, stop_token_ids: [stopAt] });
  const c = r.choices[0];
  const first = ids.indexOf(stopAt);
  const want = await (await fetch(cfg.baseURL.replace(/\/v1$/, '') + '/detokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${cfg.apiKey}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ tokens: ids.slice(0, first) }),
  })).json();
  if (c.finish_reason !== 'stop') return `finish_reason ${c.finish_reason}`;
  return c.text.trim() === want.content.trim() ? null : `text ${show(c.text)} != ${show(want.content)}`;
});
await check('api_min_tokens_holds_eos', async () => {
  // EOS pushed up by +100 ends at once; min_tokens holds it back exactly that long
  const eos = { [cfg.eos]: 100 };
  const r0 = await client.completions.create({ ...greedy, logit_bias: eos });
  if (r0.choices[0].finish_reason !== 'stop' || r0.usage.completion_tokens !== 0) return `without: ${show(r0.usage)}`;
  const r = await client.completions.create({ ...greedy, logit_bias: eos, min_tokens: 12 });
  return r.usage.completion_tokens === 12 && r.choices[0].finish_reason === 'stop' ? null
    : `with min_tokens 12: ${r.usage.completion_tokens} tokens, ${r.choices[0].finish_reason}`;
});
await check('api_min_tokens_holds_stop_token_ids', async () => {
  const r = await client.completions.create({ ...greedy, logit_bias: { 300: 100 }, stop_token_ids: [300], min_tokens: 4 });
  return r.usage.completion_tokens === 4 && r.choices[0].finish_reason === 'stop' ? null
    : `${r.usage.completion_tokens} tokens, ${r.choices[0].finish_reason}`;
});
await check('api_min_tokens_holds_stop_strings', async () => {
  const word = base.trim().split(' ')[1];
  const r0 = await client.completions.create({ ...greedy, stop: [word] });
  const r = await client.completions.create({ ...greedy, stop: [word], min_tokens: 30 });
  return r.usage.completion_tokens >= 30 && r0.usage.completion_tokens < 30 ? null
    : `tokens ${r0.usage.completion_tokens} / ${r.usage.completion_tokens}`;
});
await check('api_echo', async () => {
  const r = await client.completions.create({ ...greedy, echo: true });
  if (r.choices[0].text !== greedy.prompt + base) return `text ${show(r.choices[0].text)}`;
  const chunks = [];
  for await (const ch of await client.completions.create({ ...greedy, echo: true, stream: true })) chunks.push(ch.choices[0].text);
  return chunks.join('') === greedy.prompt + base ? null : `stream ${show(chunks.join(''))}`;
});
await check('api_prompt_list', async () => {
  const prompts = ['Once upon a time', 'Tom had a big', 'The cat'];
  const single = [];
  for (const p of prompts) single.push(await client.completions.create({ ...greedy, prompt: p, max_tokens: 12 }));
  const r = await client.completions.create({ ...greedy, prompt: prompts, max_tokens: 12, n: 2 });
  if (r.choices.length !== 6) return `${r.choices.length} choices`;
  for (const c of r.choices) {
    const want = single[Math.floor(c.index / 2)].choices[0].text;
    if (c.text !== want) return `choice ${c.index}: ${show(c.text)} != ${show(want)}`;
  }
  const pt = single.reduce((a, x) => a + x.usage.prompt_tokens, 0);
  if (r.usage.prompt_tokens !== pt || r.usage.completion_tokens !== 72) return `usage ${show(r.usage)}, prompts ${pt}`;
  const seen = new Set();
  for await (const ch of await client.completions.create({ ...greedy, prompt: prompts, max_tokens: 12, stream: true }))
    for (const c of ch.choices) seen.add(c.index);
  return seen.size === 3 ? null : `stream indices ${[...seen]}`;
});
await check('api_prompt_list_too_many', () =>
  expect400('prompt', () => client.completions.create({ ...greedy, prompt: Array(9).fill('a'), n: 2 })));
await check('api_best_of_equal_n_accepted', async () => {
  const r = await client.completions.create({ ...greedy, best_of: 1, n: 1 });
  return r.choices[0].text === base ? null : `text ${show(r.choices[0].text)}`;
});
await check('api_best_of_refused', () => expect400('best_of', () => client.completions.create({ ...greedy, best_of: 3 })));
await check('api_echo_logprobs', async () => {
  // the prompt's tokens come first in logprobs (the first with null), then the generated ones,
  // whose logprobs are those of the same request without echo
  const plain = await client.completions.create({ ...greedy, max_tokens: 6, logprobs: 2 });
  const r = await client.completions.create({ ...greedy, max_tokens: 6, logprobs: 2, echo: true });
  const lp = r.choices[0].logprobs, np = r.usage.prompt_tokens;
  if (r.choices[0].text !== greedy.prompt + plain.choices[0].text) return `text ${show(r.choices[0].text)}`;
  if (lp.tokens.length !== np + 6 || lp.token_logprobs[0] !== null || lp.top_logprobs[0] !== null) return `logprobs ${show(lp)}`;
  if (!lp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0)) return `values ${show(lp.token_logprobs)}`;
  const gen = lp.token_logprobs.slice(np), want = plain.choices[0].logprobs.token_logprobs;
  if (gen.some((x, i) => Math.abs(x - want[i]) > 1e-5)) return `generated ${show(gen)} != ${show(want)}`;
  if (!lp.text_offset.every((x, i) => i === 0 || x >= lp.text_offset[i - 1])) return `offsets ${show(lp.text_offset)}`;
  const chunks = [];
  for await (const ch of await client.completions.create({ ...greedy, max_tokens: 6, logprobs: 2, echo: true, stream: true }))
    chunks.push(ch.choices[0]);
  const first = chunks[0];
  return first.text === greedy.prompt && first.logprobs && first.logprobs.tokens.length === np ? null
    : `first chunk ${show(first)}`;
});
await check('api_bad_logit_bias', () => expect400('logit_bias', () => client.completions.create({ ...greedy, logit_bias: { abc: 1 } })));
await check('api_bad_logit_bias_value', () => expect400('logit_bias', () => client.completions.create({ ...greedy, logit_bias: { 5: 101 } })));
await check('api_bad_frequency_penalty', () => expect400('frequency_penalty', () => client.completions.create({ ...greedy, frequency_penalty: 3 })));
await check('api_bad_stop_token_ids', () => expect400('stop_token_ids', () => client.completions.create({ ...greedy, stop_token_ids: [-1] })));
await check('api_bad_min_tokens', () => expect400('min_tokens', () => client.completions.create({ ...greedy, min_tokens: 100, max_tokens: 10 })));
await check('api_chat_penalty_honoured', async () => {
  const msg = { model: cfg.model, temperature: 0, max_tokens: 60, messages: [{ role: 'user', content: 'Once upon a time' }] };
  const a = (await client.chat.completions.create(msg)).choices[0].message.content;
  const b = (await client.chat.completions.create({ ...msg, frequency_penalty: 2 })).choices[0].message.content;
  return a !== b ? null : 'frequency_penalty changed nothing in chat';
});

process.exit(failed ? 1 : 0);
