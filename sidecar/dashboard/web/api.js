// The dashboard's only way to the sidecar: GET and POST on api/ (API.md),
// relative to the page so that it also works behind a path prefix.
// The token (admin or read) lives in sessionStorage with its role and,
// for a token scoped to some queues or rights, its scope as api/auth says
// it ("queues=billing.* rights=read"); the token goes only into the
// Authorization header of requests; nothing logs it.

const TOKEN_KEY = 'queenside.token';
const ROLE_KEY = 'queenside.tokenRole';
const SCOPE_KEY = 'queenside.tokenScope';

function stored(key) {
  try {
    return sessionStorage.getItem(key) || '';
  } catch {
    return '';
  }
}

export const getToken = () => stored(TOKEN_KEY);

/** What the kept token may do, as api/auth said: "admin", "read" or "". */
export const getTokenRole = () => (getToken() ? stored(ROLE_KEY) || 'admin' : '');

/** The kept token's scope when it is narrower than its role's, else "". */
export const getTokenScope = () => (getToken() ? stored(SCOPE_KEY) : '');

/** Keeps a token with what api/auth said of it ({role, scoped, scopeText}). */
export function setToken(token, auth = {}) {
  try {
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      sessionStorage.setItem(ROLE_KEY, auth.role || '');
      sessionStorage.setItem(SCOPE_KEY, auth.scoped ? auth.scopeText || '' : '');
    } else {
      sessionStorage.removeItem(TOKEN_KEY);
      sessionStorage.removeItem(ROLE_KEY);
      sessionStorage.removeItem(SCOPE_KEY);
    }
  } catch {
    // storage refused (private mode): the token is then asked for again
  }
  window.dispatchEvent(new Event('queenside:token'));
}

/** An answer other than 2xx, or no answer: status 0 when unreachable. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/**
 * One API call, carrying the kept token when there is one (reads need it
 * on a sidecar with read tokens, writes always). Resolves with the parsed
 * JSON, rejects with ApiError.
 */
export async function api(path, { method = 'GET', body, token } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const bearer = token ?? getToken();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let res;
  try {
    res = await fetch(`api/${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (err) {
    throw new ApiError(0, 'unreachable', `the sidecar did not answer (${err.message})`);
  }
  let data = null;
  try {
    const text = await res.text();
    data = text ? JSON.parse(text) : null;
  } catch {
    if (res.ok) throw new ApiError(res.status, 'bad_response', 'the sidecar answered something other than JSON');
  }
  if (!res.ok) {
    const e = data && data.error;
    throw new ApiError(res.status, (e && e.code) || `http_${res.status}`, (e && e.message) || res.statusText || 'request failed');
  }
  return data;
}

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const seg = encodeURIComponent;
