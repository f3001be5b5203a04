// Several clients each holding a multi-turn chat with one server at once, as people use it: every
// turn sends the whole history (the answers so far included) through the official `openai`
// client shape (raw fetch here, to read the server's headers). Shared by the suite (knot-serve,
// the Worker, the stations: each turn after the first reuses its prefix, every answer equals the
// same chat run alone) and by bench/chats.mjs (wall time at once against one after another).

/** Four conversations of four turns, on different topics so their prefixes differ. */
export const CHATS = [
  ['Hi! Can you tell me one fact about the sea?', 'Why is it salty?', 'And why is it blue?', 'Thanks. Summarize that in one line.'],
  ['What is a good name for a cat?', 'Why that name?', 'Suggest another one.', 'Which of the two do you prefer?'],
  ['Give me a tip for learning to cook.', 'What should I cook first?', 'How long does it take?', 'Any tip for the sauce?'],
  ['Write a haiku about mountains.', 'Now one about rivers.', 'Which one do you like more?', 'Explain the first one.'],
];

/**
 * One chat, turn by turn: each turn posts the history plus the next user message, appends the
 * answer. Resolves with each turn's answer, its `x-knot-prefill` header, the tokens it reused
 * and its prompt's tokens.
 * @param {string} url the server
 * @param {string[]} turns user messages
 * @param {{ maxTokens?: number, model?: string, headers?: Record<string, string> }} [o]
 */
export async function chat(url, turns, o = {}) {
  const messages = [];
  const out = [];
  for (const user of turns) {
    messages.push({ role: 'user', content: user });
    const t0 = Date.now();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(o.headers ?? {}) },
      body: JSON.stringify({ model: o.model ?? 'm', messages, temperature: 0, max_tokens: o.maxTokens ?? 24 }),
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`turn ${out.length + 1}: ${res.status} ${text}`);
    const body = JSON.parse(text);
    const answer = body.choices[0].message.content;
    messages.push({ role: 'assistant', content: answer });
    out.push({
      answer,
      prefill: res.headers.get('x-knot-prefill'),
      reused: Number(res.headers.get('x-knot-prefill-reused')),
      promptTokens: body.usage.prompt_tokens,
      ms: Date.now() - t0,
    });
  }
  return out;
}

/**
 * Every chat at once, then (for comparison) the same chats one after another; both's wall time.
 * @param {string} url
 * @param {string[][]} chats
 * @param {object} [o] as for `chat`
 */
export async function atOnceAndAlone(url, chats = CHATS, o = {}) {
  const t0 = Date.now();
  const together = await Promise.all(chats.map((turns) => chat(url, turns, o)));
  const togetherMs = Date.now() - t0;
  const t1 = Date.now();
  const alone = [];
  for (const turns of chats) alone.push(await chat(url, turns, o));
  const aloneMs = Date.now() - t1;
  return { together, togetherMs, alone, aloneMs };
}

/**
 * What the suite holds of a run: every turn after the first reused at least the previous turn's
 * prompt (and said 'hit'), and each chat's answers at once equal its answers alone. Returns the
 * problems found (empty when it holds).
 * @param {Awaited<ReturnType<typeof atOnceAndAlone>>} run
 */
export function problems(run) {
  const found = [];
  for (const [c, turns] of run.together.entries()) {
    for (const [i, t] of turns.entries()) {
      if (i === 0) continue;
      const before = turns[i - 1].promptTokens;
      if (t.prefill !== 'hit' || t.reused < before) {
        found.push(`chat ${c} turn ${i + 1}: x-knot-prefill ${t.prefill}, reused ${t.reused} of the previous prompt's ${before}`);
      }
    }
    const alone = run.alone[c].map((t) => t.answer);
    const at = turns.map((t) => t.answer);
    if (JSON.stringify(alone) !== JSON.stringify(at)) found.push(`chat ${c}: answers at once ${JSON.stringify(at)} differ from alone ${JSON.stringify(alone)}`);
  }
  return found;
}
