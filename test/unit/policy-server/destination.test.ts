// Where a spec.source download may connect (data-plane/destination.ts), tried the way an
// attacker would: every spelling of an IPv4 address a URL accepts, IPv4 inside IPv6 (mapped,
// NAT64, 6to4), and random addresses of every special range, against an independent oracle
// (node:net's BlockList over the IANA special-purpose ranges written out again here).
import assert from 'node:assert/strict';
import { BlockList } from 'node:net';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  classifyAddress,
  DEFAULT_SOURCE_ALLOWANCES,
  literalAddress,
  redirectTarget,
  refusedAddress,
  refusedScheme,
} from '../../../data-plane/destination.ts';

const ALLOW_PRIVATE = { allowInsecureHTTP: false, allowPrivateDestinations: true };

/** Refused even with allowPrivateDestinations: link-local (metadata), 0/8, multicast, reserved. */
const never = new BlockList();
for (const [net, bits] of [
  ['169.254.0.0', 16],
  ['0.0.0.0', 8],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
] as const)
  never.addSubnet(net, bits, 'ipv4');
/** Allowed only with allowPrivateDestinations. */
const privateOrLoopback = new BlockList();
for (const [net, bits] of [
  ['127.0.0.0', 8],
  ['10.0.0.0', 8],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['100.64.0.0', 10],
  ['198.18.0.0', 15],
] as const)
  privateOrLoopback.addSubnet(net, bits, 'ipv4');

const dotted = (n: number) => [24, 16, 8, 0].map((s) => (n >>> s) & 0xff).join('.');
const uint32 = fc.integer({ min: 0, max: 0xffffffff });
const hex16 = (n: number) => n.toString(16);

/** How the oracle says an IPv4 address must fare: [by default, with allowPrivateDestinations]. */
const expected = (v4: string): [boolean, boolean] => {
  const isNever = never.check(v4, 'ipv4');
  return [isNever || privateOrLoopback.check(v4, 'ipv4'), isNever];
};
const fares = (address: string): [boolean, boolean] => [
  refusedAddress(address, DEFAULT_SOURCE_ALLOWANCES, 'p') !== undefined,
  refusedAddress(address, ALLOW_PRIVATE, 'p') !== undefined,
];

