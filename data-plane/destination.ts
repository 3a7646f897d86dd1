/**
 * Where a `spec.source` download may connect, as pure functions of a URL and an IP address:
 * which class an address belongs to (IPv4, IPv6, and the IPv4 an IPv6 address embeds:
 * mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`), and what a PolicyServer's
 * `spec.sources` lets through. By default only HTTPS to public addresses passes; loopback and
 * private addresses pass with `allowPrivateDestinations`; link-local (cloud metadata at
 * 169.254.169.254), unspecified, multicast and reserved addresses never do.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { PolicyServerSources } from '../api/v1alpha1.ts';

export type AddressClass =
  'public' | 'loopback' | 'private' | 'link-local' | 'unspecified' | 'multicast' | 'reserved';

/** A PolicyServer without spec.sources: HTTPS to public addresses only. */
export const DEFAULT_SOURCE_ALLOWANCES: PolicyServerSources = {
  allowInsecureHTTP: false,
  allowPrivateDestinations: false,
};

/** At most this many redirects are followed. */
export const MAX_SOURCE_REDIRECTS = 5;

/** How each class reads in a message. */
const DESCRIBED: Record<AddressClass, string> = {
  public: 'a public address',
  loopback: 'a loopback address',
  private: 'a private address',
  'link-local': 'a link-local address, where cloud metadata services answer',
  unspecified: 'an unspecified address, which reaches this host',
  multicast: 'a multicast address',
  reserved: 'a reserved address',
};

type Range = readonly [base: string, bits: number, kind: AddressClass];

// The IANA special-purpose registries, IPv4 then IPv6, first match of the address's family
// wins. 198.18/15 (benchmarking) counts as private: fake-IP DNS proxies hand it out for public
// names. IPv6 comes after the ranges that embed an IPv4 address (see classifyAddress), and
// anything outside 2000::/3 (global unicast) that none of these names is reserved.
const SPECIAL_RANGES: readonly Range[] = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'private'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'],
  ['192.0.2.0', 24, 'reserved'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'private'],
  ['198.51.100.0', 24, 'reserved'],
  ['203.0.113.0', 24, 'reserved'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
  // IPv6
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['64:ff9b:1::', 48, 'private'],
  ['fc00::', 7, 'private'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'private'],
  ['ff00::', 8, 'multicast'],
  ['2001:db8::', 32, 'reserved'],
  ['2001::', 23, 'reserved'],
  ['2000::', 3, 'public'],
];

/** The IPv4 address inside these IPv6 prefixes decides: [prefix, bits, offset of the IPv4]. */
const EMBEDDING: readonly (readonly [string, number, number])[] = [
  ['::ffff:0:0', 96, 96], // IPv4-mapped: the socket connects to the IPv4 address
  ['64:ff9b::', 96, 96], // NAT64: the translator connects to it
  ['2002::', 16, 16], // 6to4: the relay does
];

function ipv4Value(address: string): bigint {
  return address.split('.').reduce((value, part) => (value << 8n) | BigInt(part), 0n);
}

function ipv6Value(address: string): bigint {
  const [head = '', tail] = address.split('::') as [string, string | undefined];
  const groups = (text: string) =>
    text === ''
      ? []
      : text.split(':').flatMap((g) => {
          if (!g.includes('.')) return [Number.parseInt(g, 16)];
          const v4 = Number(ipv4Value(g));
          return [v4 >>> 16, v4 & 0xffff]; // a dotted IPv4 tail is two groups
        });
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right];
  return all.reduce((value, group) => (value << 16n) | BigInt(group), 0n);
}

const within = (
  value: bigint,
  width: 32 | 128,
  [base, bits]: Range | readonly [string, number],
) => {
  const shift = BigInt(width - bits);
  const start = width === 32 ? ipv4Value(base) : ipv6Value(base);
  return value >> shift === start >> shift;
};

