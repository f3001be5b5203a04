// The Worker isolate's JS heap, read through workerd's V8 inspector (Miniflare's inspectorPort):
// local workerd enforces no memory limit, so what the isolate holds is measured here — the JS
// heap and the array buffers it keeps (R2 answers not yet collected); the wasm memory is
// reported by the Worker itself (/stats).
import { createServer } from 'node:net';
import WebSocket from 'ws';

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Connects to the user worker's isolate.
 * @param {number} port the inspector port
 */
export async function inspectIsolate(port) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const target = targets.find((t) => t.title.includes('core:user:'));
  if (!target) throw new Error(`no user worker among the inspector's targets: ${targets.map((t) => t.title).join(', ')}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  let next = 0;
  const pending = new Map();
  ws.on('message', (data) => {
    const msg = JSON.parse(String(data));
    const done = pending.get(msg.id);
    if (done) {
      pending.delete(msg.id);
      done(msg);
    }
  });
  const call = (method, params = {}) => new Promise((resolve, reject) => {
    const id = ++next;
    const timer = setTimeout(() => {
      pending.delete(id);
      reject(new Error(`${method}: no answer from the inspector`));
    }, 5000);
    pending.set(id, (msg) => {
      clearTimeout(timer);
      if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
      else resolve(msg.result);
    });
    ws.send(JSON.stringify({ id, method, params }));
  });
  return {
    /**
     * The JS heap's size and the array buffers it holds now (R2 answers count there until
     * collected; workerd's inspector does not run a collection on request).
     * @returns {Promise<{ heapBytes: number, buffersBytes: number }>}
     */
    async heap() {
      const u = await call('Runtime.getHeapUsage');
      return { heapBytes: u.totalSize, buffersBytes: u.backingStorageSize ?? 0 };
    },
    /**
     * Samples `heap()` every `ms` until `stop()`, keeping the largest heap + buffers seen.
     * @param {number} ms
     */
    sampler(ms = 25) {
      let peak = { heapBytes: 0, buffersBytes: 0 };
      let running = true;
      const loop = (async () => {
        while (running) {
          const h = await this.heap();
          if (h.heapBytes + h.buffersBytes > peak.heapBytes + peak.buffersBytes) peak = h;
          await new Promise((resolve) => setTimeout(resolve, ms));
        }
      })();
      return {
        stop: async () => {
          running = false;
          await loop;
          return peak;
        },
      };
    },
    close: () => ws.close(),
  };
}
