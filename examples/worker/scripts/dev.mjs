// `npm start`: the Worker on 127.0.0.1:${PORT:-8787} in workerd (Miniflare), the default model
// in its local R2 bucket.
//   npm start [-- --profile local|prod|prod-far] [--subrequests free|N]
// `--profile` simulates production's costs (scripts/profiles.mjs; default local: none).
import { startLocal } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

let profile;
try {
  [profile] = profilesFromArgs(process.argv.slice(2), { fallback: 'local' });
} catch (e) {
  console.error(`knot worker: ${e.message}`);
  process.exit(2);
}
const port = Number(process.env.PORT ?? 8787);
const local = await startLocal({ port, profile });
console.log(`knot worker: ${local.url}  (GET /health, POST /v1/chat/completions; Ctrl-C stops)`);
console.log(`profile ${describeProfile(profile)}`);
const stop = async () => {
  await local.dispose();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
