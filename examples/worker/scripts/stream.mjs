// One streamed completion against a local Worker, as the benches time it: the time to the first
// content chunk, then decode tokens per second over the rest.

/**
 * @param {string} url the Worker
 * @param {string} path `/v1/chat/completions` or `/v1/completions`
 * @param {object} body the request (`stream` and `stream_options` are added)
 */
export async function streamOnce(url, path, body) {
  const t0 = performance.now();
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let first;
  let usage;
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    for (let i; (i = buffer.indexOf('\n\n')) >= 0;) {
      const event = buffer.slice(0, i);
      buffer = buffer.slice(i + 2);
      if (!event.startsWith('data: {')) continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices?.[0];
      if (first === undefined && (choice?.delta?.content || choice?.text)) first = performance.now();
    }
  }
  const end = performance.now();
  return { firstMs: first - t0, decodeTokS: (usage.completion_tokens - 1) / ((end - first) / 1000), tokens: usage.completion_tokens };
}
