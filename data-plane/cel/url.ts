// Kubernetes' `url` CEL library, which the CEL library lacks. It follows Go's
// url.ParseRequestURI as the apiserver does: an absolute URL (`scheme://host/path?query`) or
// an absolute path, kept as written (no normalization: 'https://x:443' keeps its port).
import type { Environment } from '@marcbachmann/cel-js';

const ABSOLUTE = /^([a-zA-Z][a-zA-Z0-9+.-]*):(.*)$/s;

export class KubeURL {
  readonly scheme: string;
  readonly host: string;
  readonly path: string;
  readonly query: string;
  constructor(scheme: string, host: string, path: string, query: string) {
    this.scheme = scheme;
    this.host = host;
    this.path = path;
    this.query = query;
  }
}

/** Parses like Go's url.ParseRequestURI; undefined when it would fail. */
export function parseURL(text: string): KubeURL | undefined {
  if (text === '' || /[\s\u0000-\u001f\u007f]/.test(text)) return undefined;
  let scheme = '';
  let rest = text;
  const absolute = ABSOLUTE.exec(text);
  if (absolute) {
    scheme = absolute[1] ?? '';
    rest = absolute[2] ?? '';
  }
  const queryAt = rest.indexOf('?');
  const query = queryAt >= 0 ? rest.slice(queryAt + 1) : '';
  if (queryAt >= 0) rest = rest.slice(0, queryAt);
  // A scheme with a rootless rest is opaque (`mailto:a@b`), as in Go; without one it is invalid.
  if (!rest.startsWith('/')) return scheme !== '' ? new KubeURL(scheme, '', '', query) : undefined;
  let host = '';
  if (scheme !== '' && rest.startsWith('//')) {
    const authorityEnd = rest.indexOf('/', 2);
    const authority = authorityEnd >= 0 ? rest.slice(2, authorityEnd) : rest.slice(2);
    rest = authorityEnd >= 0 ? rest.slice(authorityEnd) : '';
    const escapedHost = authority.slice(authority.lastIndexOf('@') + 1);
    if (!validHost(escapedHost)) return undefined;
    // Go unescapes the host ('[fe80::1%25en0]' is 'fe80::1%en0' with its zone).
    const unescaped = decodeHost(escapedHost);
    if (unescaped === undefined) return undefined;
    host = unescaped;
  }
  if (/%(?![0-9a-fA-F]{2})/.test(rest)) return undefined;
  return new KubeURL(scheme, host, rest, query);
}

function decodeHost(host: string): string | undefined {
  try {
    return decodeURIComponent(host);
  } catch {
    return undefined;
  }
}

function validHost(host: string): boolean {
  const port = /:([^:\]]*)$/.exec(host);
  if (port && !/^\d*$/.test(port[1] ?? '')) return false;
  if (host.startsWith('[')) return /^\[[0-9a-fA-F:.%a-zA-Z]+\](:\d*)?$/.test(host);
  return !/[[\]]/.test(host);
}

function hostname(u: KubeURL): string {
  if (u.host.startsWith('[')) return u.host.slice(1, u.host.indexOf(']'));
  const colon = u.host.lastIndexOf(':');
  return colon >= 0 ? u.host.slice(0, colon) : u.host;
}

function port(u: KubeURL): string {
  const closing = u.host.lastIndexOf(']');
  const colon = u.host.lastIndexOf(':');
  return colon > closing ? u.host.slice(colon + 1) : '';
}

function decode(text: string): string | undefined {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    return undefined;
  }
}

/** Go's url.ParseQuery, keeping what parses (Go drops pairs with bad escapes or ';'). */
function queryMap(u: KubeURL): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const pair of u.query.split('&')) {
    if (pair === '' || pair.includes(';')) continue;
    const eq = pair.indexOf('=');
    const key = decode(eq >= 0 ? pair.slice(0, eq) : pair);
    const value = decode(eq >= 0 ? pair.slice(eq + 1) : '');
    if (key === undefined || value === undefined) continue;
    const values = out.get(key);
    if (values) values.push(value);
    else out.set(key, [value]);
  }
  return out;
}

function urlOf(text: string): KubeURL {
  const u = parseURL(text);
  if (!u) throw new Error(`URL parse error during conversion from string: ${text}`);
  return u;
}

/** Registers the `URL` type and Kubernetes' url functions on `env`. */
export function registerURL(env: Environment): void {
  env
    .registerType('URL', KubeURL)
    .registerFunction('url(string): URL', urlOf)
    .registerFunction('isURL(string): bool', (s: string) => parseURL(s) !== undefined)
    .registerFunction('URL.getScheme(): string', (u: KubeURL) => u.scheme)
    .registerFunction('URL.getHost(): string', (u: KubeURL) => u.host)
    .registerFunction('URL.getHostname(): string', hostname)
    .registerFunction('URL.getPort(): string', port)
    .registerFunction('URL.getEscapedPath(): string', (u: KubeURL) => u.path)
    .registerFunction('URL.getQuery(): map<string, list<string>>', queryMap);
}
