// `npm start`: the Worker on 127.0.0.1:${PORT:-8787} in workerd (Miniflare), the default model
// in its local R2 bucket.
import { startLocal } from './local.mjs';

const port = Number(process.env.PORT ?? 8787);
const local = await startLocal({ port });
console.log(`knot worker: ${local.url}  (GET /health, POST /v1/chat/completions; Ctrl-C stops)`);
const stop = async () => {
  await local.dispose();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
