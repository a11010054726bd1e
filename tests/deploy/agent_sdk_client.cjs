// End-to-end client test of the agent APIs with the official SDKs: the Anthropic TypeScript SDK
// (npm `@anthropic-ai/sdk`) on POST /v1/messages and the OpenAI Node SDK's Responses client
// (npm `openai`) on POST /v1/responses and GET /v1/responses/{id}. Run against kvroute in front
// of a simulated fleet (agent_sdk_test.sh), or against one kvroute-sim instance directly.
//
// Covered: messages streamed and not, a two-turn session (the second turn resends the first as
// its prefix, as a coding agent does), a tool-use round trip (tool_use, then tool_result), an
// error case; responses streamed (with the SDK's accumulating stream helper) and not, a
// previous_response_id follow-up and retrieval by id, a function-call round trip, and the
// errors for an unknown model and an unknown previous_response_id. The SDKs must parse every
// response; any throw or failed assertion exits non-zero.
//
// Usage: NODE_PATH=<dir>/node_modules node agent_sdk_client.cjs http://127.0.0.1:PORT MODEL [heavy]
// Prints one JSON line per step ({"step", ...}) for the calling script to check.
'use strict';
const assert = require('node:assert/strict');
const Anthropic = require('@anthropic-ai/sdk');
const OpenAI = require('openai');

const base = process.argv[2];
const model = process.argv[3];
// "heavy": also send a long first turn (~25k tokens), which kvroute (v2) offloads.
const heavy = process.argv[4] === 'heavy';
assert.ok(base && model, 'usage: agent_sdk_client.cjs BASE_URL MODEL [heavy]');

const anthropic = new Anthropic({ baseURL: base, apiKey: 'sk-ant-kvroute-test', maxRetries: 0,
                                  timeout: 60_000 });
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-kvroute-test', maxRetries: 0,
                            timeout: 60_000 });

function report(step, fields) { console.log(JSON.stringify({ step, ...fields })); }

// The SDK call's parsed result and kvroute's routing headers (absent when talking to an
// instance directly).
async function routed(apiPromise) {
  const { data, response } = await apiPromise.withResponse();
  return { data, backend: response.headers.get('x-kvroute-backend'),
           klass: response.headers.get('x-kvroute-class') };
}

// A coding agent's fixed preamble: long enough to span many KV blocks.
const SYSTEM = Array.from({ length: 20 }, (_, i) =>
  `Rule ${i}: read a file before you edit it, keep changes small, and run the tests after ` +
  `every change to the router, the proxy or the simulator.`).join(' ');
const BASH = {
  name: 'bash',
  description: 'Run a shell command in the repository and return its output.',
  input_schema: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
};