const specialRange = (value: bigint, width: 32 | 128) =>
  SPECIAL_RANGES.find((r) => r[0].includes(':') === (width === 128) && within(value, width, r));

const dotted = (value: bigint) =>
  [24n, 16n, 8n, 0n].map((shift) => String((value >> shift) & 0xffn)).join('.');

export interface Classified {
  kind: AddressClass;
  /** The IPv4 address an IPv6 one embeds, when that decided its class. */
  embeds?: string;
}

/**
 * The class of an IP address (as `net.isIP` accepts it; an IPv6 zone is ignored). Anything
 * that is not an IP address is `reserved`: it is refused, never guessed at.
 */
export function classifyAddress(address: string): Classified {
  const ip = address.replace(/^\[(.*)\]$/, '$1').replace(/%.*$/, '');
  if (isIPv4(ip)) {
    const value = ipv4Value(ip);
    return { kind: specialRange(value, 32)?.[2] ?? 'public' };
  }
  if (!isIPv6(ip)) return { kind: 'reserved' };
  const value = ipv6Value(ip);
  for (const [prefix, bits, offset] of EMBEDDING) {
    if (!within(value, 128, [prefix, bits])) continue;
    const embeds = dotted((value >> BigInt(128 - offset - 32)) & 0xffffffffn);
    return { kind: classifyAddress(embeds).kind, embeds };
  }
  return { kind: specialRange(value, 128)?.[2] ?? 'reserved' };
}

/** Loopback and private addresses need the allowance; these never pass. */
const NEVER: ReadonlySet<AddressClass> = new Set([
  'link-local',
  'unspecified',
  'multicast',
  'reserved',
]);

/**
 * Why `address` may not be connected to under `allowances`, in an operator's words, to follow
 * the address (`a loopback address, which PolicyServer p does not allow
 * (spec.sources.allowPrivateDestinations)`); undefined when it may.
 */
export function refusedAddress(
  address: string,
  allowances: PolicyServerSources,
  policyServer: string,
): string | undefined {
  const { kind, embeds } = classifyAddress(address);
  if (kind === 'public') return undefined;
  if (!NEVER.has(kind) && allowances.allowPrivateDestinations) return undefined;
  const what = `${DESCRIBED[kind]}${embeds === undefined ? '' : ` (it embeds ${embeds})`}`;
  return NEVER.has(kind)
    ? `${what}, which no PolicyServer may reach`
    : `${what}, which PolicyServer ${policyServer} does not allow (spec.sources.allowPrivateDestinations)`;
}

/** Why a URL's scheme is refused; undefined when it is allowed. */
export function refusedScheme(
  url: URL,
  allowances: PolicyServerSources,
  policyServer: string,
): string | undefined {
  if (url.protocol === 'https:') return undefined;
  if (url.protocol !== 'http:') return `${url.protocol} is not HTTP or HTTPS`;
  return allowances.allowInsecureHTTP
    ? undefined
    : `plain HTTP, which PolicyServer ${policyServer} does not allow (spec.sources.allowInsecureHTTP); use https://`;
}

/** Where a redirect leads, or why it is not followed: HTTPS never falls back to plain HTTP. */
export function redirectTarget(from: URL, location: string): { url: URL } | { refused: string } {
  let url: URL;
  try {
    url = new URL(location, from);
  } catch {
    return { refused: `redirected to ${JSON.stringify(location)}, which is not a URL` };
  }
  return from.protocol === 'https:' && url.protocol !== 'https:'
    ? { refused: `redirected from HTTPS to ${url.href}, which is never followed` }
    : { url };
}

/**
 * The IP address a URL names, or undefined for a host name that must be resolved. The WHATWG
 * parser has already turned `http://2130706433/`, `http://0x7f.1/` and `http://127.0.0.1./`
 * into `127.0.0.1`.
 */
export function literalAddress(url: URL): string | undefined {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return isIPv4(host) || isIPv6(host) ? host : undefined;
}
