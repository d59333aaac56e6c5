// Reading the package's README.md as printed, for the tests that run it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

/** The text under `## heading`, up to the next `## `. */
export function readmeSection(heading) {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const section = new RegExp(`^## ${heading}\\n([\\s\\S]*?)^## `, 'm').exec(readme)?.[1];
  assert.ok(section, `the README has a "${heading}" section`);
  return section;
}

/** The fenced blocks of text, in order: {lang, text}. */
export function fencedBlocks(text) {
  return [...text.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map(([, lang, text]) => ({ lang, text }));
}

/**
 * The user's environment, not this test run's: npm test sets npm_config_*
 * (a --prefix among them) that would send an install elsewhere, and the
 * harness's QUEENSIDE_*, NODE_TEST* and PG* settings are not the user's.
 */
export function userEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^npm_/i.test(k) && !k.startsWith('QUEENSIDE_') && !k.startsWith('NODE_TEST') && !k.startsWith('PG')) env[k] = v;
  }
  return env;
}
