// Options objects checked against the names a call knows. A misspelled
// option would otherwise be ignored, by the client or by the sidecar (which
// skips keys it does not know, PROTOCOL.md "How arguments are read"), and
// the call would quietly do something else: pop('q', {batchSize: 5}) would
// pop one message.

/**
 * Throws a TypeError naming every key of object that is not in known (and
 * listing the known ones). undefined and null pass: no options.
 * @param {string} what the call or the object, for the message ("pop", "push item 0")
 * @param {unknown} object
 * @param {readonly string[]} known
 * @param {string} [noun] what a key is called
 */
export function checkKeys(what, object, known, noun = 'option') {
  if (object === undefined || object === null) return;
  if (typeof object !== 'object' || Array.isArray(object)) {
    throw new TypeError(`${what}: the ${noun}s must be an object, not ${Array.isArray(object) ? 'an array' : typeof object}`);
  }
  const unknown = Object.keys(object).filter((key) => !known.includes(key));
  if (unknown.length === 0) return;
  const s = unknown.length > 1 ? 's' : '';
  throw new TypeError(`${what}: unknown ${noun}${s} ${unknown.join(', ')} (known: ${known.join(', ')})`);
}
