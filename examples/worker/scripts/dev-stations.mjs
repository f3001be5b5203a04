// `npm run start:stations`: the model split across stations on 127.0.0.1:${PORT:-8788} in
// workerd (Miniflare): the coordinator Worker with the OpenAI routes, and each station a Durable
// Object in an isolate of its own. LAYERS (default 2) layer stations, HEADS (default 2) head
// shards; MODEL_KEY picks a knot from models/ (default: the Worker's model).
//   npm run start:stations [-- --profile local|prod|prod-far] [--subrequests free|N] [--from DIR]
// `--profile` simulates production's costs in every isolate (scripts/profiles.mjs; default local).
// `--from DIR` runs a directory `knot-cloudflare plan` wrote instead (its plan.json, coordinator
// and station configs: what `deploy` uploads); LAYERS, HEADS and MODEL_KEY do not apply then.
import { join } from 'node:path';
import { describeRun, fromArg, startFromDir } from './cloudflare/miniflare.mjs';
import { REPO, startStations } from './local.mjs';
import { describeProfile, profilesFromArgs } from './profiles.mjs';

let profile;
let from;
try {
  [profile] = profilesFromArgs(process.argv.slice(2), { fallback: 'local' });
  from = fromArg(process.argv.slice(2));
} catch (e) {
  console.error(`knot stations: ${e.message}`);
  process.exit(2);
}

const port = Number(process.env.PORT ?? 8788);
let local;
if (from) {
  // A directory that is not a plan's, or a config this harness does not translate: a message.
  local = await startFromDir(from, { port, profile, quiet: false }).catch((e) => {
    console.error(`knot stations: ${e.message}`);
    process.exit(1);
  });
  console.log(`knot stations: ${local.url}  (topology ${local.plan.topology} from ${from}; GET /stations, POST /v1/chat/completions; Ctrl-C stops)`);
  console.log(describeRun(local));
} else {
  const key = process.env.MODEL_KEY;
  local = await startStations({
    port,
    layers: Number(process.env.LAYERS ?? 2),
    heads: Number(process.env.HEADS ?? 2),
    profile,
    ...(key ? { modelKey: key, modelFile: join(REPO, 'models', key), vars: { MODEL_ID: key.replace(/\.knot$/, '') } } : {}),
  });
  console.log(`knot stations: ${local.url}  (${local.stations.map((s) => s.name).join(', ')}; GET /stations, POST /v1/chat/completions; Ctrl-C stops)`);
}
console.log(`profile ${describeProfile(profile)}`);
const stop = async () => {
  await local.dispose();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
