// The agentic loop: a chat request that opted in runs tools on MCP servers and gets the final
// answer. Each step is one model turn over the conversation so far; the model's calls (valid by
// construction: the tool-calling masks) go to their servers; the results come back as `tool`
// messages; the next turn reads them. Four gates decide, each reported in the response's `knot`
// object:
//
//   C0 admission    tools available (preflight, or the request's own), budgets set
//   C1 validity     each call's arguments checked against its tool's schema (the mask guarantees
//                   it; the gate still looks)
//   C2 outcome      each call's result: ok, or error / timeout / oversized — the model reads a
//                   tool error naming the cause, and the loop goes on
//   C3 termination  per step: go on, or stop — answered, step limit, token or time budget, the
//                   same call repeated, a call the client must run
//
// Stopping early still answers: the step limit and a repeated call end with one more turn with
// the tools withdrawn, so the model answers from what it has. The model is held only while it
// generates (the line's lease is released during tool calls).
import { ApiError, badRequest } from './errors.js';
import { McpConnection, McpConfigError, ToolsCache, allowed, canSpawn, namespaced, parseAllowList, parseMcpServers, requestConfigError, scrub, serverOf } from './mcp.js';
import { ownResource, toolPlan } from './tools.js';
import { schemaProblem } from '../helpers.js';

/** @typedef {import('./mcp.js').McpServer} McpServer */
/** @typedef {import('./mcp.js').McpTool} McpTool */

/** Default budgets, and the most a request may ask (the server's settings may lower them). */
const DEFAULTS = {
  maxSteps: 4, maxTotalTokens: 16384, maxMs: 60_000, toolTimeoutMs: 10_000,
  maxResultBytes: 256 * 1024, maxResultChars: 4000, toolsTtlMs: 0, preflightTimeoutMs: 5000,
};

const ON = new Set(['1', 'true', 'on', 'tools', 'auto']);
const OFF = new Set(['0', 'false', 'off']);

/**
 * The server's agentic settings from its environment (the Worker's vars and secrets, knot-serve's
 * process environment):
 *
 *   KNOT_AGENTIC              1 | on: every chat request runs the loop (a request may opt out);
 *                             unset: a request opts in; 0 | off: never
 *   KNOT_MCP_SERVERS          JSON list of { name, url, headers }
 *   KNOT_AGENTIC_ALLOW        URL prefixes (comma-separated, or *) the loop may call; unset,
 *                             only the configured servers, and requests may not name others
 *   KNOT_AGENTIC_MAX_STEPS, KNOT_AGENTIC_MAX_TOTAL_TOKENS, KNOT_AGENTIC_MAX_MS,
 *   KNOT_MCP_TIMEOUT_MS, KNOT_MCP_MAX_RESULT_BYTES, KNOT_MCP_TOOLS_TTL_MS
 *
 * Throws a McpConfigError naming the setting.
 * @param {Record<string, unknown>} env
 * @returns {import('../types/openai.js').AgenticOptions}
 */
export function agenticFromEnv(env) {
  const str = (k) => (typeof env[k] === 'string' && env[k] !== '' ? /** @type {string} */ (env[k]) : undefined);
  const num = (k, lo, hi) => {
    const v = str(k);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new McpConfigError(`${k} must be an integer from ${lo} to ${hi}, got '${v}'`, k);
    return n;
  };
  const mode = str('KNOT_AGENTIC')?.toLowerCase();
  if (mode !== undefined && !ON.has(mode) && !OFF.has(mode) && mode !== 'request') {
    throw new McpConfigError(`KNOT_AGENTIC must be 1, 0 or request, got '${mode}'`, 'KNOT_AGENTIC');
  }
  // A Worker's var may hold the list itself (wrangler [vars] take JSON values), a secret its text.
  const servers = Array.isArray(env.KNOT_MCP_SERVERS) ? env.KNOT_MCP_SERVERS : str('KNOT_MCP_SERVERS');
  return {
    mode: mode === undefined || mode === 'request' ? 'request' : ON.has(mode) ? 'on' : 'off',
    servers: servers === undefined ? [] : parseMcpServers(servers, 'KNOT_MCP_SERVERS', { stdio: canSpawn() }),
    allow: parseAllowList(str('KNOT_AGENTIC_ALLOW')),
    maxSteps: num('KNOT_AGENTIC_MAX_STEPS', 2, 64),
    maxTotalTokens: num('KNOT_AGENTIC_MAX_TOTAL_TOKENS', 1, 1 << 24),
    maxMs: num('KNOT_AGENTIC_MAX_MS', 1, 3_600_000),
    toolTimeoutMs: num('KNOT_MCP_TIMEOUT_MS', 1, 600_000),
    maxResultBytes: num('KNOT_MCP_MAX_RESULT_BYTES', 1024, 64 << 20),
    toolsTtlMs: num('KNOT_MCP_TOOLS_TTL_MS', 0, 3_600_000),
  };
}

