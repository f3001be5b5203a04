// `npm start`: the Worker on 127.0.0.1:${PORT:-8787} in workerd (Miniflare), the default model
// in its local R2 bucket.
//   npm start [-- --profile local|prod|prod-far] [--subrequests free|N] [--from DIR]
// `--profile` simulates production's costs (scripts/profiles.mjs; default local: none).
// `--from DIR` runs a directory `knot-cloudflare plan` wrote instead (its plan.json, coordinator
// and station configs: what `deploy` uploads), whatever its topology.
// Without it, wrangler.toml (the shipped single Worker); a model as it deploys: plan it, then --from.
import { describeRun, fromArg, startFromDir } from './cloudflare/miniflare.mjs';
import { startLocal } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

let profile;
let from;
try {
  [profile] = profilesFromArgs(process.argv.slice(2), { fallback: 'local' });
  from = fromArg(process.argv.slice(2));
} catch (e) {
  console.error(`knot worker: ${e.message}`);
  process.exit(2);
}
const port = Number(process.env.PORT ?? 8787);
/** A directory that is not a plan's, or a config this harness does not translate: a message. */
const fromDir = () => startFromDir(from, { port, profile, quiet: false }).catch((e) => {
  console.error(`knot worker: ${e.message}`);
  process.exit(1);
});
const local = from ? await fromDir() : await startLocal({ port, profile });
const what = from ? `topology ${local.plan.topology} from ${from}; ` : '';
console.log(`knot worker: ${local.url}  (${what}GET /health, POST /v1/chat/completions; Ctrl-C stops)`);
if (from) console.log(describeRun(local));
console.log(`profile ${describeProfile(profile)}`);
const stop = async () => {
  await local.dispose();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
