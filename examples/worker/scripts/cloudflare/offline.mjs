// How the deploy path's checks run wrangler without touching the user's account or the network:
// an environment of its own (no telemetry, no error reports, no banner — whose update check is
// the one network call a dry run makes — and a home and config directory under `dir`), and,
// where the machine allows it, a network namespace with no network at all.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

/** Whether `unshare -n` works here: a dry run that reached for the network would then fail. */
export const OFFLINE = spawnSync('unshare', ['-n', 'true']).status === 0;

/**
 * wrangler's environment: offline and quiet, nothing read from or written to the user's home.
 * @param {string} dir where its home, config and logs go
 */
export function wranglerEnv(dir) {
  return {
    PATH: process.env.PATH,
    HOME: join(dir, 'home'),
    XDG_CONFIG_HOME: join(dir, 'config'),
    WRANGLER_LOG_PATH: join(dir, 'logs'),
    WRANGLER_SEND_METRICS: 'false',
    WRANGLER_SEND_ERROR_REPORTS: 'false',
    WRANGLER_HIDE_BANNER: 'true',
    CI: '1',
    NO_COLOR: '1',
  };
}
