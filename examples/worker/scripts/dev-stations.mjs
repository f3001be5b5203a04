// `npm run start:stations`: the model split across stations on 127.0.0.1:${PORT:-8788} in
// workerd (Miniflare): the coordinator Worker with the OpenAI routes, and each station a Durable
// Object in an isolate of its own.
//   npm run start:stations [-- --profile local|prod|prod-far] [--subrequests free|N] [--from DIR]
// By default the model as a user would deploy it: the Worker's model (MODEL_KEY picks another
// knot from models/) planned as `knot-cloudflare plan` plans it (scripts/cloudflare/plan.mjs, the
// default budget of 96 MiB an isolate) into .cloudflare/local/ (git-ignored, regenerated at each
// start), and that directory run (scripts/cloudflare/miniflare.mjs's startFromDir). A model that
// fits one Worker is planned as one Worker: the plan's summary line says which.
// `--from DIR` runs a directory `knot-cloudflare plan` wrote instead (its plan.json, coordinator
// and station configs: what `deploy` uploads); LAYERS, HEADS and MODEL_KEY do not apply then.
// LAYERS and/or HEADS set: a layout by hand instead of the plan (scripts/local.mjs's
// startStations): LAYERS layer stations (default 2), HEADS head shards (default 2), with the
// stations' own defaults for context and conversations.
// `--profile` simulates production's costs in every isolate (scripts/profiles.mjs; default local).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './bundle.mjs';
import { writeConfigs } from './cloudflare/configs.mjs';
import { describeRun, fromArg, startFromDir } from './cloudflare/miniflare.mjs';
import { formatPlan, PlanError, planDeployment } from './cloudflare/plan.mjs';
import { modelFile, REPO, startStations } from './local.mjs';
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
const key = process.env.MODEL_KEY;
const byHand = !from && (process.env.LAYERS !== undefined || process.env.HEADS !== undefined);
/** A directory that is not a plan's, or a config this harness does not translate: a message. */
const fromDir = (dir) => startFromDir(dir, { port, profile, quiet: false }).catch((e) => {
  console.error(`knot stations: ${e.message}`);
  process.exit(1);
});

/** The local model planned as `knot-cloudflare plan` would, written to .cloudflare/local/. */
async function planLocal() {
  const file = key ? join(REPO, 'models', key) : modelFile();
  if (!existsSync(file)) {
    console.error(`knot stations: ${file}: no such file (MODEL_KEY names a knot in models/)`);
    process.exit(2);
  }
  const dir = join(ROOT, '.cloudflare', 'local');
  const t0 = Date.now();
  let deployment;
  try {
    deployment = await planDeployment({ file, key });
  } catch (e) {
    if (!(e instanceof PlanError)) throw e;
    console.error(`knot stations: ${e.message}`);
    process.exit(2);
  }
  writeConfigs(dir, deployment);
  console.log(`knot stations: ${formatPlan(deployment).split('\n')[0]}`);
  console.log(`knot stations: planned into ${dir} in ${((Date.now() - t0) / 1000).toFixed(1)} s (the full plan: ${dir}/plan.json, or knot-cloudflare plan)`);
  return dir;
}

let local;
if (byHand) {
  local = await startStations({
    port,
    layers: Number(process.env.LAYERS ?? 2),
    heads: Number(process.env.HEADS ?? 2),
    profile,
    ...(key ? { modelKey: key, modelFile: join(REPO, 'models', key), vars: { MODEL_ID: key.replace(/\.knot$/, '') } } : {}),
  });
  console.log(`knot stations: ${local.url}  (by hand, LAYERS/HEADS: ${local.stations.map((s) => s.name).join(', ')}; GET /stations, POST /v1/chat/completions; Ctrl-C stops)`);
} else {
  const dir = from ?? await planLocal();
  local = await fromDir(dir);
  console.log(`knot stations: ${local.url}  (topology ${local.plan.topology} from ${dir}; GET /stations, POST /v1/chat/completions; Ctrl-C stops)`);
  console.log(describeRun(local));
}
console.log(`profile ${describeProfile(profile)}`);
const stop = async () => {
  await local.dispose();
  process.exit(0);
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
