// tools.mjs - the official `openai` npm client, unmodified, against
// `pagellm serve` with a reasoning model's template (DeepSeek-R1's, whose
// generation prompt opens <think>): tools in requests, reasoning_content in
// responses and streamed deltas, and the 400s a client sees for a forced
// tool choice and a tool without a name. Run by tests/cli/test_serve_tools.sh:
//
//   node tests/serve/tools.mjs CONFIG.json    CONFIG: {baseURL, model, nodeModules}
//
// The tiny test model cannot be made to write a tool call, so the call
// shapes (message.tool_calls, delta.tool_calls) are tested on real parser
// output in tests/test_server_tools.c; here the client must accept every
// answer and the streamed pieces must add up to the whole answer.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(cfg.nodeModules + '/');
const { default: OpenAI } = await import(require.resolve('openai'));
const client = new OpenAI({ baseURL: cfg.baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });

async function check(name, fn) {
  try {
    const why = await fn();
    console.log(why ? `FAIL ${name}: ${why}` : `PASS ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
}

const show = (s) => JSON.stringify(s).slice(0, 200);
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const base = {
  model: cfg.model, temperature: 0, max_tokens: 24, tools, tool_choice: 'auto', parallel_tool_calls: true,
  messages: [
    { role: 'system', content: 'You can call functions.' },
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 °C' },
    { role: 'user', content: 'Thanks! And tomorrow?' },
  ],
};

let whole = null;
await check('openai_tools_reasoning_response', async () => {
  const r = await client.chat.completions.create(base);
  const c = r.choices[0];
  whole = c.message;
  if (c.message.role !== 'assistant') return `role ${c.message.role}`;
  if (!['length', 'stop', 'tool_calls'].includes(c.finish_reason)) return `finish_reason ${c.finish_reason}`;
  // the prompt ends inside <think> and the model never closes it: all of it is reasoning
  if (typeof c.message.reasoning_content !== 'string' || !c.message.reasoning_content.length)
    return `no reasoning_content: ${show(c.message)}`;
  if (c.message.content) return `content ${show(c.message.content)} beside an unclosed <think>`;
  return null;
});

await check('openai_tools_reasoning_stream_adds_up', async () => {
  const stream = await client.chat.completions.create({ ...base, stream: true });
  let reasoning = '', content = '', finish = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    const d = ch.choices[0]?.delta ?? {};
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (d.content) content += d.content;
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  if (!whole) return 'no whole answer to compare with';
  if (reasoning !== whole.reasoning_content) return `streamed ${show(reasoning)} != ${show(whole.reasoning_content)}`;
  if (content !== (whole.content ?? '')) return `streamed content ${show(content)}`;
  if (chunks < 3 || !finish) return `${chunks} chunks, finish ${finish}`;
  return null;
});

async function bad(name, body, param) {
  await check(name, async () => {
    try {
      await client.chat.completions.create({ ...base, ...body });
      return 'accepted';
    } catch (e) {
      if (!(e instanceof OpenAI.BadRequestError)) return `threw ${e.constructor.name}: ${e.message}`;
      if (e.status !== 400 || e.param !== param) return `status ${e.status}, param ${e.param}`;
      return null;
    }
  });
}
await check('openai_tool_choice_named_forces_a_call', async () => {
  // a grammar of one call: an enum argument, so the call ends well within max_tokens
  const unit = { type: 'function', function: { name: 'set_unit', parameters: { type: 'object',
    properties: { unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['unit'], additionalProperties: false } } };
  const r = await client.chat.completions.create({ ...base, max_tokens: 300, tools: [...tools, unit],
    tool_choice: { type: 'function', function: { name: 'set_unit' } } });
  const c = r.choices[0], calls = c.message.tool_calls ?? [];
  if (c.finish_reason !== 'tool_calls' || calls.length !== 1) return `finish ${c.finish_reason}, ${show(c.message)}`;
  if (calls[0].function.name !== 'set_unit') return `called ${calls[0].function.name}`;
  const args = JSON.parse(calls[0].function.arguments);
  return ['celsius', 'fahrenheit'].includes(args.unit) ? null : `arguments ${calls[0].function.arguments}`;
});
await check('openai_tool_choice_required_streamed', async () => {
  // the same forced call as stream chunks: the client sees one delta.tool_calls entry and finish_reason tool_calls
  const unit = { type: 'function', function: { name: 'set_unit', parameters: { type: 'object',
    properties: { unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['unit'], additionalProperties: false } } };
  const stream = await client.chat.completions.create({ ...base, max_tokens: 300, stream: true, tools: [unit],
    tool_choice: 'required', temperature: 0.7, seed: 11 });
  const calls = [];
  let finish = null;
  for await (const ch of stream) {
    for (const tc of ch.choices[0]?.delta?.tool_calls ?? []) calls.push(tc);
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  if (finish !== 'tool_calls' || calls.length !== 1) return `finish ${finish}, ${calls.length} call deltas`;
  if (calls[0].function?.name !== 'set_unit' || calls[0].index !== 0) return `delta ${show(calls[0])}`;
  return ['celsius', 'fahrenheit'].includes(JSON.parse(calls[0].function.arguments).unit) ? null : `arguments ${calls[0].function.arguments}`;
});
await bad('openai_tool_without_name_refused', { tools: [{ type: 'function', function: { description: 'x' } }] }, 'tools');
await bad('openai_named_tool_not_in_tools_refused',
  { tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
