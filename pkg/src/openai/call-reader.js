// Reads a tool call's JSON as the model writes it, so a stream can send the call's name as soon as
// it is complete and its arguments in fragments as they come. The text is valid by construction
// (a COLTRANE schema mask writes it), so this only follows the structure; it never repairs.
//
//   root 'call'      { "name": "<tool>", "arguments": { ... } }
//   root 'envelope'  { "tool_call": { "name": …, "arguments": … } } or { "response": "<text>" }
//
// Events from push(): { type: 'content', text } (the response's text, decoded), { type: 'name',
// name }, { type: 'arguments', text } (raw JSON, in pieces), { type: 'end' } (the call closed).

const SIMPLE_ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const WHITESPACE = ' \t\n\r';

export class CallReader {
  /** @param {'call' | 'envelope'} root */
  constructor(root) {
    this.root = root;
    /** @type {{ type: 'object' | 'array', key: string | null, expect: 'key' | 'colon' | 'value' | 'comma' }[]} */
    this.stack = [];
    this.done = false;
    /** The string being read: what it is for, its decoded text so far, a pending escape. */
    this.str = null;
    /** A number or literal being read. */
    this.primitive = false;
    /** Depth of the frame whose value the arguments are, while they are being copied. */
    this.capture = -1;
    this.events = [];
  }

  /** The depth of the call object's frame (1-based length of the stack when it is on top). */
  get callDepth() {
    return this.root === 'call' ? 1 : 2;
  }

  /**
   * @param {string} text
   * @returns {({ type: 'content' | 'arguments', text: string } | { type: 'name', name: string } | { type: 'end' })[]}
   */
  push(text) {
    this.events = [];
    for (const ch of text) this.#char(ch);
    return this.events;
  }

  #emit(type, text) {
    const last = this.events[this.events.length - 1];
    if (last !== undefined && last.type === type) last.text += text;
    else this.events.push({ type, text });
  }

  #char(ch) {
    if (this.done) return;
    const copying = this.capture >= 0;
    if (this.str !== null) {
      if (copying) this.#emit('arguments', ch);
      this.#stringChar(ch);
      return;
    }
    if (this.primitive) {
      if (!(WHITESPACE.includes(ch) || ch === ',' || ch === '}' || ch === ']')) {
        if (copying) this.#emit('arguments', ch);
        return;
      }
      this.primitive = false;
      this.#valueDone();
    }
    if (WHITESPACE.includes(ch)) {
      if (this.capture >= 0 && this.stack.length > this.capture) this.#emit('arguments', ch);
      return;
    }
    const top = this.stack[this.stack.length - 1];
    if (top !== undefined && (top.expect === 'key' || top.expect === 'colon' || top.expect === 'comma')) {
      if (this.capture >= 0) this.#emit('arguments', ch);
      if (ch === '"' && top.expect === 'key') this.str = { role: 'key', text: '', escape: '' };
      else if (ch === ':') top.expect = 'value';
      else if (ch === ',') top.expect = top.type === 'object' ? 'key' : 'value';
      else if (ch === '}' || ch === ']') this.#close();
      return;
    }
    if (top !== undefined && top.type === 'array' && ch === ']') {
      if (this.capture >= 0) this.#emit('arguments', ch);
      this.#close();
      return;
    }
    this.#valueStart(ch);
  }

  /** A value begins with `ch` in the frame on top (or at the root). */
  #valueStart(ch) {
    const top = this.stack[this.stack.length - 1];
    const key = top?.type === 'object' ? top.key : null;
    if (this.capture < 0 && key === 'arguments' && this.stack.length === this.callDepth) {
      this.capture = this.stack.length;
    }
    if (this.capture >= 0) this.#emit('arguments', ch);
    let role = 'value';
    if (this.capture < 0 && top !== undefined && this.stack.length === this.callDepth && key === 'name') role = 'name';
    if (this.capture < 0 && this.root === 'envelope' && this.stack.length === 1 && key === 'response') role = 'content';
    if (ch === '{') this.stack.push({ type: 'object', key: null, expect: 'key' });
    else if (ch === '[') this.stack.push({ type: 'array', key: null, expect: 'value' });
    else if (ch === '"') this.str = { role, text: '', escape: '' };
    else this.primitive = true;
  }

  #stringChar(ch) {
    const s = /** @type {{ role: string, text: string, escape: string }} */ (this.str);
    let out = '';
    if (s.escape !== '') {
      s.escape += ch;
      if (s.escape.length === 2 && s.escape[1] !== 'u') {
        out = SIMPLE_ESCAPES[s.escape[1]] ?? '';
        s.escape = '';
      } else if (s.escape.length === 6) {
        out = String.fromCharCode(parseInt(s.escape.slice(2), 16));
        s.escape = '';
      }
    } else if (ch === '\\') {
      s.escape = ch;
    } else if (ch === '"') {
      this.str = null;
      this.#stringDone(s);
      return;
    } else {
      out = ch;
    }
    if (out === '') return;
    s.text += out;
    if (s.role === 'content') {
      // A high surrogate waits for its pair, so no piece holds half a character.
      const code = out.charCodeAt(out.length - 1);
      if (code >= 0xd800 && code <= 0xdbff) return;
      this.#emit('content', s.text);
      s.text = '';
    }
  }

  #stringDone(s) {
    if (s.role === 'key') {
      const top = this.stack[this.stack.length - 1];
      top.key = s.text;
      top.expect = 'colon';
      return;
    }
    if (s.role === 'name') this.events.push({ type: 'name', name: s.text });
    if (s.role === 'content' && s.text !== '') this.#emit('content', s.text);
    this.#valueDone();
  }

  /** The frame on top closes with its bracket. */
  #close() {
    this.stack.pop();
    if (this.stack.length + 1 === this.callDepth && this.capture < 0) this.events.push({ type: 'end' });
    this.#valueDone();
  }

  /** A value just ended: its frame expects a comma or its close; the arguments may be complete. */
  #valueDone() {
    if (this.capture >= 0 && this.stack.length <= this.capture) this.capture = -1;
    const top = this.stack[this.stack.length - 1];
    if (top === undefined) this.done = true;
    else top.expect = 'comma';
  }
}