/**
 * The server's settings, checked once, with the tools cache they share across requests.
 * @param {import('../types/openai.js').AgenticOptions | undefined} o
 */
export function agenticSettings(o) {
  const s = { ...DEFAULTS, mode: 'request', servers: [], allow: null };
  for (const [k, v] of Object.entries(o ?? {})) if (v !== undefined) s[k] = v;
  if (!['on', 'off', 'request'].includes(s.mode)) throw new TypeError(`agentic.mode must be on, off or request, got '${s.mode}'`);
  s.servers = parseMcpServers(s.servers, 'agentic.servers', { stdio: canSpawn() });
  for (const server of s.servers) {
    // The allow-list is of URLs; a command is the owner's own configuration.
    if (server.url !== undefined && s.allow !== null && !allowed(server.url, s.allow)) {
      throw new McpConfigError(`The MCP server '${server.name}' is not in the allow-list (KNOT_AGENTIC_ALLOW)`, 'agentic.servers');
    }
  }
  return { ...s, cache: new ToolsCache(s.toolsTtlMs) };
}

/**
 * The legacy endpoint has no loop: a request whose header asks for one is told so.
 * @param {Request} request
 */
export function refuseAgentic(request) {
  const header = request.headers.get('x-knot-agentic')?.trim().toLowerCase();
  if (header !== undefined && !OFF.has(header)) {
    throw badRequest('The agentic loop runs on /v1/chat/completions, /v1/responses and /v1/messages only', null, 'agentic_chat_only');
  }
}

/**
 * Whether a chat request runs the loop: the server's mode, then the request's header
 * (`x-knot-agentic`) and body (`knot.agentic`), the body deciding when both speak.
 * @param {ReturnType<typeof agenticSettings>} s
 * @param {Request} request
 * @param {undefined | false | { budgets: Record<string, number>, mcpServers?: unknown, only?: string[] }} field
 * @returns {null | { via: 'server' | 'header' | 'body', budgets: Record<string, number>, mcpServers?: unknown, only?: string[] }}
 */
export function agenticOptIn(s, request, field) {
  const header = request.headers.get('x-knot-agentic')?.trim().toLowerCase() ?? null;
  if (header !== null && !ON.has(header) && !OFF.has(header)) {
    throw badRequest(`The header x-knot-agentic must be tools, auto, 1, true (on) or 0, false, off, got '${header}'`, null, 'invalid_value');
  }
  const asked = field !== undefined ? field !== false : header !== null ? ON.has(header) : null;
  if (s.mode === 'off') {
    if (asked === true) throw new ApiError(400, 'The agentic loop is off on this server (KNOT_AGENTIC=0)', { param: 'knot.agentic', code: 'agentic_disabled' });
    return null;
  }
  if (asked === false || (asked === null && s.mode !== 'on')) return null;
  const via = field !== undefined ? 'body' : header !== null ? 'header' : 'server';
  return {
    via,
    budgets: field ? field.budgets : {},
    ...(field && field.mcpServers !== undefined ? { mcpServers: field.mcpServers } : {}),
    ...(field && field.only !== undefined ? { only: field.only } : {}),
  };
}

/**
 * C0: the servers of this request (configured, and any it names that the allow-list lets in), the
 * budgets within the server's caps, and the tools — the request's own when it brings tools (no
 * preflight: a tool named `server__tool` runs on that server, others are the client's), otherwise
 * every server's listing (lazily, now, in parallel; a server that fails is reported and skipped).
 * @param {ReturnType<typeof agenticSettings>} s
 * @param {NonNullable<ReturnType<typeof agenticOptIn>>} optIn
 * @param {{ tools: import('./tools.js').Tool[], toolChoice: import('./tools.js').ToolChoice, toolChoiceGiven: boolean }} req
 * @param {AbortSignal} signal
 * @param {boolean | string[]} [scope] the MCP servers the request's key may reach: all the server
 *   allows (true), or those configured servers only (a list)
 */
