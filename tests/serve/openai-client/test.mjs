// Drives a running `moxi serve` with the official openai npm client: chat and completions, streaming and
// not, usage (cached tokens), logprobs, tools and n > 1, response_format json_schema, an image part, and the
// client-side errors it raises for 4xx answers. Invoked by
// tests/serve/http-openai-client-test.cpp with MOXI_BASE_URL, MOXI_API_KEY and MOXI_MODEL set.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.MOXI_BASE_URL;
const model = process.env.MOXI_MODEL;
assert.ok(baseURL && model, 'MOXI_BASE_URL and MOXI_MODEL must be set');
const client = new OpenAI({ baseURL, apiKey: process.env.MOXI_API_KEY, maxRetries: 0, timeout: 60000 });

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    console.log(`not ok - ${name}: ${e.stack || e}`);
    process.exitCode = 1;
  }
}

await check('models.list', async () => {
  const page = await client.models.list();
  assert.ok(page.data.some((m) => m.id === model));
});

// A 2 x 2 PNG (red, green / blue, white) as the client sends an image: a content part of type image_url with
// a data: URL. The tiny model has a vision tower; the server upscales the image to one 28 x 28 merge block.
const png2x2 = 'iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC';
await check('chat with an image', async () => {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: [
      { type: 'image_url', image_url: { url: `data:image/png;base64,${png2x2}` } },
      { type: 'text', text: 'What colours do you see?' },
    ] }],
    max_tokens: 4, temperature: 0,
  });
  assert.equal(r.choices.length, 1);
  assert.equal(r.usage.prompt_tokens_details.image_tokens, 1);
  const bad = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/x.png' } }] }],
    max_tokens: 2,
  }).then(() => null, (e) => e);
  assert.ok(bad instanceof OpenAI.BadRequestError, String(bad));
  assert.match(bad.message, /only data: URLs/);
});

let chatText;
await check('chat non-stream', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  chatText = r.choices[0].message.content;
});

await check('chat stream equals non-stream (greedy), usage chunk', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.equal(text, chatText);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
  assert.ok(usage.prompt_tokens_details.cached_tokens >= 0);
});

await check('completions non-stream with logprobs and seed', async () => {
  const a = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0.8, top_p: 0.9, seed: 7, logprobs: 2,
  });
  const b = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0.8, top_p: 0.9, seed: 7, logprobs: 2,
  });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices[0].text, b.choices[0].text, 'same seed, same text');
  const lp = a.choices[0].logprobs;
  assert.equal(lp.tokens.length, a.usage.completion_tokens);
  assert.ok(lp.token_logprobs.every((x) => x <= 0));
  assert.ok(lp.top_logprobs.every((t) => Object.keys(t).length >= 1));
});

await check('completions stream', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const ref = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0 });
  assert.equal(text, ref.choices[0].text);
  assert.equal(finish, ref.choices[0].finish_reason);
});

await check('chat with tools and n = 2: two seeded choices, tools rendered into the prompt', async () => {
  const tools = [{ type: 'function', function: { name: 'get_time', description: 'now', parameters: { type: 'object', properties: {} } } }];
  const messages = [{ role: 'user', content: 'What time is it?' }];
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0 });
  const r = await client.chat.completions.create({
    model, messages, tools, n: 2, seed: 5, temperature: 1, max_tokens: 4,
  });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens, 'the tool list is part of the prompt');
  for (let i = 0; i < 2; i++) {
    const one = await client.chat.completions.create({
      model, messages, tools, seed: 5 + i, temperature: 1, max_tokens: 4,
    });
    assert.equal(r.choices[i].message.content, one.choices[0].message.content, `choice ${i} = seed ${5 + i}`);
  }
});

await check('errors: unknown model is NotFoundError, bad parameter is BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /does not exist/.test(e.message));
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
});

await check('response_format json_schema: completed outputs parse and match the schema', async () => {
  const schema = {
    type: 'object',
    properties: { answer: { type: 'string', maxLength: 5 }, n: { type: 'integer' }, flag: { type: 'boolean' } },
    required: ['answer', 'n', 'flag'],
    additionalProperties: false,
  };
  let stopped = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Reply in JSON' }], max_tokens: 200, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } },
    });
    const c = r.choices[0];
    assert.ok(['stop', 'length'].includes(c.finish_reason));
    if (c.finish_reason !== 'stop') continue;
    stopped++;
    const v = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(v).sort(), ['answer', 'flag', 'n']);
    assert.equal(typeof v.answer, 'string');
    assert.ok([...v.answer].length <= 5);
    assert.ok(Number.isInteger(v.n));
    assert.equal(typeof v.flag, 'boolean');
  }
  assert.ok(stopped >= 1, 'no output completed');
  await assert.rejects(
    client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a' } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
      e.param === 'response_format.json_schema.schema' && /'pattern' is not supported/.test(e.message));
});

await check('tool loop: a forced call, its result as a tool message, then a text reply; streamed calls too', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'run_command',
      description: 'run a shell command',
      parameters: { type: 'object', properties: { command: { type: 'string', maxLength: 16 } },
        required: ['command'], additionalProperties: false },
    },
  }];
  const messages = [{ role: 'user', content: 'How many lines are in notes.txt?' }];
  let call = null;
  for (let seed = 1; seed <= 6 && !call; seed++) {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: { type: 'function', function: { name: 'run_command' } },
      temperature: 1, seed, max_tokens: 80,
    });
    const c = r.choices[0];
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'run_command');
    if (c.finish_reason !== 'tool_calls') continue;
    const args = JSON.parse(c.message.tool_calls[0].function.arguments);
    assert.equal(typeof args.command, 'string');
    assert.ok([...args.command].length <= 16);
    assert.deepEqual(Object.keys(args), ['command']);
    call = c.message;
  }
  assert.ok(call, 'no call completed within max_tokens');
  messages.push(call, { role: 'tool', tool_call_id: call.tool_calls[0].id, content: '12 notes.txt' });
  const after = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', max_tokens: 8 });
  assert.equal(typeof after.choices[0].message.content, 'string');
  assert.ok(!after.choices[0].message.tool_calls);
  // Streaming: the client's delta shape (index, id, type, name, then argument pieces).
  const stream = await client.chat.completions.create({
    model, messages: messages.slice(0, 1), tools, tool_choice: 'required', temperature: 1, seed: 2,
    max_tokens: 80, stream: true,
  });
  let name = '', id = '', argText = '', finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    for (const tc of d?.tool_calls ?? []) {
      assert.equal(tc.index, 0);
      if (tc.id) { id = tc.id; name = tc.function.name; }
      argText += tc.function?.arguments ?? '';
    }
  }
  assert.equal(name, 'run_command');
  assert.ok(id.startsWith('call_'));
  assert.ok(['tool_calls', 'length'].includes(finish));
  if (finish === 'tool_calls') assert.equal(typeof JSON.parse(argText).command, 'string');
  await assert.rejects(
    client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
});

await check('errors: wrong API key is AuthenticationError', async () => {
  if (!process.env.MOXI_API_KEY) return;
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});