async function messages() {
  const session = `agent-${process.pid}`;
  // Turn 1, not streamed.
  const turn1 = [{ role: 'user', content: 'List the files under router/ and say what each does.' }];
  const t1 = await routed(anthropic.messages.create({
    model, max_tokens: 16, system: SYSTEM, tools: [BASH], messages: turn1,
    metadata: { user_id: session },
  }));
  const m1 = t1.data;
  assert.equal(m1.type, 'message');
  assert.equal(m1.role, 'assistant');
  assert.ok(m1.content.length >= 1 && m1.content[0].type === 'text', JSON.stringify(m1.content));
  assert.ok(m1.usage.input_tokens > 200, `input_tokens ${m1.usage.input_tokens}`);
  assert.ok(m1.usage.output_tokens >= 1);
  report('messages.create', { id: m1.id, input_tokens: m1.usage.input_tokens, session,
                              backend: t1.backend, class: t1.klass });

  // Turn 2, streamed: the whole first turn is its prefix. Raw events, with the headers.
  const turn2 = [...turn1, { role: 'assistant', content: m1.content },
                 { role: 'user', content: 'Now summarise router/README.md in two lines.' }];
  const t2 = await routed(anthropic.messages.create({
    model, max_tokens: 16, system: SYSTEM, tools: [BASH], messages: turn2,
    metadata: { user_id: session }, stream: true,
  }));
  const types = [];
  let text = '';
  let input2 = -1, output2 = -1, id2 = '';
  for await (const event of t2.data) {
    types.push(event.type);
    if (event.type === 'message_start') {
      id2 = event.message.id;
      input2 = event.message.usage.input_tokens;
    }
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
      text += event.delta.text;
    }
    if (event.type === 'message_delta') output2 = event.usage.output_tokens;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types[types.length - 1], 'message_stop');
  assert.ok(types.includes('content_block_delta') && types.includes('message_delta'),
            types.join(','));
  assert.ok(text.length > 0, 'no text streamed');
  assert.ok(input2 > m1.usage.input_tokens + m1.usage.output_tokens,
            `turn 2 input_tokens ${input2}`);
  assert.ok(output2 >= 1);
  report('messages.turn2_stream', { id: id2, input_tokens: input2, events: types.length, session,
                                    backend: t2.backend, class: t2.klass });

  // The SDK's accumulating stream helper on the same conversation.
  const stream = anthropic.messages.stream({
    model, max_tokens: 16, system: SYSTEM, tools: [BASH], messages: turn2,
    metadata: { user_id: session },
  });
  let helperText = '';
  stream.on('text', (delta) => { helperText += delta; });
  const m2 = await stream.finalMessage();
  assert.ok(helperText.length > 0 && m2.content[0].text === helperText, 'stream helper text');
  report('messages.stream', { id: m2.id, input_tokens: m2.usage.input_tokens });

  // A tool-use round trip: the forced call, then its result.
  const ask = [{ role: 'user', content: 'How many lines does proxy/features.cc have?' }];
  const call = await anthropic.messages.create({
    model, max_tokens: 32, system: SYSTEM, tools: [BASH], messages: ask,
    tool_choice: { type: 'tool', name: 'bash' }, metadata: { user_id: session },
  });
  const use = call.content.find((b) => b.type === 'tool_use');
  assert.ok(use, `no tool_use block: ${JSON.stringify(call.content)}`);
  assert.equal(use.name, 'bash');
  assert.equal(typeof use.input.cmd, 'string');
  const answer = await anthropic.messages.create({
    model, max_tokens: 16, system: SYSTEM, tools: [BASH], metadata: { user_id: session },
    messages: [...ask, { role: 'assistant', content: call.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id,
                                           content: '812 proxy/features.cc' }] }],
  });
  assert.ok(answer.content.length >= 1);
  assert.ok(answer.usage.input_tokens > call.usage.input_tokens);
  report('messages.tool_round_trip', { tool_use_id: use.id, input: use.input });

  // Streamed tool use: the SDK assembles the input from input_json_delta events.
  const toolStream = anthropic.messages.stream({
    model, max_tokens: 32, tools: [BASH], messages: ask, tool_choice: { type: 'any' },
  });
  const streamedCall = await toolStream.finalMessage();
  const streamedUse = streamedCall.content.find((b) => b.type === 'tool_use');
  assert.ok(streamedUse && typeof streamedUse.input.cmd === 'string',
            JSON.stringify(streamedCall.content));
  assert.equal(streamedCall.stop_reason, 'tool_use');
  report('messages.stream_tool_use', { input: streamedUse.input });

  if (heavy) {
    // A long first turn (a repository dump): HEAVY, so kvroute may offload its prefill.
    const dump = Array.from({ length: 2400 }, (_, i) =>
      `file ${i}: the router keeps a prefix index, the proxy relays bytes, and ${i % 97} tests pass.`)
      .join('\n');
    const h = await routed(anthropic.messages.create({
      model, max_tokens: 8, system: SYSTEM, tools: [BASH], stream: true,
      messages: [{ role: 'user', content: `Summarise this repository:\n${dump}` }],
    }));
    const types = [];
    for await (const event of h.data) types.push(event.type);
    assert.equal(types[types.length - 1], 'message_stop');
    report('messages.heavy', { backend: h.backend, class: h.klass, events: types.length });
  }

  // An error: an unknown model.
  try {
    await anthropic.messages.create({ model: 'no-such-model', max_tokens: 4,
                                      messages: [{ role: 'user', content: 'hi' }] });
    assert.fail('unknown model accepted');
  } catch (err) {
    assert.ok(err instanceof Anthropic.NotFoundError, `unknown model: ${err}`);
    assert.equal(err.error.type, 'error');
    report('messages.error', { status: err.status, type: err.error.error.type });
  }
}