export async function admit(s, optIn, req, signal, scope = true) {
  if (scope === false) scope = [];
  const t0 = Date.now();
  let extra = [];
  const notInScope = (message, param) => new ApiError(403, message, { type: 'permission_error', param, code: 'mcp_server_not_allowed' });
  if (scope !== true && optIn.mcpServers !== undefined) {
    throw notInScope('This API key may reach only the configured MCP servers its scope names', 'knot.agentic.mcp_servers');
  }
  if (optIn.mcpServers !== undefined) {
    try {
      extra = parseMcpServers(optIn.mcpServers, 'knot.agentic.mcp_servers');
    } catch (e) {
      throw requestConfigError(e);
    }
    if (s.allow === null && extra.length > 0) {
      throw new ApiError(400, 'This server does not let requests name MCP servers (set KNOT_AGENTIC_ALLOW to allow some)',
        { param: 'knot.agentic.mcp_servers', code: 'mcp_server_not_allowed' });
    }
    for (const [i, server] of extra.entries()) {
      if (!allowed(server.url, /** @type {string[]} */ (s.allow))) {
        throw new ApiError(400, `knot.agentic.mcp_servers[${i}] is not in this server's allow-list`,
          { param: `knot.agentic.mcp_servers[${i}].url`, code: 'mcp_server_not_allowed' });
      }
      if (s.servers.some((c) => c.name === server.name)) {
        throw badRequest(`knot.agentic.mcp_servers[${i}].name '${server.name}' is a configured server's name`, `knot.agentic.mcp_servers[${i}].name`, 'invalid_value');
      }
    }
  }
  for (const [i, name] of (optIn.only ?? []).entries()) {
    if (!s.servers.some((c) => c.name === name)) {
      throw badRequest(`knot.agentic.servers[${i}] '${name}' is not a configured MCP server`, `knot.agentic.servers[${i}]`, 'invalid_value');
    }
  }
  if (scope !== true) {
    for (const [i, name] of (optIn.only ?? []).entries()) {
      if (!scope.includes(name)) throw notInScope(`This API key may not reach the MCP server '${name}' (its scope)`, `knot.agentic.servers[${i}]`);
    }
  }
  const inScope = scope === true ? s.servers : s.servers.filter((c) => scope.includes(c.name));
  const configured = optIn.only === undefined ? inScope : inScope.filter((c) => optIn.only?.includes(c.name));
  const servers = [...configured, ...extra];
  const budgets = {
    maxSteps: capped(optIn.budgets.max_steps, s.maxSteps, 'max_steps'),
    maxTotalTokens: capped(optIn.budgets.max_total_tokens, s.maxTotalTokens, 'max_total_tokens'),
    maxMs: capped(optIn.budgets.max_ms, s.maxMs, 'max_ms'),
    toolTimeoutMs: capped(optIn.budgets.tool_timeout_ms, s.toolTimeoutMs, 'tool_timeout_ms'),
    maxResultBytes: s.maxResultBytes,
    maxResultChars: s.maxResultChars,
  };
  const connections = new Map(servers.map((server) => [server.name, new McpConnection(server, { maxResultBytes: s.maxResultBytes })]));
  const close = () => Promise.all([...connections.values()].map((c) => c.close())).then(() => {});
  /** @type {McpTool[]} */
  const mcpTools = [];
  /** @type {import('./tools.js').Tool[]} */
  const clientTools = [];
  /** @type {{ name: string, ok: boolean, tools: number, cached?: boolean, ms?: number, error?: string }[]} */
  let report = [];
  const fromRequest = req.tools.length > 0;
  if (fromRequest) {
    for (const t of req.tools) {
      const server = serverOf(t.name, servers);
      if (server === null) clientTools.push(t);
      else mcpTools.push({ name: t.name, server: server.name, tool: t.name.slice(server.name.length + 2), description: t.description, parameters: t.parameters, schema: t.parameters });
    }
    report = servers.map((server) => ({ name: server.name, ok: true, tools: mcpTools.filter((t) => t.server === server.name).length }));
  } else {
    const listings = await Promise.all(servers.map(async (server) => {
      const cached = s.cache.get(server);
      if (cached !== undefined) return { server, tools: cached, cached: true, ms: 0 };
      const t = Date.now();
      try {
        const tools = await /** @type {McpConnection} */ (connections.get(server.name)).listTools({
          signal, timeoutMs: Math.min(s.preflightTimeoutMs, budgets.toolTimeoutMs),
        });
        s.cache.set(server, tools);
        return { server, tools, cached: false, ms: Date.now() - t };
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        return { server, error: scrub(String(e?.message ?? e), server), ms: Date.now() - t };
      }
    }));
    for (const l of listings) {
      if (l.tools === undefined) {
        report.push({ name: l.server.name, ok: false, tools: 0, ms: l.ms, error: l.error });
        continue;
      }
      // A tool whose parameters COLTRANE cannot enforce is left out, with why; the server's
      // other tools stay offered.
      const offered = [];
      const leftOut = [];
      for (const t of namespaced(l.server.name, l.tools)) {
        const problem = schemaProblem(ownResource(t.parameters, t.name));
        if (problem === null) offered.push(t);
        else leftOut.push({ tool: t.name, reason: problem });
      }
      mcpTools.push(...offered);
      report.push({
        name: l.server.name, ok: true, tools: offered.length, ...(leftOut.length > 0 ? { left_out: leftOut } : {}), cached: l.cached, ms: l.ms,
      });
    }
  }
  if (typeof req.toolChoice === 'object' && !mcpTools.some((t) => t.name === req.toolChoice.name) && !clientTools.some((t) => t.name === req.toolChoice.name)) {
    await close();
    throw badRequest(`'tool_choice' names '${req.toolChoice.name}', which no tool of the request or its servers has`, 'tool_choice', 'invalid_value');
  }
  const choice = req.toolChoiceGiven ? req.toolChoice : 'auto';
  const reason = servers.length === 0 ? 'no MCP server is configured or named by the request'
    : mcpTools.length === 0 ? (fromRequest ? "none of the request's tools is a server's (server__tool)" : 'no server listed a tool')
      : choice === 'none' ? "the request's tool_choice is 'none'"
        : null;
  const C0 = {
    admitted: reason === null,
    ...(reason === null ? {} : { reason }),
    via: optIn.via,
    preflight: !fromRequest,
    servers: report,
    tools: mcpTools.length + clientTools.length,
    budgets: {
      max_steps: budgets.maxSteps, max_total_tokens: budgets.maxTotalTokens, max_ms: budgets.maxMs,
      tool_timeout_ms: budgets.toolTimeoutMs, max_result_bytes: budgets.maxResultBytes,
    },
    ms: Date.now() - t0,
  };
  // Not admitted: the request runs as the plain API, and the sessions a preflight opened end now.
  if (!C0.admitted) await close();
  return { C0, budgets, servers, connections, mcpTools, clientTools, choice, startedAt: t0, close };
}

