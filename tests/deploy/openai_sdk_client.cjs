// End-to-end client test with the official OpenAI Node SDK (npm `openai`) through kvroute over
// a simulated fleet: chat completions and completions, streamed and not, an offloaded HEAVY
// request (v2: prefill on one instance, decode on another) and error cases. The SDK must parse
// every response; any throw or failed assertion exits non-zero.
//
// Usage: NODE_PATH=<dir>/node_modules node openai_sdk_client.cjs http://127.0.0.1:PORT/v1 \
//            http://127.0.0.1:SIM0,http://127.0.0.1:SIM1
// (the second argument: the simulated instances, for fault injection)
'use strict';
const assert = require('node:assert/strict');
const OpenAI = require('openai');

const baseURL = process.argv[2];
const simURLs = (process.argv[3] || '').split(',').filter(Boolean);
assert.ok(baseURL && simURLs.length > 0, 'usage: openai_sdk_client.cjs BASE_URL SIM_URLS');

async function setFaults(faults) {
  for (const url of simURLs) {
    const r = await fetch(`${url}/sim/faults`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(faults),
    });
    assert.equal(r.status, 200, `POST ${url}/sim/faults`);
  }
}
const client = new OpenAI({ baseURL, apiKey: 'sk-kvroute-test', maxRetries: 0, timeout: 60_000 });

// Deterministic English-like text (xorshift32): sentences of common words with punctuation,
// paragraphs, numbers and a few proper nouns, so it reads like a document, not a repeated
// pattern. ~4 bytes per token for kvroute's estimate and the simulator's tokenizer.
const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which ' +
  'but have an they you were her she there one all we their has been if more when will would ' +
  'who so no what up out about into than them can only other new some could time these two may ' +
  'then do first any my now such like our over man me even most made after also did many before ' +
  'must through back years where much your way well down should because each just those people ' +
  'how too little state good very make world still own see men work long get here between both ' +
  'life being under never day same another know while last might us great old year off come ' +
  'since against go came right used take three system report cache memory request server ' +
  'network latency prefix token decode prefill engine fleet router instance transfer budget ' +
  'river mountain garden window letter village market winter summer history science music'
).split(' ');
const NAMES = ['Alice', 'Berlin', 'Kepler', 'Lisbon', 'Marco', 'Nairobi', 'Osaka', 'Quebec'];

function englishText(seed, bytes) {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
  const parts = [];
  let size = 0;
  let sentenceInParagraph = 0;
  while (size < bytes) {
    const n = 6 + (next() % 14);
    const words = [];
    for (let i = 0; i < n; i++) {
      const r = next() % 100;
      if (r < 3) words.push(NAMES[next() % NAMES.length]);
      else if (r < 5) words.push(String(next() % 10000));
      else words.push(WORDS[next() % WORDS.length]);
      if (i > 2 && i < n - 1 && next() % 11 === 0) words[words.length - 1] += ',';
    }
    words[0] = words[0][0].toUpperCase() + words[0].slice(1);
    let sentence = words.join(' ') + (next() % 9 === 0 ? '?' : '.');
    if (++sentenceInParagraph >= 4 + (next() % 5)) {
      sentence += '\n\n';
      sentenceInParagraph = 0;
    } else {
      sentence += ' ';
    }
    parts.push(sentence);
    size += sentence.length;
  }
  return parts.join('').slice(0, bytes);
}

