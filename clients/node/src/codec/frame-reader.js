// Splits the byte stream of a socket into frame bodies: a 4-byte big-endian
// length, then that many bytes (PROTOCOL.md, section 1).
//
// Chunks are kept as they arrive and joined once per frame, when the frame
// is complete, so a large frame that comes in many pieces is copied once
// rather than once per piece.

// The server never sends more than its own limit (at most 1 GiB); a length
// above this bound means the stream is not queenside frames.
export const MAX_INCOMING_FRAME = 2 ** 31 - 1;

export class FrameReader {
  #chunks = [];
  #buffered = 0;
  #bodyLength = -1; // of the frame being read; -1 until its header is in

  /**
   * Adds bytes read from the socket and returns the bodies now complete.
   * @param {Uint8Array} chunk
   * @returns {Uint8Array[]}
   */
  push(chunk) {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    const bodies = [];
    for (;;) {
      if (this.#bodyLength < 0) {
        if (this.#buffered < 4) break;
        const head = this.#join(4);
        this.#bodyLength = new DataView(head.buffer, head.byteOffset, 4).getUint32(0);
        if (this.#bodyLength === 0 || this.#bodyLength > MAX_INCOMING_FRAME) {
          throw new RangeError(`frame length ${this.#bodyLength} is not a queenside frame`);
        }
      }
      if (this.#buffered < 4 + this.#bodyLength) break;
      const all = this.#join(this.#buffered);
      const end = 4 + this.#bodyLength;
      bodies.push(all.subarray(4, end));
      const rest = all.subarray(end);
      this.#chunks = rest.length > 0 ? [rest] : [];
      this.#buffered = rest.length;
      this.#bodyLength = -1;
    }
    return bodies;
  }

  /** Bytes held for a frame not yet complete. */
  get buffered() {
    return this.#buffered;
  }

  // Makes the first chunk hold at least n bytes, joining chunks if needed.
  #join(n) {
    if (this.#chunks[0].length < n) {
      const joined = new Uint8Array(this.#buffered);
      let at = 0;
      for (const c of this.#chunks) {
        joined.set(c, at);
        at += c.length;
      }
      this.#chunks = [joined];
    }
    return this.#chunks[0];
  }
}
