// A consumer of the bench's live queue, as an application runs it: the Node
// client's consume() with its defaults, only the group set (and concurrency
// when the bench passes it). Run by `queenside bench --consumer-command
// "node sidecar/bench/apps/consume.mjs"`: it writes "ready" once connected,
// then a line a message handled, "<push ns> <receive ns> <partition>
// <redelivered>", and stops on SIGTERM as consume() does by default.
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from '../../../clients/node/src/index.js';

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    queue: { type: 'string' },
    group: { type: 'string' },
    'handler-wait-ms': { type: 'string', default: '0' },
    concurrency: { type: 'string' },
  },
});

// process.hrtime is not wall time: receive times are Date.now() plus the
// monotonic part below a millisecond.
const origin = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
let lines = [];
// Written often, so that the bench counts deliveries as they come.
const flush = () => {
  if (lines.length) process.stdout.write(lines.join(''));
  lines = [];
};
const writer = setInterval(flush, 50);

const wait = Number(args['handler-wait-ms']);
const client = await connect(args.socket);
process.stdout.write('ready\n'); // connected: the bench starts its window
const options = { group: args.group };
if (args.concurrency) options.concurrency = Number(args.concurrency);
await client.consume(args.queue, async (msg) => {
  const at = origin + process.hrtime.bigint();
  // The payload is a bin whose first 8 bytes are the push time.
  const sent = Buffer.from(msg.payload.buffer, msg.payload.byteOffset, msg.payload.byteLength).readBigUInt64BE(0);
  lines.push(`${sent} ${at} ${msg.partition} ${msg.redelivered ? 1 : 0}\n`);
  if (wait) await sleep(wait);
}, options);
clearInterval(writer);
flush();
await client.close();
