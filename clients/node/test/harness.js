// Starts real sidecars for the tests: the queenside binary is built from
// this repository, `queenside dev` runs one with a throwaway PostgreSQL,
// and `queenside serve` can add more sidecars on that same database (one
// with a tiny frame limit, one to drain).
//
// `npm test` (test/run.js) starts them once and hands them to every test
// file through QUEENSIDE_TEST_* variables; a test file run on its own
// (`node --test test/ops.test.js`) starts its own.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

// The smallest frame limit the sidecar accepts: small enough that a
// request over it is written whole before the sidecar reads its length, so
// that the frame_too_large answer is read before the connection closes.
export const SMALL_FRAME_BYTES = 1024;

const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;

function goBinary() {
  if (process.env.GO) return process.env.GO;
  return existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
}

/** Builds the sidecar binary into dir and returns its path. */
export async function buildSidecar(dir) {
  const bin = join(dir, 'queenside');
  try {
    await run(goBinary(), ['build', '-o', bin, './sidecar/cmd/queenside'], { cwd: REPO_ROOT, maxBuffer: 16 << 20 });
  } catch (err) {
    throw new Error(`go build of the sidecar failed:\n${err.stderr || err.message}`);
  }
  return bin;
}

// The sidecar's own variables would override what the tests ask for.
function sidecarEnv() {
  const env = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('QUEENSIDE_')) delete env[key];
  return env;
}

/** Waits until `queenside health` answers ok on socket. */
export async function waitHealthy(bin, socket, child) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the sidecar exited with code ${child.exitCode}:\n${child.output()}`);
    try {
      await run(bin, ['health', '--socket', socket], { env: sidecarEnv() });
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`the sidecar at ${socket} did not become healthy:\n${child.output()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

function startProcess(bin, args, cwd) {
  const child = spawn(bin, args, { cwd, env: sidecarEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => { output += d; });
  child.stderr.on('data', (d) => { output += d; });
  child.output = () => output;
  child.exited = new Promise((resolve) => child.once('exit', resolve));
  return child;
}

/** Stops a sidecar the way Ctrl-C does (a drain), then waits for it. */
export async function stopProcess(child, signal = 'SIGINT') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await child.exited;
  clearTimeout(timer);
}

/**
 * `queenside dev` in dir: its own PostgreSQL, serving dir/queenside.sock.
 * @returns {Promise<{socket: string, databaseUrl: string | undefined, child: any}>}
 */
export async function startDev(bin, dir) {
  const socket = join(dir, 'queenside.sock');
  const child = startProcess(bin, [
    'dev', '--dir', join(dir, 'pg'), '--socket', socket, '--spool-dir', join(dir, 'spool'), '--log-level', 'warn',
  ], dir);
  await waitHealthy(bin, socket, child);
  // dev prints the URL of the database it started; other sidecars can share it.
  const databaseUrl = /database:\s+(postgres\S+)/.exec(child.output())?.[1];
  return { socket, databaseUrl, child };
}

/** Waits until socket accepts connections (for a sidecar that cannot be healthy). */
async function waitListening(socket, child) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the sidecar exited with code ${child.exitCode}:\n${child.output()}`);
    const ok = await new Promise((resolve) => {
      const s = createConnection({ path: socket });
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`the sidecar at ${socket} did not listen:\n${child.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * `queenside serve` on databaseUrl, serving dir/<name>.sock. With
 * healthy: false it is only waited for until it listens (a sidecar whose
 * database cannot be reached is never healthy).
 * @returns {Promise<{socket: string, child: any, stop: () => Promise<void>}>}
 */
export async function startServe(bin, dir, { name, databaseUrl, args = [], healthy = true }) {
  const socket = join(dir, `${name}.sock`);
  const child = startProcess(bin, [
    'serve', '--database-url', databaseUrl, '--socket', socket, '--spool-dir', join(dir, `${name}-spool`),
    '--log-level', 'warn', ...args,
  ], dir);
  try {
    if (healthy) await waitHealthy(bin, socket, child);
    else await waitListening(socket, child);
  } catch (err) {
    await stopProcess(child, 'SIGKILL');
    throw err;
  }
  return { socket, child, stop: () => stopProcess(child) };
}

/**
 * Everything the tests need: the main sidecar, and a second one with a
 * frame limit of SMALL_FRAME_BYTES on the same database.
 */
export async function startTestSidecars() {
  const dir = mkdtempSync(join(tmpdir(), 'queenside-node-'));
  let bin;
  let dev;
  try {
    bin = await buildSidecar(dir);
    dev = await startDev(bin, dir);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  let small;
  if (dev.databaseUrl) {
    small = await startServe(bin, dir, {
      name: 'small', databaseUrl: dev.databaseUrl, args: ['--max-frame-bytes', String(SMALL_FRAME_BYTES)],
    });
  }
  return {
    bin,
    dir,
    socket: dev.socket,
    smallSocket: small?.socket,
    databaseUrl: dev.databaseUrl,
    async stop() {
      if (small) await stopProcess(small.child);
      await stopProcess(dev.child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The variables through which test/run.js hands the sidecars to test files. */
export function toEnv(sidecars) {
  return {
    QUEENSIDE_TEST_BIN: sidecars.bin,
    QUEENSIDE_TEST_DIR: sidecars.dir,
    QUEENSIDE_TEST_SOCKET: sidecars.socket,
    QUEENSIDE_TEST_SMALL_SOCKET: sidecars.smallSocket ?? '',
    QUEENSIDE_TEST_DATABASE_URL: sidecars.databaseUrl ?? '',
  };
}

/**
 * For a test file: the sidecars test/run.js started, or new ones.
 * Call stop() when done (a no-op for the shared ones).
 */
export async function testSidecars() {
  const env = process.env;
  if (env.QUEENSIDE_TEST_SOCKET) {
    return {
      bin: env.QUEENSIDE_TEST_BIN,
      dir: env.QUEENSIDE_TEST_DIR,
      socket: env.QUEENSIDE_TEST_SOCKET,
      smallSocket: env.QUEENSIDE_TEST_SMALL_SOCKET || undefined,
      databaseUrl: env.QUEENSIDE_TEST_DATABASE_URL || undefined,
      async stop() {},
    };
  }
  return startTestSidecars();
}

/** A queue name no other test uses. */
export function uniqueQueue(prefix) {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
