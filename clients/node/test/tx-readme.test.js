// The README's "Inside your own transaction", run as printed: its files
// (tables.sql, outbox.mjs, inbox.mjs) saved under the names their first
// line gives, in a directory whose node_modules holds this package and
// `pg` (links to this checkout), then its shell block run there against
// the test sidecar and its database; what the programs print must be what
// the README says. The only changes are the placeholders: the database
// URL becomes the test database's, the socket the test sidecar's.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { testSidecars } from './harness.js';
import { fencedBlocks, readmeSection, userEnv } from './readme.js';

const run = promisify(execFile);
const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
const PLACEHOLDER_SOCKET = '/path/to/queenside/.queenside/queenside.sock';

let sidecars;
let dir;
before(async () => {
  sidecars = await testSidecars();
  dir = mkdtempSync(join(tmpdir(), 'queenside-tx-readme-'));
});
after(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await sidecars?.stop();
});

test('the outbox and the inbox, as printed', { timeout: 60_000 }, async () => {
  assert.ok(sidecars.databaseUrl, 'queenside dev printed the URL of its database');
  const blocks = fencedBlocks(readmeSection('Inside your own transaction'));
  const files = blocks.filter((b) => b.lang === 'sql' || b.lang === 'js');
  const names = files.map(({ text }) => /^(?:--|\/\/) (\S+)\n/.exec(text)?.[1]);
  assert.deepEqual(names, ['tables.sql', 'outbox.mjs', 'inbox.mjs'], 'each file\'s first line names it');
  files.forEach(({ text }, i) => writeFileSync(join(dir, names[i]), text));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(PACKAGE_DIR, join(dir, 'node_modules', 'queenside'));
  symlinkSync(join(PACKAGE_DIR, 'node_modules', 'pg'), join(dir, 'node_modules', 'pg'));

  const shells = blocks.filter((b) => b.lang === 'sh');
  assert.equal(shells.length, 1, 'one shell block runs them');
  const script = shells[0].text;
  assert.match(script, /^export DATABASE_URL=.*$/m);
  assert.ok(script.includes(PLACEHOLDER_SOCKET));
  const text = script
    .replace(/^export DATABASE_URL=.*$/m, `export DATABASE_URL='${sidecars.databaseUrl}'`)
    .replaceAll(PLACEHOLDER_SOCKET, sidecars.socket);
  const { stdout, stderr } = await run('sh', ['-e', '-c', text], { cwd: dir, env: userEnv(), timeout: 50_000 });

  const printed = blocks.filter((b) => b.lang === 'text');
  assert.equal(printed.length, 1, 'one block of what they print');
  assert.equal(stdout, printed[0].text, `they print what the README says (stderr: ${stderr})`);
  assert.equal(stderr, '');
});