describe('destination classification', () => {
  test('every IPv4 address is refused exactly when the oracle says so, by default and with the allowance', () => {
    fc.assert(
      fc.property(uint32, (n) => {
        assert.deepEqual(fares(dotted(n)), expected(dotted(n)), dotted(n));
      }),
      { numRuns: 5000 },
    );
  });

  test('the special ranges are hit often: random addresses inside each are refused', () => {
    const inside = (base: number, bits: number) =>
      uint32.map((n) => dotted((base | (n >>> bits)) >>> 0));
    const prefix = (v4: string) => v4.split('.').reduce((a, p) => a * 256 + Number(p), 0);
    fc.assert(
      fc.property(
        fc.oneof(
          inside(prefix('127.0.0.0'), 8),
          inside(prefix('169.254.0.0'), 16),
          inside(prefix('10.0.0.0'), 8),
          inside(prefix('172.16.0.0'), 12),
          inside(prefix('192.168.0.0'), 16),
          inside(prefix('100.64.0.0'), 10),
          inside(prefix('0.0.0.0'), 8),
        ),
        (v4) => {
          assert.equal(fares(v4)[0], true, `${v4} is refused by default`);
          assert.deepEqual(fares(v4), expected(v4), v4);
        },
      ),
    );
  });

  test('every spelling of an IPv4 address a URL accepts (decimal, hex, octal, short, trailing dot) is that address', () => {
    const spellings = (n: number): string[] => {
      const [a, b, c] = [n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff];
      return [
        String(n), // http://2130706433/
        `0x${n.toString(16)}`,
        `0${n.toString(8)}`,
        `${a}.${n & 0xffffff}`, // http://127.1/
        `0x${a.toString(16)}.${n & 0xffffff}`, // http://0x7f.1/
        `${a}.${b}.${n & 0xffff}`,
        `0${a.toString(8)}.0x${b.toString(16)}.${c}.${n & 0xff}`,
        `${dotted(n)}.`, // trailing dot
      ];
    };
    fc.assert(
      fc.property(uint32, (n) => {
        for (const host of spellings(n)) {
          const address = literalAddress(new URL(`http://${host}:8080/x`));
          assert.equal(address, dotted(n), host);
          assert.deepEqual(fares(address!), expected(dotted(n)), host);
        }
      }),
      { numRuns: 2000 },
    );
  });

  test('an IPv4 address inside IPv6 (mapped, hex-mapped, NAT64, 6to4) fares as the IPv4 address, in a URL too', () => {
    fc.assert(
      fc.property(uint32, (n) => {
        const v4 = dotted(n);
        const [hi, lo] = [hex16(n >>> 16), hex16(n & 0xffff)];
        for (const v6 of [
          `::ffff:${v4}`,
          `::ffff:${hi}:${lo}`,
          `64:ff9b::${v4}`,
          `64:ff9b::${hi}:${lo}`,
          `2002:${hi}:${lo}::1`,
        ]) {
          assert.deepEqual(fares(v6), expected(v4), v6);
          const inUrl = literalAddress(new URL(`https://[${v6}]/x`))!;
          assert.deepEqual(fares(inUrl), expected(v4), `https://[${v6}]/`);
          assert.equal(classifyAddress(v6).embeds, v4);
        }
      }),
      { numRuns: 2000 },
    );
  });

  test('random IPv6 addresses of each special range get its class', () => {
    const ranges: [prefix: bigint, bits: number, kind: string][] = [
      [0xfe80n << 112n, 10, 'link-local'],
      [0xfc00n << 112n, 7, 'private'],
      [0xfec0n << 112n, 10, 'private'],
      [0xff00n << 112n, 8, 'multicast'],
      [0x20010db8n << 96n, 32, 'reserved'],
      [0x0064ff9b0001n << 80n, 48, 'private'],
    ];
    const format = (v: bigint) =>
      Array.from({ length: 8 }, (_, i) =>
        ((v >> BigInt(112 - 16 * i)) & 0xffffn).toString(16),
      ).join(':');
    fc.assert(
      fc.property(
        fc.constantFrom(...ranges),
        fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }),
        ([prefix, bits, kind], random) => {
          const host = (random >> BigInt(bits)) | prefix;
          const v6 = format(host);
          assert.equal(classifyAddress(v6).kind, kind, v6);
          assert.equal(fares(v6)[0], true, `${v6} is refused by default`);
          assert.equal(fares(v6)[1], kind !== 'private', `${v6} with the allowance`);
        },
      ),
    );
  });

  test('the fixed points an attacker tries first', () => {
    const cases: [string, string][] = [
      ['127.0.0.1', 'loopback'],
      ['169.254.169.254', 'link-local'],
      ['0.0.0.0', 'unspecified'],
      ['::', 'unspecified'],
      ['::1', 'loopback'],
      ['::ffff:127.0.0.1', 'loopback'],
      ['::ffff:169.254.169.254', 'link-local'],
      ['64:ff9b::a9fe:a9fe', 'link-local'],
      ['fe80::1%eth0', 'link-local'],
      ['fd00:ec2::254', 'private'], // AWS's IPv6 metadata address
      ['::127.0.0.1', 'reserved'], // IPv4-compatible: deprecated, never connected to
      ['255.255.255.255', 'reserved'],
      ['8.8.8.8', 'public'],
      ['2606:4700:4700::1111', 'public'],
      ['not an address', 'reserved'],
    ];
    for (const [address, kind] of cases) assert.equal(classifyAddress(address).kind, kind, address);
  });

  test('messages say what is not allowed, why, and which field allows it', () => {
    assert.equal(
      refusedAddress('127.0.0.1', DEFAULT_SOURCE_ALLOWANCES, 'edge'),
      'a loopback address, which PolicyServer edge does not allow (spec.sources.allowPrivateDestinations)',
    );
    assert.equal(
      refusedAddress('169.254.169.254', ALLOW_PRIVATE, 'edge'),
      'a link-local address, where cloud metadata services answer, which no PolicyServer may reach',
    );
    assert.equal(
      refusedAddress('::ffff:a9fe:a9fe', ALLOW_PRIVATE, 'edge'),
      'a link-local address, where cloud metadata services answer (it embeds 169.254.169.254), which no PolicyServer may reach',
    );
    assert.equal(
      refusedScheme(new URL('http://bundles.example/x'), DEFAULT_SOURCE_ALLOWANCES, 'edge'),
      'plain HTTP, which PolicyServer edge does not allow (spec.sources.allowInsecureHTTP); use https://',
    );
    assert.equal(
      refusedScheme(
        new URL('http://bundles.example/x'),
        { ...DEFAULT_SOURCE_ALLOWANCES, allowInsecureHTTP: true },
        'edge',
      ),
      undefined,
    );
    assert.equal(
      refusedScheme(new URL('file:///etc/passwd'), ALLOW_PRIVATE, 'edge'),
      'file: is not HTTP or HTTPS',
    );
  });

  test('a redirect never leads from HTTPS to plain HTTP, and is resolved against the URL it came from', () => {
    const from = new URL('https://bundles.example/a/b.yaml');
    assert.deepEqual(redirectTarget(from, 'http://bundles.example/b.yaml'), {
      refused: 'redirected from HTTPS to http://bundles.example/b.yaml, which is never followed',
    });
    const relative = redirectTarget(from, '../c.yaml');
    assert.equal('url' in relative && relative.url.href, 'https://bundles.example/c.yaml');
    const fromHttp = redirectTarget(new URL('http://a.example/'), 'https://b.example/');
    assert.equal('url' in fromHttp && fromHttp.url.href, 'https://b.example/');
  });
});
