// Guards for the operator UIs (status page and queue UI): basic auth, loopback-only access,
// and a same-origin check on writes. Browsers resend basic-auth credentials on their own,
// so any request that changes something must prove it came from our own pages. Loopback-only
// also means a loopback Host: a site whose name an attacker re-points at 127.0.0.1 (DNS
// rebinding) makes the victim's browser send its requests from loopback, under its own Host.
import type { Context, MiddlewareHandler } from 'hono';
import { basicAuth } from 'hono/basic-auth';
import { getConnInfo } from '@hono/node-server/conninfo';

export interface UiAccess {
  /** `user:password` for basic auth; undefined: no credentials configured. */
  credentials: string | undefined;
  /** Serve the UIs to loopback clients only (with or without credentials). */
  localOnly: boolean;
  /** Only GET and HEAD reach the UIs. */
  readOnly: boolean;
}

/** Why the UIs are off, or undefined when they may be served. Pure. */
export function uiDisabledReason(access: UiAccess): string | undefined {
  if (access.credentials || access.localOnly) return undefined;
  return 'the status page and queue UI are off: start rollcall with --ui-credentials USER:PASSWORD (or ROLLCALL_UI_CREDENTIALS), or --ui-local-only';
}

export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}

/**
 * True for a Host (or URL host) naming the loopback interface, with or without a port:
 * `localhost`, an IPv4 literal in 127/8, `[::1]`. Any other name may be one an attacker's
 * DNS answers with 127.0.0.1. Pure.
 */
export function isLoopbackHost(host: string | undefined): boolean {
  if (!host) return false;
  const name = host
    .toLowerCase()
    .replace(/:\d*$/, '')
    .replace(/^\[(.*)\]$/, '$1');
  if (name === 'localhost' || name === '::1') return true;
  return /^127(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/.test(name);
}

const safeMethods = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * True when a state-changing request came from a page of this origin: browsers always send
 * `Origin` on non-GET fetches, and a cross-site form or script cannot forge it. Pure.
 */
export function isSameOrigin(
  method: string,
  url: string,
  headers: { origin?: string | null; secFetchSite?: string | null },
): boolean {
  if (safeMethods.has(method)) return true;
  if (headers.secFetchSite && headers.secFetchSite !== 'same-origin') return false;
  if (!headers.origin) return false;
  return headers.origin === new URL(url).origin;
}

function remoteAddress(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined; // not served by @hono/node-server (in-process app.request() in tests)
  }
}

/** The request names loopback: its Host header (when it has one) and its URL's host. */
function namesLoopback(c: Context): boolean {
  const header = c.req.header('host');
  return (
    (header === undefined || isLoopbackHost(header)) && isLoopbackHost(new URL(c.req.url).host)
  );
}

/** One middleware for every UI route: off, loopback check, basic auth, method and origin checks. */
export function uiGuard(access: UiAccess): MiddlewareHandler {
  const disabled = uiDisabledReason(access);
  const [user = '', ...rest] = (access.credentials ?? '').split(':');
  const auth = access.credentials
    ? basicAuth({ username: user, password: rest.join(':'), realm: 'rollcall' })
    : undefined;
  return async (c, next) => {
    if (disabled) return c.text(disabled, 403);
    if (access.localOnly && !isLoopback(remoteAddress(c)))
      return c.text('the UIs are served to loopback clients only (--ui-local-only)', 403);
    if (access.localOnly && !namesLoopback(c))
      return c.text(
        `the UIs answer to localhost, 127.0.0.1 or [::1] only (--ui-local-only), not to ${new URL(c.req.url).host}: browse to http://localhost:<port>/`,
        421,
      );
    // basicAuth throws an HTTPException (401 with WWW-Authenticate) on missing or wrong credentials.
    if (auth) await auth(c, async () => {});
    if (access.readOnly && !safeMethods.has(c.req.method))
      return c.text(
        'the queue UI is read-only (start with --ui-allow-actions to allow actions)',
        405,
      );
    if (
      !isSameOrigin(c.req.method, c.req.url, {
        origin: c.req.header('origin'),
        secFetchSite: c.req.header('sec-fetch-site'),
      })
    )
      return c.text('cross-origin request refused', 403);
    await next();
  };
}