/** A request's budget within the server's cap (a request asking more is refused, naming it). */
function capped(asked, cap, name) {
  if (asked === undefined) return cap;
  if (asked > cap) throw badRequest(`'knot.agentic.${name}' is ${asked}, more than this server's limit of ${cap}`, `knot.agentic.${name}`, 'invalid_value');
  return asked;
}

/** A call's identity for C3's repeat rule: its tool and its arguments with keys in order. */
function callKey(name, args) {
  const canon = (v) => (Array.isArray(v) ? v.map(canon)
    : typeof v === 'object' && v !== null ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])])) : v);
  return `${name} ${JSON.stringify(canon(args))}`;
}

let schemaValidator = null;
/** Each tool schema's validator, made once (a request's tools keep their schema objects). */
const validators = new WeakMap();
/** @cfworker/json-schema's validator (loaded with the SDK; interprets, compiles nothing). */
async function validatorFor(schema) {
  schemaValidator ??= import('@cfworker/json-schema').then((m) => m.Validator, (e) => {
    schemaValidator = null;
    throw new ApiError(501, `The agentic loop needs the package @cfworker/json-schema (${e.message})`, { code: 'mcp_unavailable' });
  });
  const Validator = await schemaValidator;
  let v = validators.get(schema);
  if (v === undefined) {
    v = new Validator(schema, '2020-12', false);
    validators.set(schema, v);
  }
  return v;
}

