// One AbortSignal that says "stop consuming": any of the given signals, and
// SIGINT/SIGTERM unless the options turn them off, so that a worker finishes
// the message in hand and gives its leases back instead of exiting with
// them held.
//
// The process signals are watched through one listener per signal, shared
// by every loop: the first signal stops them all, and the listener goes at
// once, so that a second Ctrl-C ends a program whose handler hangs, as it
// would without any of this.
import { setMaxListeners } from 'node:events';

const watched = new Map(); // signal name -> {listener, stops: Set<(reason) => void>}

function watch(name, stop) {
  let entry = watched.get(name);
  if (entry === undefined) {
    const stops = new Set();
    entry = { stops, listener: () => { for (const s of [...stops]) s(new Error(`stopped by ${name}`)); } };
    watched.set(name, entry);
    process.on(name, entry.listener);
  }
  entry.stops.add(stop);
  return () => {
    entry.stops.delete(stop);
    if (entry.stops.size === 0 && watched.get(name) === entry) {
      watched.delete(name);
      process.removeListener(name, entry.listener);
    }
  };
}

/**
 * @param {{signal?: AbortSignal, stopOnSignals?: boolean | NodeJS.Signals[]}} options
 *   stopOnSignals: true for SIGINT and SIGTERM, or the signals listed; false (or undefined here) for none
 * @param {...AbortSignal} [more] further signals that also stop
 * @returns {{signal: AbortSignal, dispose: () => void}}
 */
export function stopSignal({ signal, stopOnSignals } = {}, ...more) {
  const controller = new AbortController();
  // Every pop loop and handler listens to it at once; with a high
  // concurrency that is more listeners than Node's leak warning expects.
  setMaxListeners(0, controller.signal);
  const sources = [signal, ...more].filter(Boolean);
  const undo = [];
  const stop = (reason) => {
    dispose();
    controller.abort(reason);
  };
  function dispose() {
    for (const f of undo.splice(0)) f();
  }

  for (const source of sources) {
    if (source.aborted) {
      stop(source.reason);
      return { signal: controller.signal, dispose };
    }
    const listener = () => stop(source.reason);
    source.addEventListener('abort', listener, { once: true });
    undo.push(() => source.removeEventListener('abort', listener));
  }
  const names = stopOnSignals === true ? ['SIGINT', 'SIGTERM'] : stopOnSignals || [];
  for (const name of names) undo.push(watch(name, stop));
  return { signal: controller.signal, dispose };
}
