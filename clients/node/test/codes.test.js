// The codes and queue options come from the generated tables (src/codes.js,
// src/queue-options.js, written from protocol/ by go run
// ./protocol/internal/gen): every code has its class, exported and
// declared; every option has its default.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import * as queenside from '../src/index.js';
import { CODES } from '../src/codes.js';
import { QUEUE_OPTIONS } from '../src/queue-options.js';
import { errorFromWire, localError } from '../src/errors.js';

const declarations = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');

test('every code has its class, exported by the package', () => {
  assert.ok(CODES.length >= 16);
  for (const { code, retryable, className } of CODES) {
    const cls = queenside[className];
    assert.equal(typeof cls, 'function', `${className} is not exported`);
    assert.equal(cls, queenside.ERROR_CLASSES[code]);
    assert.equal(cls.name, className);
    assert.equal(queenside.Codes[code], code);
    const err = errorFromWire({ code, message: 'm' });
    assert.ok(err instanceof cls && err instanceof queenside.QueensideError);
    assert.equal(err.name, className);
    assert.equal(err.retryable, retryable, `${code} retryable`);
    assert.equal(localError(code, 'm').retryable, retryable);
  }
  assert.deepEqual(Object.keys(queenside.Codes), CODES.map((c) => c.code));
});

test('every class is declared in index.d.ts', () => {
  for (const { className } of CODES) {
    assert.match(declarations, new RegExp(`export declare class ${className} extends QueensideError`), `${className} is not declared`);
  }
});

test('DEFAULT_QUEUE_OPTIONS holds every option', () => {
  const want = Object.fromEntries(QUEUE_OPTIONS.map((o) => [o.name, o.default]));
  assert.deepEqual({ ...queenside.DEFAULT_QUEUE_OPTIONS }, want);
  for (const name of ['consumptionPaused', 'encryptPayloads']) assert.ok(name in want, name);
  assert.ok(Object.isFrozen(queenside.DEFAULT_QUEUE_OPTIONS));
});