/** C1: a call's arguments against its tool's schema. */
async function checkCall(tool, argsText) {
  if (tool === undefined) return { valid: false, error: 'no such tool' };
  let args;
  try {
    args = JSON.parse(argsText);
  } catch (e) {
    return { valid: false, error: `arguments are not JSON: ${e.message}` };
  }
  const r = (await validatorFor(tool.schema ?? tool.parameters)).validate(args);
  if (r.valid) return { valid: true, args };
  const first = r.errors.find((e) => e.keyword !== 'properties' && e.keyword !== 'anyOf') ?? r.errors[0];
  return { valid: false, error: `${first.instanceLocation}: ${first.error}` };
}

/** What the model reads of a result: the text, cut to the budget; an error naming its cause. */
function toolMessageText(outcome, text, maxChars) {
  const body = text.length > maxChars ? `${text.slice(0, maxChars)}\n[… ${text.length - maxChars} more characters cut]` : text;
  return outcome === 'ok' ? body : `Tool error (${outcome}): ${body}`;
}

/**
 * The loop, as a `respond` drive (generate.js).
 * @param {{
 *   backend: import('./index.js').Backend, req: any, template: { takesTools: boolean, callTag: string | null },
 *   session: Awaited<ReturnType<typeof admit>>,
 * }} a
 * @returns {(ctx: import('./generate.js').Turns) => Promise<{ finish: string, toolCalls: object[], knot: object }>}
 */
