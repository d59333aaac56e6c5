// `npm test`: starts the sidecars once, runs every test file against them
// with Node's test runner, and stops them (SIGINT, a drain) at the end.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startTestSidecars, toEnv } from './harness.js';

const testDir = fileURLToPath(new URL('.', import.meta.url));
// Node 20's runner takes no globs, so the files are listed here.
const files = readdirSync(testDir).filter((f) => f.endsWith('.test.js')).sort().map((f) => `test/${f}`);

const started = Date.now();
const sidecars = await startTestSidecars();
console.log(`sidecars ready in ${((Date.now() - started) / 1000).toFixed(1)} s (${sidecars.socket})`);

let child;
const stopEverything = async () => {
  child?.kill('SIGINT');
  await sidecars.stop();
};
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => stopEverything().finally(() => process.exit(130)));
}

child = spawn(process.execPath, ['--test', ...process.argv.slice(2), ...files], {
  cwd: fileURLToPath(new URL('..', import.meta.url)),
  env: { ...process.env, ...toEnv(sidecars) },
  stdio: 'inherit',
});
const code = await new Promise((resolve) => child.once('exit', (c, s) => resolve(c ?? (s ? 1 : 0))));
await sidecars.stop();
// Nothing is printed after the runner's summary, which CI reads last.
process.exit(code);
