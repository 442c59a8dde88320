// client.mjs - the official `openai` npm client, unmodified, against
// `pagellm serve`. Run by tests/cli/test_serve.sh:
//
//   NODE_PATH=... node tests/serve/client.mjs CONFIG.json
//
// CONFIG: {baseURL, apiKey, model, prompt, maxTokens, expectText, longPrompt}
// expectText is what `pagellm run --temp 0` generated for prompt. Prints one
// "PASS name" / "FAIL name: why" line per check (tests/run.sh counts them).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
// The package lives in a cache directory under /tmp, not in the repo.
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
const greedy = { model: cfg.model, temperature: 0, max_tokens: cfg.maxTokens };

await check('openai_models_list', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  return ids.includes(cfg.model) ? null : `models ${show(ids)} lack ${cfg.model}`;
});

await check('openai_completion_matches_run', async () => {
  const r = await client.completions.create({ ...greedy, prompt: cfg.prompt });
  const c = r.choices[0];
  if (r.object !== 'text_completion') return `object ${r.object}`;
  if (c.text !== cfg.expectText) return `text ${show(c.text)} != run's ${show(cfg.expectText)}`;
  if (!['length', 'stop'].includes(c.finish_reason)) return `finish_reason ${c.finish_reason}`;
  const u = r.usage;
  if (u.total_tokens !== u.prompt_tokens + u.completion_tokens) return `usage ${show(u)}`;
  return null;
});

await check('openai_completion_stream_matches_run', async () => {
  const stream = await client.completions.create({
    ...greedy, prompt: cfg.prompt, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
  }
  if (text !== cfg.expectText) return `streamed ${show(text)} != run's ${show(cfg.expectText)}`;
  if (!finish) return 'no finish_reason';
  if (!usage || usage.completion_tokens < 1) return `usage ${show(usage)}`;
  if (chunks < 3) return `only ${chunks} chunks`;
  return null;
});

let chatText = null;
const messages = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me a story about a cat.' },
];

await check('openai_chat', async () => {
  const r = await client.chat.completions.create({ ...greedy, messages });
  const c = r.choices[0];
  if (r.object !== 'chat.completion') return `object ${r.object}`;
  if (c.message.role !== 'assistant' || typeof c.message.content !== 'string' || !c.message.content.length)
    return `message ${show(c.message)}`;
  if (!r.usage || r.usage.prompt_tokens < 5) return `usage ${show(r.usage)}`;
  chatText = c.message.content;
  return null;
});

await check('openai_chat_stream_matches_chat', async () => {
  const stream = await client.chat.completions.create({ ...greedy, messages, stream: true });
  let text = '', role = null, finish = null;
  for await (const ch of stream) {
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  if (role !== 'assistant') return `role ${role}`;
  if (!finish) return 'no finish_reason';
  return text === chatText ? null : `streamed ${show(text)} != ${show(chatText)}`;
});

await check('openai_n_and_logprobs', async () => {
  const r = await client.completions.create({
    model: cfg.model, prompt: cfg.prompt, max_tokens: 8, n: 3, temperature: 0.9, seed: 7, logprobs: 2,
  });
  if (r.choices.length !== 3) return `${r.choices.length} choices`;
  for (const c of r.choices) {
    const lp = c.logprobs;
    if (!lp || lp.tokens.length !== lp.token_logprobs.length || lp.top_logprobs.length !== lp.tokens.length)
      return `logprobs ${show(lp)}`;
    if (lp.tokens.join('') !== c.text && c.finish_reason === 'length') return `tokens ${show(lp.tokens)} vs ${show(c.text)}`;
    if (lp.token_logprobs.some((x) => !(x <= 0))) return `logprob > 0: ${show(lp.token_logprobs)}`;
  }
  return null;
});

await check('openai_chat_logprobs', async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages, logprobs: true, top_logprobs: 2 });
  const items = r.choices[0].logprobs && r.choices[0].logprobs.content;
  if (!Array.isArray(items) || !items.length) return `logprobs ${show(r.choices[0].logprobs)}`;
  for (const it of items) {
    if (typeof it.token !== 'string' || !Array.isArray(it.bytes) || it.top_logprobs.length !== 2) return `item ${show(it)}`;
    if (it.top_logprobs[0].logprob < it.logprob - 1e-4) return `greedy token is not the top: ${show(it)}`;
  }
  return null;
});

await check('openai_prefix_cache_cached_tokens', async () => {
  const ask = () => client.completions.create({ model: cfg.model, prompt: cfg.longPrompt, max_tokens: 2, temperature: 0 });
  const a = await ask();
  const b = await ask();
  const cached = b.usage.prompt_tokens_details && b.usage.prompt_tokens_details.cached_tokens;
  return cached > 0 ? null : `second request of a ${a.usage.prompt_tokens}-token prompt reports cached_tokens ${cached}`;
});

await check('openai_error_context_length', async () => {
  try {
    await client.completions.create({ model: cfg.model, prompt: cfg.prompt, max_tokens: 1 << 30 });
    return 'accepted';
  } catch (e) {
    if (!(e instanceof OpenAI.BadRequestError)) return `threw ${e.constructor.name}: ${e.message}`;
    return e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'max_tokens'
      ? null : `status ${e.status} code ${e.code} param ${e.param}`;
  }
});

await check('openai_wrong_api_key', async () => {
  const bad = new OpenAI({ baseURL: cfg.baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  try {
    await bad.models.list();
    return 'accepted a wrong key';
  } catch (e) {
    return e instanceof OpenAI.AuthenticationError && e.status === 401 ? null : `threw ${e.constructor.name} ${e.status}`;
  }
});

process.exit(failed ? 1 : 0);
