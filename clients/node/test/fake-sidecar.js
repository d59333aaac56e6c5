// A stand-in sidecar that answers from a script, for what a real one gives
// only in an outage or a shutdown: unavailable and draining on demand. It
// serves one connection, speaks the framed protocol with the client's own
// codec, answers each request in arrival order with the frames
// script(n, request) returns, and keeps the requests for the test to count.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FrameReader, decodeEnvelope, encodeEnvelope } from '../src/index.js';

export const DRAINING_NOTICE = { id: 0, notice: 'draining' };

export function errorFrame(request, code, retryable = true) {
  return { id: request.id, error: { code, message: `scripted ${code}`, retryable } };
}

export function resultFrame(request, result = {}) {
  return { id: request.id, result };
}

/** Answers code to the first n requests, then an empty result. */
export function failFirst(n, code) {
  return (i, request) => [i <= n ? errorFrame(request, code) : resultFrame(request)];
}

export async function fakeSidecar(script) {
  const dir = mkdtempSync(join(tmpdir(), 'qs-fake-'));
  const socket = join(dir, 's.sock');
  const requests = [];
  const connections = new Set();
  const server = createServer((conn) => {
    connections.add(conn);
    const reader = new FrameReader();
    conn.on('data', (chunk) => {
      for (const body of reader.push(chunk)) {
        const request = decodeEnvelope(body);
        requests.push(request);
        for (const frame of script(requests.length, request)) conn.write(encodeEnvelope(frame));
      }
    });
    conn.on('error', () => {});
    conn.on('close', () => connections.delete(conn));
  });
  await new Promise((resolve) => server.listen(socket, resolve));
  return {
    socket,
    requests,
    get ops() {
      return requests.map((r) => r.op);
    },
    async close() {
      for (const c of connections) c.destroy();
      await new Promise((resolve) => server.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
