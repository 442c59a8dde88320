// structured.mjs - structured output through the official `openai` npm
// client against `pagellm serve` on stories260K (a model that knows
// nothing of JSON): json_schema at temperature 1 over many seeds, in chat
// and completions, streamed and not, always parses and validates;
// json_object gives an object; llama-server's `grammar` field is obeyed;
// a schema that cannot be compiled is a 400 naming response_format.
// Run by tests/cli/test_serve_format.sh:  node structured.mjs CONFIG.json
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(cfg.nodeModules + '/');
const { default: OpenAI } = await import(require.resolve('openai'));
const client = new OpenAI({ baseURL: cfg.baseURL, apiKey: cfg.apiKey, maxRetries: 0, timeout: 120000 });

async function check(name, fn) {
  try {
    const why = await fn();
    console.log(why ? `FAIL ${name}: ${why}` : `PASS ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
}
const show = (s) => JSON.stringify(s).slice(0, 300);

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 8 },
    age: { type: 'integer' },
    mood: { enum: ['happy', 'sad', null] },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,4}$' }, maxItems: 2 },
    when: { type: 'string', format: 'date' },
  },
  required: ['name', 'age', 'mood'],
  additionalProperties: false,
};

// The schema's rules, written out (an independent check).
function validates(text) {
  let v;
  try { v = JSON.parse(text); } catch (e) { return `not JSON: ${show(text)}`; }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return `not an object: ${show(text)}`;
  for (const k of Object.keys(v)) if (!(k in schema.properties)) return `extra key ${k}`;
  for (const k of schema.required) if (!(k in v)) return `missing ${k}: ${show(text)}`;
  if (typeof v.name !== 'string' || [...v.name].length > 8) return `name ${show(v.name)}`;
  if (!Number.isInteger(v.age)) return `age ${show(v.age)}`;
  if (!['happy', 'sad', null].includes(v.mood)) return `mood ${show(v.mood)}`;
  if ('tags' in v && (!Array.isArray(v.tags) || v.tags.length > 2 || !v.tags.every((t) => /^[a-z]{1,4}$/.test(t))))
    return `tags ${show(v.tags)}`;
  if ('when' in v && !/^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/.test(v.when)) return `when ${show(v.when)}`;
  return null;
}

const rf = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } };
const sampled = { model: cfg.model, temperature: 1, top_p: 1, max_tokens: 440 };

await check('openai_json_schema_chat_sampled_always_valid', async () => {
  for (let seed = 1; seed <= cfg.seeds; seed++) {
    const r = await client.chat.completions.create({
      ...sampled, seed, response_format: rf, messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
    });
    const c = r.choices[0];
    if (c.finish_reason !== 'stop') return `seed ${seed}: finish_reason ${c.finish_reason}: ${show(c.message.content)}`;
    const why = validates(c.message.content);
    if (why) return `seed ${seed}: ${why}`;
  }
  return null;
});

await check('openai_json_schema_completion_stream_valid', async () => {
  for (let seed = 1; seed <= Math.ceil(cfg.seeds / 2); seed++) {
    const stream = await client.completions.create({
      ...sampled, seed, prompt: 'Once upon a time', stream: true, response_format: rf,
    });
    let text = '', finish = null;
    for await (const ch of stream) for (const c of ch.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
    if (finish !== 'stop') return `seed ${seed}: finish_reason ${finish}`;
    const why = validates(text);
    if (why) return `seed ${seed}: ${why}`;
  }
  return null;
});

await check('openai_json_schema_n3_logprobs', async () => {
  const r = await client.chat.completions.create({
    ...sampled, seed: 9, n: 3, logprobs: true, top_logprobs: 2, response_format: rf,
    messages: [{ role: 'user', content: 'JSON please' }],
  });
  if (r.choices.length !== 3) return `${r.choices.length} choices`;
  for (const c of r.choices) {
    const why = validates(c.message.content);
    if (why) return why;
    if (!c.logprobs || !c.logprobs.content.length) return 'no logprobs';
  }
  return null;
});

// Whether text is the start of some JSON object: text + some short
// completion parses as one. Sound (a parse proves it); the completions
// tried cover a cut anywhere in a string, number, literal or between
// tokens.
function objectPrefix(text) {
  if (!text.startsWith('{')) return false;
  const stack = [];
  let inStr = false, esc = false;
  for (const ch of text) {
    if (inStr) { if (esc) esc = false; else if (ch === '\\') esc = true; else if (ch === '"') inStr = false; continue; }
    if (ch === '"') inStr = true;
    else if (ch === '{' || ch === '[') stack.push(ch);
    else if (ch === '}' || ch === ']') stack.pop();
  }
  const closers = stack.reverse().map((c) => (c === '{' ? '}' : ']')).join('');
  const firsts = inStr ? ['"', 'n"', '0"', '00"', '000"', '0000"'] : [''];
  const seconds = ['', ':null', 'null', '0', 'ue', 'rue', 'e', 'lse', 'alse', 'se', 'ull', 'll', 'l', '"":null'];
  for (const a of firsts) for (const b of seconds) {
    try { const v = JSON.parse(text + a + b + closers); if (v && typeof v === 'object' && !Array.isArray(v)) return true; } catch (e) { /* next */ }
  }
  return false;
}

// Any object: strings are unbounded, so a model this small may ramble in
// one until max_tokens. A completion that ends "stop" must parse as an
// object; one cut by max_tokens must be the start of one.
await check('openai_json_object_sampled', async () => {
  for (let seed = 1; seed <= Math.ceil(cfg.seeds / 2); seed++) {
    const r = await client.chat.completions.create({
      ...sampled, max_tokens: 120, seed, response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'An object' }],
    });
    const c = r.choices[0], t = c.message.content;
    if (c.finish_reason === 'stop') {
      let v;
      try { v = JSON.parse(t); } catch (e) { return `seed ${seed}: not JSON: ${show(t)}`; }
      if (typeof v !== 'object' || v === null || Array.isArray(v)) return `seed ${seed}: not an object: ${show(t)}`;
    } else if (!objectPrefix(t)) return `seed ${seed}: not the start of an object: ${show(t)}`;
  }
  return null;
});

await check('openai_grammar_field', async () => {
  const r = await client.completions.create({
    ...sampled, seed: 3, prompt: 'The answer is', grammar: 'root ::= ("yes" | "no") ", " [0-9]{2} "%"\n',
  });
  const t = r.choices[0].text;
  return /^(yes|no), [0-9]{2}%$/.test(t) ? null : `text ${show(t)}`;
});

await check('openai_bad_schema_is_400_naming_the_path', async () => {
  try {
    await client.chat.completions.create({
      ...sampled, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } } } } },
    });
    return 'accepted';
  } catch (e) {
    if (e.status !== 400) return `status ${e.status}`;
    if (e.param !== 'response_format') return `param ${e.param}`;
    return /\$\.properties\.n: 'minimum' is not supported/.test(e.message) ? null : `message ${e.message}`;
  }
});
