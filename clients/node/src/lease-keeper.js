// Keeps leases alive while their messages are being handled: a handler
// that runs longer than the lease would otherwise see its messages handed
// to another consumer, and its acks answered lease_expired.

// Renewing more often than this gains nothing and costs round trips.
const MIN_RENEW_EVERY_MS = 200;

/**
 * Renews the leases every renewEveryMs (default: a third of the time left
 * on the earliest of them) until the returned function is called.
 * @param {import('./client.js').Client} client
 * @param {Array<{leaseId: string, expiresAt: Date}>} leases
 * @param {{leaseSeconds?: number, renewEveryMs?: number}} [options]
 * @returns {() => void} stops renewing
 */
export function keepLeasesAlive(client, leases, { leaseSeconds, renewEveryMs } = {}) {
  if (leases.length === 0) return () => {};
  const ids = leases.map((l) => l.leaseId);
  const earliest = Math.min(...leases.map((l) => l.expiresAt.getTime()));
  const every = Math.max(MIN_RENEW_EVERY_MS, renewEveryMs ?? Math.floor((earliest - Date.now()) / 3));
  let renewing = false;
  const timer = setInterval(() => {
    if (renewing || client.closed) return; // never pile renewals up behind a slow one
    renewing = true;
    client
      .renew(ids, { seconds: leaseSeconds, timeoutMs: every })
      // A renewal that fails shows later as lease_expired on the ack, and
      // the messages come again: nothing to do here.
      .catch(() => {})
      .finally(() => { renewing = false; });
  }, every);
  timer.unref(); // renewing alone must not keep a finished program running
  return () => clearInterval(timer);
}
