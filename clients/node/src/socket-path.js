// Where to find the sidecar, as the Go client's SocketPath decides it.
import { existsSync } from 'node:fs';

/** Where a sidecar listens unless told otherwise. */
export const DEFAULT_SOCKET = '/var/run/queenside/queenside.sock';

/** Where `queenside dev` (`make run`) serves, relative to its directory. */
export const DEV_SOCKET = './.queenside/queenside.sock';

/**
 * QUEENSIDE_SOCKET when set, else the dev socket when it exists in the
 * current directory (so programs run beside `make run` find it), else the
 * default path.
 * @returns {string}
 */
export function defaultSocketPath() {
  const fromEnv = process.env.QUEENSIDE_SOCKET;
  if (fromEnv) return fromEnv;
  if (existsSync(DEV_SOCKET)) return DEV_SOCKET;
  return DEFAULT_SOCKET;
}