export function agenticDrive(a) {
  const { backend, req, session } = a;
  const { budgets, C0 } = session;
  const tools = [...session.mcpTools, ...session.clientTools];
  const byName = new Map(tools.map((t) => [t.name, t]));
  const mcpByName = new Map(session.mcpTools.map((t) => [t.name, t]));
  return async (ctx) => {
    const messages = [...req.messages];
    /** Messages the loop added: the client may append them to its history. */
    const added = [];
    const steps = [];
    const seen = new Set();
    let totalTokens = 0;
    let choice = session.choice;
    /** Why the next turn runs without tools (the model must answer), if it does. */
    let answerOnly = null;
    let stopped = null;
    /** @type {{ finish: string, toolCalls: object[] }} */
    let ending = { finish: 'length', toolCalls: [] };
    /** Ends a step with its C3 verdict: recorded, streamed, and for a stop, the loop's reason. */
    const endStep = (entry, C3, detail) => {
      entry.C3 = C3;
      ctx.emit({ agentic: { event: 'step_end', step: entry.step, C3 } });
      if (C3.verdict === 'stop') stopped = { reason: C3.reason, step: entry.step, ...(detail ? { detail } : {}) };
    };
    /** Runs a call on its server, within what is left of the wall-time budget. */
    const run = (mcp, args) => {
      const left = budgets.maxMs - (Date.now() - session.startedAt);
      const conn = /** @type {import('./mcp.js').McpConnection} */ (session.connections.get(mcp.server));
      return conn.callTool(mcp.tool, args, { signal: ctx.signal, timeoutMs: Math.max(1, Math.min(budgets.toolTimeoutMs, left)) });
    };
    ctx.emit({ agentic: { event: 'admission', C0 } });
    try {
      for (let step = 1; ; step++) {
        if (answerOnly === null && step === budgets.maxSteps) answerOnly = 'step_limit';
        const plan = toolPlan({
          messages, tools: answerOnly === null ? tools : [], toolChoice: answerOnly === null ? choice : 'answer', parallelToolCalls: req.parallelToolCalls,
        }, a.template);
        const prompt = { messages: plan.messages, ...(plan.templateTools === undefined ? {} : { tools: plan.templateTools }) };
        const promptTokens = backend.countTokens(prompt);
        const record = { step, tools_offered: plan.tools.length, tool_choice: answerOnly !== null ? 'answer' : typeof choice === 'object' ? { name: choice.name } : choice };
        // C3 before the turn: the budgets that forbid starting it.
        const elapsed = Date.now() - session.startedAt;
        const why = totalTokens + promptTokens > budgets.maxTotalTokens ? 'token_budget'
          : elapsed > budgets.maxMs ? 'time_budget'
            : ctx.remaining() <= 0 ? 'max_tokens' : null;
        if (why !== null) {
          const skipped = { ...record, skipped: true };
          steps.push(skipped);
          endStep(skipped, { verdict: 'stop', reason: why }, why === 'token_budget' ? `${totalTokens} tokens used, the next prompt has ${promptTokens}`
            : why === 'time_budget' ? `${elapsed} ms elapsed` : 'max_tokens reached');
          break;
        }
        ctx.emit({ agentic: { event: 'step', ...record } });
        const stepStart = Date.now();
        const before = ctx.remaining();
        const turn = await ctx.turn(prompt, plan);
        const generated = before - ctx.remaining();
        totalTokens += promptTokens + generated;
        const entry = { ...record, prompt_tokens: promptTokens, completion_tokens: generated, model_ms: Date.now() - stepStart, calls: [] };
        steps.push(entry);
        if (turn.calls.length === 0 && turn.content.trim() === '' && turn.finish !== 'length' && answerOnly === null && step > 1) {
          // Nothing said and no call (a model may end its turn right after a result): one more
          // turn, told to answer.
          answerOnly = 'empty_answer';
          endStep(entry, { verdict: 'continue', next: 'answer', reason: answerOnly });
          continue;
        }
        if (turn.calls.length === 0) {
          // The model answered (or ran out of max_tokens while answering).
          endStep(entry, { verdict: 'stop', reason: turn.finish === 'length' ? 'max_tokens' : answerOnly ?? 'answered' });
          ending = { finish: turn.finish, toolCalls: [] };
          break;
        }
        const clientCalls = [];
        /** The turn as the conversation keeps it: a call made before is left out (its result is there already). */
        const kept = { role: 'assistant', content: turn.content === '' ? null : turn.content, tool_calls: [] };
        const results = [];
        let repeated = false;
        for (const call of turn.calls) {
          const { name } = call.function;
          const C1 = await checkCall(byName.get(name), call.function.arguments);
          const mcp = mcpByName.get(name);
          const report = { id: call.id, name, ...(mcp ? { server: mcp.server, tool: mcp.tool } : { client: true }), C1: { valid: C1.valid, ...(C1.error ? { error: C1.error } : {}) } };
          entry.calls.push(report);
          ctx.emit({ agentic: { event: 'call', step, ...report } });
          if (mcp === undefined && C1.valid) {
            clientCalls.push(call);
            kept.tool_calls.push(call);
            continue;
          }
          const key = callKey(name, C1.args ?? call.function.arguments);
          if (C1.valid && seen.has(key)) {
            repeated = true;
            report.C2 = { outcome: 'repeated', ms: 0, bytes: 0, cause: 'the same call with the same arguments was made before; not run again' };
            ctx.emit({ agentic: { event: 'result', step, id: call.id, name, C2: report.C2 } });
            continue;
          }
          kept.tool_calls.push(call);
          const t = Date.now();
          let r;
          if (C1.valid) {
            seen.add(key);
            r = await run(/** @type {McpTool} */ (mcp), C1.args);
          } else {
            r = { outcome: 'invalid_arguments', text: `The arguments do not match the tool's schema: ${C1.error}`, bytes: 0 };
          }
          const content = toolMessageText(r.outcome, r.text, budgets.maxResultChars);
          report.C2 = {
            outcome: r.outcome, ms: Date.now() - t, bytes: r.bytes,
            ...(r.outcome === 'ok' ? (r.text.length > budgets.maxResultChars ? { truncated: true } : {}) : { cause: r.text }),
          };
          results.push({ role: 'tool', content, tool_call_id: call.id, name });
          ctx.emit({ agentic: { event: 'result', step, id: call.id, name, C2: report.C2, content: content.slice(0, 200) } });
        }
        if (kept.tool_calls.length > 0) {
          messages.push(kept, ...results);
          added.push(kept, ...results);
        }
        if (clientCalls.length > 0) {
          endStep(entry, { verdict: 'stop', reason: 'client_tool' }, `the client runs ${clientCalls.map((c) => c.function.name).join(', ')}`);
          ending = { finish: 'tool_calls', toolCalls: clientCalls };
          break;
        }
        if (answerOnly !== null) {
          // A call in an answer-only turn cannot happen (no tools offered); if it did, stop.
          endStep(entry, { verdict: 'stop', reason: answerOnly });
          break;
        }
        if (repeated) answerOnly = 'repeated_call';
        endStep(entry, { verdict: 'continue', ...(answerOnly !== null ? { next: 'answer', reason: answerOnly } : {}) });
        // `required` and a named tool hold for the first step; the model decides after it.
        choice = 'auto';
      }
    } finally {
      await session.close();
    }
    return {
      ...ending,
      knot: { agentic: { C0, steps, C3: stopped, total_tokens: totalTokens, ms: Date.now() - session.startedAt, messages: added } },
    };
  };
}
