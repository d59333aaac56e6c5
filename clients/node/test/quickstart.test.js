// The README's quick start, run as printed: its shell blocks in a fresh
// directory (npm init -y, then npm install --install-links from this
// checkout, which fetches the client's dependency from the registry), its
// programs, CommonJS and ES module, saved as the files they name, run with
// the command the README gives, against the test sidecar; what each prints
// must be what the README says it prints. The only changes are the
// placeholders: /path/to/queenside becomes this checkout, and the socket
// under it the test sidecar's.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { REPO_ROOT, testSidecars } from './harness.js';
import { fencedBlocks, readmeSection, userEnv } from './readme.js';

const run = promisify(execFile);

const PLACEHOLDER = '/path/to/queenside';
const PLACEHOLDER_SOCKET = `${PLACEHOLDER}/.queenside/queenside.sock`;

/** The quick start's fenced blocks, in order, up to its first subsection: what follows it are snippets, not the program. */
function quickStartBlocks() {
  return fencedBlocks(readmeSection('Quick start').split(/^### /m)[0]);
}

let sidecars;
let dir;
before(async () => {
  sidecars = await testSidecars();
  dir = mkdtempSync(join(tmpdir(), 'queenside-quickstart-'));
});
after(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await sidecars?.stop();
});

function shell(script, cwd) {
  const text = script.replaceAll(PLACEHOLDER_SOCKET, sidecars.socket).replaceAll(PLACEHOLDER, REPO_ROOT.replace(/\/$/, ''));
  return run('sh', ['-e', '-c', text], { cwd, env: userEnv(), timeout: 240_000, maxBuffer: 16 << 20 });
}

test('the quick start, as printed, in a fresh npm project: CommonJS and ES module', { timeout: 300_000 }, async () => {
  const blocks = quickStartBlocks();
  const shells = blocks.filter((b) => b.lang === 'sh').map((b) => b.text);
  const programs = blocks.filter((b) => b.lang === 'js');
  const printed = blocks.filter((b) => b.lang === 'text').map((b) => b.text);
  assert.equal(printed.length, 1, 'one block of what the programs print');

  const setup = shells.find((s) => /npm init -y/.test(s));
  assert.ok(setup, 'a shell block sets the project up');
  assert.match(setup, /npm install --install-links \/path\/to\/queenside\/clients\/node/);
  // The block's own `cd` takes the later steps into the project.
  const project = join(dir, /^mkdir (\S+) && cd \1$/m.exec(setup)?.[1] ?? '.');
  await shell(setup, dir);
  const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
  assert.notEqual(pkg.type, 'module', 'npm init -y makes a CommonJS project');

  const names = [];
  for (const { text } of programs) {
    const name = /^\/\/ (\S+\.m?js)\n/.exec(text)?.[1];
    assert.ok(name, `a program's first line names its file:\n${text}`);
    writeFileSync(join(project, name), text);
    names.push(name);
  }
  assert.deepEqual(names, ['quickstart.js', 'quickstart.mjs'], 'a CommonJS and an ES module form');

  for (const name of names) {
    const command = shells.find((s) => new RegExp(`node ${name.replace('.', '\\.')}$`, 'm').test(s));
    assert.ok(command, `a command runs ${name}`);
    const { stdout, stderr } = await shell(command, project);
    assert.equal(stdout, printed[0], `${name} prints what the README says (stderr: ${stderr})`);
    assert.equal(stderr, '', `${name} writes nothing to stderr`);
  }
});
