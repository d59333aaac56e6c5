// PreciseDate is a Date that also remembers the nanoseconds of a msgpack
// timestamp. The sidecar writes commit times with nanosecond precision and a
// plain Date keeps milliseconds only; keeping the rest lets a decoded value
// be encoded again to the same bytes, and lets callers order commit times
// that fall within one millisecond.
export class PreciseDate extends Date {
  #seconds;
  #nanoseconds;
  #epochMs; // the Date value these were made with, to notice a setTime()

  /**
   * @param {number} seconds whole seconds since 1970-01-01T00:00:00Z
   * @param {number} nanoseconds 0..999999999 within that second
   */
  constructor(seconds, nanoseconds) {
    super(seconds * 1000 + Math.floor(nanoseconds / 1e6));
    this.#seconds = seconds;
    this.#nanoseconds = nanoseconds;
    this.#epochMs = this.getTime();
  }

  /** Whole seconds since the epoch. */
  get seconds() {
    return this.#seconds;
  }

  /** Nanoseconds within the second, 0..999999999. */
  get nanoseconds() {
    return this.#nanoseconds;
  }

  /** RFC 3339 with all nine fractional digits, e.g. 2026-11-30T12:00:00.123456789Z. */
  toPreciseISOString() {
    const iso = new Date(this.#seconds * 1000).toISOString();
    return `${iso.slice(0, 19)}.${String(this.#nanoseconds).padStart(9, '0')}Z`;
  }

  /** @returns {{sec: number, nsec: number}} */
  timeSpec() {
    // A Date can be changed in place; after setTime() the nanoseconds no
    // longer belong to it, and the millisecond value wins.
    if (Object.is(this.getTime(), this.#epochMs)) {
      return { sec: this.#seconds, nsec: this.#nanoseconds };
    }
    return millisecondTimeSpec(this);
  }
}

/**
 * The msgpack time spec of a Date: a PreciseDate keeps its nanoseconds, any
 * other Date counts in milliseconds.
 * @param {Date} date
 * @returns {{sec: number, nsec: number}}
 */
export function timeSpecOf(date) {
  return date instanceof PreciseDate ? date.timeSpec() : millisecondTimeSpec(date);
}

function millisecondTimeSpec(date) {
  const ms = date.getTime();
  if (Number.isNaN(ms)) {
    throw new TypeError('cannot encode an invalid Date');
  }
  const sec = Math.floor(ms / 1000);
  return { sec, nsec: (ms - sec * 1000) * 1e6 };
}
