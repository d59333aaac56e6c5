// A real sidecar for the dashboard's tests: the binary built from this
// repository (with the Node client's harness), `queenside dev` with its own
// throwaway PostgreSQL, the HTTP port on a free loopback port, and an admin
// token file.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { buildSidecar, startServe, stopProcess, waitHealthy } from '../../../clients/node/test/harness.js';

export { connect, completed, failed } from '../../../clients/node/src/index.js';
import { connect } from '../../../clients/node/src/index.js';

/** A TCP port free on 127.0.0.1 now. */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// The sidecar's own variables would override what the tests ask for.
function sidecarEnv() {
  const env = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('QUEENSIDE_')) delete env[key];
  return env;
}

async function waitHttp(url, child) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the sidecar exited with code ${child.exitCode}:\n${child.output()}`);
    try {
      const res = await fetch(`${url}api/info`);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the sidecar's HTTP port at ${url} did not answer:\n${child.output()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Starts `queenside dev` with --http-addr and --admin-token-file; with
 * devToken, without it: dev then makes its own admin token, and prints the
 * link that signs a browser in (signIn).
 * @returns {Promise<{url: string, socket: string, token: string, signIn: string, dir: string, bin: string, stop: () => Promise<void>}>}
 */
export async function startSidecar({ args = [], devToken = false } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'queenside-dashboard-'));
  const bin = await buildSidecar(dir);
  let token = randomBytes(24).toString('hex');
  const tokenFile = join(dir, 'admin-token');
  if (!devToken) {
    writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
    args = ['--admin-token-file', tokenFile, ...args];
  }
  const port = await freePort();
  const socket = join(dir, 'queenside.sock');
  const child = spawn(bin, [
    'dev', '--dir', join(dir, 'pg'), '--socket', socket, '--spool-dir', join(dir, 'spool'),
    '--http-addr', `127.0.0.1:${port}`, '--log-level', 'warn', ...args,
  ], { cwd: dir, env: sidecarEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  child.output = () => output;
  child.exited = new Promise((resolve) => child.once('exit', resolve));
  const url = `http://127.0.0.1:${port}/`;
  try {
    await waitHealthy(bin, socket, child);
    await waitHttp(url, child);
  } catch (err) {
    await stopProcess(child, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const signIn = /dashboard:\s+(http\S+)/.exec(output)?.[1];
  if (devToken) token = /#token=(\w+)/.exec(signIn || '')?.[1];
  return {
    url,
    socket,
    token,
    signIn,
    // dev prints the URL of the database it started; other sidecars can share it
    databaseUrl: /database:\s+(postgres\S+)/.exec(output)?.[1],
    dir,
    bin,
    output: () => output,
    async stop() {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A queue name no other run uses. */
export function uniqueQueue(prefix) {
  return `${prefix}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

/**
 * A second sidecar, `queenside serve` on the same database, with its HTTP
 * port and args; without an --admin-token-file in args every write of its
 * dashboard is refused.
 */
export async function startSecondSidecar(main, { name = 'second', args = [] } = {}) {
  const port = await freePort();
  const srv = await startServe(main.bin, main.dir, {
    name, databaseUrl: main.databaseUrl, args: ['--http-addr', `127.0.0.1:${port}`, ...args],
  });
  const url = `http://127.0.0.1:${port}/`;
  await waitHttp(url, srv.child);
  return { url, socket: srv.socket, output: srv.child.output, stop: srv.stop };
}

export const startReadOnlySidecar = (main) => startSecondSidecar(main, { name: 'readonly' });

/**
 * Pushes count messages, itemFor(i) the i-th, through the Node client in
 * batches of `batch`, `inFlight` batches at once over `clients`
 * connections; every item must be stored. onProgress(done) follows each
 * batch.
 */
export async function pushMany(socket, count, itemFor, { batch = 2000, inFlight = 8, clients = 4, onProgress } = {}) {
  const conns = await Promise.all(Array.from({ length: clients }, () => connect({ socket })));
  let next = 0;
  let done = 0;
  async function worker(w) {
    for (;;) {
      const from = next;
      if (from >= count) return;
      next += batch;
      const items = [];
      for (let i = from; i < Math.min(from + batch, count); i++) items.push(itemFor(i));
      const results = await conns[w % clients].push(items);
      const bad = results.find((r) => r.status !== 'queued');
      if (bad) throw new Error(`push failed: ${JSON.stringify(bad)}`);
      done += items.length;
      onProgress?.(done);
    }
  }
  try {
    await Promise.all(Array.from({ length: inFlight }, (_, w) => worker(w)));
  } finally {
    await Promise.all(conns.map((c) => c.close()));
  }
}
