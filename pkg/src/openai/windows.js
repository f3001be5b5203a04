// Explicit prefill windows: a client prefills a prompt it will send again (a long system prompt,
// a document, a conversation so far) and names the window in the completions that follow
// (header `x-knot-prefill-window: ID`); those prefill only what comes after it. Exact prefix only:
// a prompt that does not start with the window's tokens, an expired window or a failed restore
// falls back to a cold prefill, reported in `x-knot-prefill`.
//
//   POST   /prefill/windows        { messages | prompt, ttl_ms? } → { id, tokens, expires_at }
//   GET    /prefill/windows/:id
//   PATCH  /prefill/windows/:id    { messages | prompt (extending it), ttl_ms? }
//   DELETE /prefill/windows/:id
import { ApiError, badRequest, toApiError } from './errors.js';
import { readJson } from './request.js';

const FIELDS = new Set(['model', 'messages', 'prompt', 'ttl_ms']);

/** A window as the API shows it. */
const shown = (w) => ({
  id: w.id,
  object: 'prefill.window',
  tokens: w.tokens,
  expires_at: Math.floor(w.expiresAt / 1000),
  expires_in_ms: Math.max(0, Math.round(w.expiresAt - Date.now())),
});

/**
 * The prompt of a window request: chat messages (the conversation so far, rendered without the
 * assistant turn's opening), text, or token ids — as the backend takes it.
 * @param {Record<string, unknown>} body
 */
function promptOf(body) {
  if (body.messages !== undefined) {
    if (!Array.isArray(body.messages) || body.messages.length === 0 || body.messages.some((m) =>
      typeof m !== 'object' || m === null || typeof m.role !== 'string' || typeof m.content !== 'string')) {
      throw badRequest("'messages' must be a non-empty list of { role, content } with text content", 'messages', 'invalid_value');
    }
    return { messages: body.messages.map((m) => ({ role: m.role === 'developer' ? 'system' : m.role, content: m.content })), addGenerationPrompt: false };
  }
  if (typeof body.prompt === 'string' && body.prompt !== '') return body.prompt;
  if (Array.isArray(body.prompt) && body.prompt.length > 0 && body.prompt.every((t) => Number.isInteger(t) && t >= 0 && t <= 0xffffffff)) {
    return Uint32Array.from(body.prompt);
  }
  throw badRequest("Give 'messages' or 'prompt' (text or token ids)", 'prompt', 'invalid_value');
}

/** `ttl_ms`, if given. */
function ttlOf(body) {
  if (body.ttl_ms === undefined || body.ttl_ms === null) return undefined;
  if (!Number.isInteger(body.ttl_ms) || body.ttl_ms < 1 || body.ttl_ms > 3_600_000) {
    throw badRequest("'ttl_ms' must be an integer from 1 to 3600000", 'ttl_ms', 'invalid_value');
  }
  return body.ttl_ms;
}

/**
 * Answers a /prefill/windows route.
 * @param {import('../types/openai.js').Backend} backend
 * @param {Request} request
 * @param {string} pathname
 * @param {{ prefillWindows: boolean, maxBodyBytes: number, signal?: AbortSignal, tag?: unknown, modelId: string }} s
 */
export async function windowRoute(backend, request, pathname, s) {
  if (!s.prefillWindows) {
    throw new ApiError(404, 'Prefill windows are disabled on this server (KNOT_PREFILL_WINDOWS=0)', { code: 'prefill_windows_disabled' });
  }
  const id = pathname === '/prefill/windows' ? null : decodeURIComponent(pathname.slice('/prefill/windows/'.length));
  const missing = () => new ApiError(404, `No prefill window '${id}' (it expired, was replaced or deleted)`, { code: 'not_found', param: 'id' });
  if (request.method === 'GET') {
    const w = backend.prefillWindow(/** @type {string} */ (id));
    if (w === null) throw missing();
    return Response.json(shown(w));
  }
  if (request.method === 'DELETE') {
    if (!backend.deletePrefillWindow(/** @type {string} */ (id))) throw missing();
    return Response.json({ id, object: 'prefill.window.deleted', deleted: true });
  }
  const body = await readJson(request, s.maxBodyBytes);
  const extra = Object.keys(body).find((k) => !FIELDS.has(k));
  if (extra !== undefined) throw badRequest(`Unrecognized request argument supplied: ${extra}`, extra, 'unknown_parameter');
  if (body.model !== undefined && body.model !== s.modelId) {
    throw new ApiError(404, `The model '${body.model}' does not exist (this server has '${s.modelId}')`, { param: 'model', code: 'model_not_found' });
  }
  const ttlMs = ttlOf(body);
  const patch = request.method === 'PATCH';
  const prompt = patch && body.messages === undefined && body.prompt === undefined ? null : promptOf(body);
  // A prefill runs the model: it waits in the backend's line like a generation.
  const signal = s.signal ?? request.signal;
  const tag = s.tag;
  try {
    if (patch) {
      const w = await backend.updatePrefillWindow(/** @type {string} */ (id), { ...(prompt === null ? {} : { prompt }), ...(ttlMs === undefined ? {} : { ttlMs }), signal, tag });
      if (w === null) throw missing();
      return Response.json(shown(w));
    }
    const w = await backend.createPrefillWindow(/** @type {any} */ (prompt), { ...(ttlMs === undefined ? {} : { ttlMs }), signal, tag });
    return Response.json({ ...shown(w), replaced: w.replaced ?? null }, { status: 201 });
  } catch (e) {
    throw toApiError(e, body.messages !== undefined ? 'messages' : 'prompt');
  }
}