async function responses() {
  const r1 = await routed(openai.responses.create({
    model, instructions: SYSTEM, input: 'List the files under router/.', max_output_tokens: 12,
  }));
  const first = r1.data;
  assert.equal(first.object, 'response');
  assert.equal(first.status, 'completed');
  assert.ok(first.output_text.length > 0, 'empty output_text');
  assert.ok(first.usage.input_tokens > 200);
  report('responses.create', { id: first.id, input_tokens: first.usage.input_tokens,
                               backend: r1.backend, class: r1.klass });

  // The follow-up continues the stored conversation, on the instance that holds it.
  const r2 = await routed(openai.responses.create({
    model, previous_response_id: first.id, input: 'Which of them is the largest?',
    max_output_tokens: 8,
  }));
  const second = r2.data;
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
  const cached = second.usage.input_tokens_details.cached_tokens;
  assert.ok(cached >= first.usage.input_tokens - 16, `follow-up cached_tokens ${cached}`);
  report('responses.follow_up', { id: second.id, previous: first.id, cached_tokens: cached,
                                  backend: r2.backend, class: r2.klass });

  const got = await openai.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.equal(got.output_text, first.output_text);
  report('responses.retrieve', { id: got.id });

  // Streamed, through the SDK's accumulating helper (it checks every index it is given).
  const stream = openai.responses.stream({
    model, instructions: SYSTEM, input: 'Say hello.', max_output_tokens: 8,
  });
  let deltas = '';
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const streamed = await stream.finalResponse();
  assert.equal(streamed.status, 'completed');
  assert.ok(deltas.length > 0 && streamed.output_text === deltas, 'streamed text');
  report('responses.stream', { id: streamed.id });

  // Raw streamed events.
  const events = [];
  for await (const e of await openai.responses.create({ model, input: 'Count to three.',
                                                       max_output_tokens: 6, stream: true })) {
    events.push(e.type);
  }
  assert.equal(events[0], 'response.created');
  assert.equal(events[events.length - 1], 'response.completed');

  // A function-call round trip.
  const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city',
                   parameters: { type: 'object', properties: { city: { type: 'string' } } },
                   strict: false }];
  const call = await openai.responses.create({
    model, input: 'Weather in Lisbon?', tools, tool_choice: 'required', max_output_tokens: 16,
  });
  const fc = call.output.find((o) => o.type === 'function_call');
  assert.ok(fc && fc.name === 'get_weather', JSON.stringify(call.output));
  assert.equal(typeof JSON.parse(fc.arguments).city, 'string');
  const result = await openai.responses.create({
    model, previous_response_id: call.id, tools, max_output_tokens: 8,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: '{"celsius":21}' }],
  });
  assert.equal(result.status, 'completed');
  report('responses.function_call', { call_id: fc.call_id, follow_up: result.id });

  // Errors, in vLLM's shape: an unknown previous_response_id, an unknown id to retrieve.
  for (const [what, fn] of [
    ['previous_response_id', () => openai.responses.create({
      model, previous_response_id: 'resp_0000000000000000deadbeef00000000', input: 'x' })],
    ['retrieve', () => openai.responses.retrieve('resp_0000000000000000deadbeef00000000')],
  ]) {
    try {
      await fn();
      assert.fail(`${what}: unknown id accepted`);
    } catch (err) {
      assert.ok(err instanceof OpenAI.NotFoundError, `${what}: ${err}`);
      assert.match(err.message, /not found/);
      report('responses.error', { what, status: err.status });
    }
  }
}

async function main() {
  await messages();
  await responses();
  report('done', {});
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
