// RawMsgpack holds bytes that are already one encoded msgpack value. The
// encoder copies them verbatim, which is how a payload keeps the exact bytes
// it was pushed with: the sidecar never re-encodes a payload, and neither
// does this client.
export class RawMsgpack {
  /** @param {Uint8Array} bytes one complete msgpack value */
  constructor(bytes) {
    if (!(bytes instanceof Uint8Array)) {
      throw new TypeError('RawMsgpack needs a Uint8Array');
    }
    this.bytes = bytes;
  }
}
