// One AbortSignal that says "stop consuming": any of the given signals, and
// optionally SIGINT/SIGTERM, so that a worker finishes the message in hand
// and gives its leases back instead of exiting with them held.
import { setMaxListeners } from 'node:events';

/**
 * @param {{signal?: AbortSignal, stopOnSignals?: boolean | NodeJS.Signals[]}} options
 * @param {...AbortSignal} [more] further signals that also stop
 * @returns {{signal: AbortSignal, dispose: () => void}}
 */
export function stopSignal({ signal, stopOnSignals } = {}, ...more) {
  const controller = new AbortController();
  // Every pop loop and handler listens to it at once; with a high
  // concurrency that is more listeners than Node's leak warning expects.
  setMaxListeners(0, controller.signal);
  const sources = [signal, ...more].filter(Boolean);
  const listeners = [];
  const stop = (reason) => {
    dispose();
    controller.abort(reason);
  };
  function dispose() {
    for (const [target, name, listener] of listeners.splice(0)) {
      if (target === process) process.removeListener(name, listener);
      else target.removeEventListener(name, listener);
    }
  }

  for (const source of sources) {
    if (source.aborted) {
      stop(source.reason);
      return { signal: controller.signal, dispose };
    }
    const listener = () => stop(source.reason);
    source.addEventListener('abort', listener, { once: true });
    listeners.push([source, 'abort', listener]);
  }
  // The process listeners go as soon as the first signal arrives, so that a
  // second Ctrl-C ends a program whose handler hangs, as it would without
  // this helper.
  const names = stopOnSignals === true ? ['SIGINT', 'SIGTERM'] : stopOnSignals || [];
  for (const name of names) {
    const listener = () => stop(new Error(`stopped by ${name}`));
    process.once(name, listener);
    listeners.push([process, name, listener]);
  }
  return { signal: controller.signal, dispose };
}