function checkUsage(usage, what) {
  assert.ok(usage, `${what}: usage missing`);
  assert.ok(usage.prompt_tokens > 0, `${what}: prompt_tokens`);
  assert.ok(usage.completion_tokens > 0, `${what}: completion_tokens`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total`);
  // vLLM sends prompt_tokens_details only when something was cached.
  if (usage.prompt_tokens_details !== undefined && usage.prompt_tokens_details !== null) {
    assert.ok(usage.prompt_tokens_details.cached_tokens > 0, `${what}: cached_tokens`);
  }
}

function kvrouteHeaders(response, what) {
  const cls = response.headers.get('x-kvroute-class');
  const backend = response.headers.get('x-kvroute-backend');
  assert.ok(['WARM', 'MEDIUM', 'HEAVY'].includes(cls), `${what}: X-Kvroute-Class=${cls}`);
  assert.ok(backend, `${what}: X-Kvroute-Backend missing`);
  assert.ok(response.headers.get('x-request-id'), `${what}: X-Request-Id missing`);
  return { cls, backend };
}

async function collectChatStream(stream, what) {
  let text = '';
  let usage = null;
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk', `${what}: chunk object`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta && typeof c.delta.content === 'string') text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2, `${what}: only ${chunks} chunks`);
  assert.ok(text.length > 0, `${what}: empty text`);
  assert.ok(finish, `${what}: no finish_reason`);
  return { text, usage, chunks };
}

async function main() {
  const results = [];
  const log = (name, detail) => {
    results.push(name);
    console.log(`ok ${results.length} - ${name}${detail ? ` (${detail})` : ''}`);
  };

  // Models.
  const models = await client.models.list();
  assert.ok(models.data.length >= 1, 'no models');
  const model = models.data[0].id;
  log('models.list', model);

  // Chat, non-streaming.
  {
    const { data, response } = await client.chat.completions
      .create(
        {
          model,
          messages: [
            { role: 'system', content: 'You are a terse assistant.' },
            { role: 'user', content: 'Name three rivers in Europe.' },
          ],
          max_tokens: 12,
        },
        { headers: { 'X-Session-Id': 'sdk-session-1' } },
      )
      .withResponse();
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices.length, 1);
    assert.equal(data.choices[0].message.role, 'assistant');
    assert.ok(data.choices[0].message.content.length > 0);
    checkUsage(data.usage, 'chat');
    const h = kvrouteHeaders(response, 'chat');
    log('chat.completions non-streaming', `${h.cls} on ${h.backend}`);
  }

  // Chat, streaming with usage.
  {
    const { data: stream, response } = await client.chat.completions
      .create({
        model,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'Count from one to five.' }] }],
        max_tokens: 16,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const h = kvrouteHeaders(response, 'chat stream');
    const r = await collectChatStream(stream, 'chat stream');
    checkUsage(r.usage, 'chat stream');
    log('chat.completions streaming', `${r.chunks} chunks, ${h.cls} on ${h.backend}`);
  }

  // Completions, non-streaming.
  {
    const { data, response } = await client.completions
      .create({ model, prompt: 'Once upon a time in a quiet village,', max_tokens: 10 })
      .withResponse();
    assert.equal(data.object, 'text_completion');
    assert.ok(data.choices[0].text.length > 0);
    checkUsage(data.usage, 'completion');
    const h = kvrouteHeaders(response, 'completion');
    log('completions non-streaming', `${h.cls} on ${h.backend}`);
  }

  // Completions, streaming with usage.
  {
    const stream = await client.completions.create({
      model,
      prompt: 'The history of the printing press',
      max_tokens: 10,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, 'text_completion');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) text += c.text;
    }
    assert.ok(chunks >= 2 && text.length > 0, `completion stream: ${chunks} chunks`);
    checkUsage(usage, 'completion stream');
    log('completions streaming', `${chunks} chunks`);
  }

  // HEAVY, offloaded (v2): a cold ~30K-token prompt (~120 KB). The decode instance pulls the
  // KV from the prefill instance, so nearly the whole prompt is reported cached there.
  for (const [i, streamed] of [[1, true], [2, false]]) {
    const doc = englishText(0x9e3779b9 + i * 7919, 120 * 1024);
    const messages = [
      { role: 'system', content: `Document review ${i}. Read the document and summarise it.` },
      { role: 'user', content: doc },
    ];
    const what = `HEAVY offload ${streamed ? 'streaming' : 'non-streaming'}`;
    let usage;
    let h;
    if (streamed) {
      const { data: stream, response } = await client.chat.completions
        .create({ model, messages, max_tokens: 24, stream: true, stream_options: { include_usage: true } })
        .withResponse();
      h = kvrouteHeaders(response, what);
      usage = (await collectChatStream(stream, what)).usage;
    } else {
      const { data, response } = await client.chat.completions
        .create({ model, messages, max_tokens: 24 })
        .withResponse();
      assert.ok(data.choices[0].message.content.length > 0);
      h = kvrouteHeaders(response, what);
      usage = data.usage;
    }
    checkUsage(usage, what);
    assert.equal(h.cls, 'HEAVY', `${what}: class ${h.cls}`);
    assert.match(h.backend, /^gpu\d+->gpu\d+$/, `${what}: not offloaded: ${h.backend}`);
    const [a, b] = h.backend.split('->');
    assert.notEqual(a, b, `${what}: prefill and decode on the same instance`);
    assert.ok(usage.prompt_tokens >= 25_000, `${what}: prompt_tokens ${usage.prompt_tokens}`);
    assert.ok(
      usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens * 0.9,
      `${what}: cached ${usage.prompt_tokens_details.cached_tokens} of ${usage.prompt_tokens}: KV not transferred`,
    );
    log(what, `${h.backend}, ${usage.prompt_tokens} prompt tokens, ${usage.prompt_tokens_details.cached_tokens} pulled`);
  }

  // Errors: the SDK raises its typed errors with the OpenAI-shaped body.
  try {
    await client.chat.completions.create({
      model: 'no-such-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 4,
    });
    assert.fail('unknown model accepted');
  } catch (err) {
    assert.ok(err instanceof OpenAI.NotFoundError, `unknown model: ${err}`);
    assert.equal(err.status, 404);
    assert.ok(typeof err.message === 'string' && err.message.length > 0);
    log('error: unknown model', `${err.status} ${err.constructor.name}`);
  }
  try {
    await client.post('/chat/completions', { body: { model, messages: 'not a list' } });
    assert.fail('malformed body accepted');
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError && !(err instanceof OpenAI.APIConnectionError), `malformed: ${err}`);
    assert.ok(err.status >= 400 && err.status < 500, `malformed: status ${err.status}`);
    assert.ok(err.error && typeof err.error === 'object', 'malformed: no error object');
    log('error: malformed request', `${err.status} ${err.constructor.name}`);
  }
  try {
    await client.post('/nowhere', { body: {} });
    assert.fail('unknown route accepted');
  } catch (err) {
    assert.ok(err instanceof OpenAI.NotFoundError, `unknown route: ${err}`);
    log('error: unknown route', `${err.status}`);
  }

  // A stream that breaks after its first events: kvroute ends it with an SSE error event and
  // [DONE], which the SDK turns into an APIError while iterating (never a silent truncation).
  await setFaults({ die_after_events: 3 });
  try {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'Tell me a long story about a lighthouse.' }],
      max_tokens: 64,
      min_tokens: 64,
      stream: true,
    });
    let chunks = 0;
    let raised = null;
    try {
      for await (const chunk of stream) {
        assert.equal(chunk.object, 'chat.completion.chunk');
        chunks++;
      }
    } catch (err) {
      raised = err;
    }
    assert.ok(raised instanceof OpenAI.APIError, `broken stream: got ${raised} after ${chunks} chunks`);
    assert.ok(chunks >= 1, 'broken stream: the error came before any chunk');
    log('error: stream broken mid-way', `${chunks} chunks, then ${raised.constructor.name}: ${raised.message}`);
  } finally {
    await setFaults({ clear: true });
  }

  console.log(`PASS: ${results.length} OpenAI SDK checks`);
}

main().catch((err) => {
  console.error('FAIL:', err && err.stack ? err.stack : err);
  process.exit(1);
});
