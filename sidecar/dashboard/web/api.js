// The dashboard's only way to the sidecar: GET and POST on api/ (API.md),
// relative to the page so that it also works behind a path prefix.
// The admin token lives in sessionStorage and goes only into the
// Authorization header of writes and of the token check; nothing logs it.

const TOKEN_KEY = 'queenside.adminToken';

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
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
 * One API call. GET needs nothing; a POST carries the admin token when one
 * is kept. Resolves with the parsed JSON, rejects with ApiError.
 */
export async function api(path, { method = 'GET', body, token } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const bearer = token ?? (method === 'GET' ? '' : getToken());
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
