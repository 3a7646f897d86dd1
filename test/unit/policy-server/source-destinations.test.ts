// spec.source as an attacker's server-side request forgery: every refused destination fails
// before a socket exists (counted by node:net's `net.client.socket` diagnostics channel and by
// a listener on 127.0.0.1 that counts its connections), DNS answers are checked and then
// pinned (a name that changes its answer between the check and the connection cannot win),
// every redirect is checked again, and at most 5 are followed.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { LookupAddress } from 'node:dns';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import fc from 'fast-check';
import {
  fetchSource,
  SourceError,
  type FetchSourceOptions,
  type Resolve,
} from '../../../data-plane/source.ts';

const doc = 'validations:\n  - expression: "true"\n';
const sha = (text: string) => createHash('sha256').update(text).digest('hex');
const ALLOW_ALL = { allowInsecureHTTP: true, allowPrivateDestinations: true };
const HTTP_ONLY = { allowInsecureHTTP: true, allowPrivateDestinations: false };

/** Client sockets this process opened (every TCP connection attempt starts with one). */
let sockets = 0;
const countSocket = () => void sockets++;

/** A resolver that answers `addresses` and records what it was asked. */
function resolver(...answers: string[][]): Resolve & { asked: string[] } {
  const asked: string[] = [];
  const resolve = async (hostname: string): Promise<LookupAddress[]> => {
    const answer = answers[Math.min(asked.length, answers.length - 1)] ?? [];
    asked.push(hostname);
    return answer.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return Object.assign(resolve, { asked });
}

describe('spec.source destinations', () => {
  let listener: Server;
  let port: number;
  let connections = 0;
  let requests = 0;
  before(async () => {
    listener = createServer((req, res) => {
      requests++;
      if (req.url === '/doc.yaml') return void res.end(doc);
      if (req.url === '/moved') return void res.writeHead(301, { location: '/doc.yaml' }).end();
      if (req.url === '/loop') return void res.writeHead(302, { location: '/loop' }).end();
      if (req.url === '/to-metadata')
        return void res
          .writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/iam/' })
          .end();
      if (req.url === '/declared-huge')
        return void res.writeHead(200, { 'content-length': '5000000' }).end();
      res.writeHead(404).end();
    });
    listener.on('connection', () => connections++);
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    port = (listener.address() as AddressInfo).port;
    subscribe('net.client.socket', countSocket);
  });
  after(() => {
    unsubscribe('net.client.socket', countSocket);
    listener.closeAllConnections();
    listener.close();
  });
  beforeEach(() => {
    sockets = 0;
    connections = 0;
    requests = 0;
  });

  const refused = async (url: string, options: FetchSourceOptions, message: string | RegExp) => {
    await assert.rejects(
      fetchSource({ url, sha256: sha(doc) }, { policyServer: 'p', ...options }),
      (err: Error) => {
        assert.ok(err instanceof SourceError, String(err));
        if (typeof message === 'string') assert.equal(err.message, message);
        else assert.match(err.message, message);
        return true;
      },
    );
  };

  test('127.0.0.1 fails to load, saying the destination is not allowed, and nothing connects', async () => {
    const url = `https://127.0.0.1:${port}/doc.yaml`;
    await refused(
      url,
      {},
      `spec.source ${url}: destination 127.0.0.1 is a loopback address, which PolicyServer p does not allow (spec.sources.allowPrivateDestinations)`,
    );
    assert.equal(sockets, 0, 'no socket was opened');
    assert.equal(connections, 0, 'the listener saw no connection');
  });

  test('169.254.169.254 (cloud metadata) is refused even with every allowance, before any socket', async () => {
    const url = 'http://169.254.169.254/latest/meta-data/iam/security-credentials/';
    await refused(
      url,
      { allowances: ALLOW_ALL },
      `spec.source ${url}: destination 169.254.169.254 is a link-local address, where cloud metadata services answer, which no PolicyServer may reach`,
    );
    assert.equal(sockets, 0);
  });

  test('every other spelling of this host is refused before any socket', async () => {
    for (const host of [
      '2130706433',
      '0x7f.1',
      '017700000001',
      '127.1',
      '127.0.0.1.',
      '[::1]',
      '[::ffff:127.0.0.1]',
      '[::ffff:7f00:1]',
      '[64:ff9b::7f00:1]',
      '0.0.0.0',
      '0',
      '[::]',
    ]) {
      await refused(
        `http://${host}:${port}/doc.yaml`,
        { allowances: HTTP_ONLY },
        /: destination \S+ is (a loopback|an unspecified) address/,
      );
    }
    assert.equal(sockets, 0);
    assert.equal(connections, 0);
  });

  test('plain HTTP is refused by default, even to a public address', async () => {
    const url = 'http://93.184.215.14/doc.yaml';
    await refused(
      url,
      {},
      `spec.source ${url}: plain HTTP, which PolicyServer p does not allow (spec.sources.allowInsecureHTTP); use https://`,
    );
    assert.equal(sockets, 0);
  });

  test('a name that resolves to loopback is refused, the system resolver (localhost) and a custom one alike', async () => {
    await refused(
      `http://localhost:${port}/doc.yaml`,
      { allowances: HTTP_ONLY },
      /: localhost resolves to (127\.0\.0\.1|::1), a loopback address, which PolicyServer p does not allow/,
    );
    const resolve = resolver(['127.0.0.1']);
    await refused(
      `http://bundles.test.:${port}/doc.yaml`,
      { allowances: HTTP_ONLY, resolve },
      /: bundles\.test\. resolves to 127\.0\.0\.1, a loopback address/,
    );
    assert.deepEqual(resolve.asked, ['bundles.test.'], 'the trailing dot is resolved as written');
    assert.equal(sockets, 0);
    assert.equal(connections, 0);
  });

  test('any name resolving to any refused address among public ones is refused before any socket', async () => {
    const refusedV4 = fc.oneof(
      fc.constant('127.0.0.1'),
      fc.constant('169.254.169.254'),
      fc.constant('10.0.0.7'),
      fc.constant('::ffff:192.168.1.1'),
      fc.constant('fd00:ec2::254'),
    );
    await fc.assert(
      fc.asyncProperty(fc.domain(), refusedV4, fc.boolean(), async (name, bad, badFirst) => {
        const answer = badFirst ? [bad, '93.184.215.14'] : ['93.184.215.14', bad];
        const resolve = resolver(answer);
        await refused(
          `https://${name}/doc.yaml`,
          { resolve },
          new RegExp(`resolves to ${bad.replaceAll('.', '\\.')}, a `),
        );
        assert.deepEqual(resolve.asked, [new URL(`https://${name}/`).hostname]);
      }),
      { numRuns: 100 },
    );
    assert.equal(sockets, 0);
  });

  test('the connection goes to the address that was checked: a name that rebinds after the check cannot win', async () => {
    // First answer 127.0.0.1 (allowed here), every later one the metadata address. `.test`
    // never resolves for real: the download succeeds only if the socket asks nobody again.
    const resolve = resolver(['127.0.0.1'], ['169.254.169.254']);
    const document = await fetchSource(
      { url: `http://bundles.test:${port}/doc.yaml`, sha256: sha(doc) },
      { allowances: ALLOW_ALL, resolve },
    );
    assert.equal(document.validations.length, 1);
    assert.deepEqual(resolve.asked, ['bundles.test'], 'resolved once, by the check');
    assert.equal(connections, 1);
  });

  test('a redirect to the metadata address is refused before connecting to it', async () => {
    const url = `http://127.0.0.1:${port}/to-metadata`;
    await refused(
      url,
      { allowances: ALLOW_ALL },
      `spec.source ${url}: redirected to http://169.254.169.254/latest/meta-data/iam/: destination 169.254.169.254 is a link-local address, where cloud metadata services answer, which no PolicyServer may reach`,
    );
    assert.equal(sockets, 1, 'only the first hop connected');
  });

  test('a redirect within what is allowed is followed; a loop stops after 5', async () => {
    const moved = await fetchSource(
      { url: `http://127.0.0.1:${port}/moved`, sha256: sha(doc) },
      { allowances: ALLOW_ALL },
    );
    assert.equal(moved.validations.length, 1);
    requests = 0;
    const url = `http://127.0.0.1:${port}/loop`;
    await refused(url, { allowances: ALLOW_ALL }, `spec.source ${url}: more than 5 redirects`);
    assert.equal(requests, 6, 'the first request and 5 redirects');
  });

  test('a failure reports nothing the server chose beyond its status: not its declared size', async () => {
    const url = `http://127.0.0.1:${port}/declared-huge`;
    await refused(
      url,
      { allowances: ALLOW_ALL },
      `spec.source: ${url} is over the 1048576-byte limit`,
    );
  });

  test('a refusal decided by the URL alone is permanent; one DNS decided may change', async () => {
    const transient = async (url: string, options: FetchSourceOptions) =>
      fetchSource({ url, sha256: sha(doc) }, options).then(
        () => assert.fail('loaded'),
        (err: SourceError) => err.transient,
      );
    assert.equal(await transient('https://127.0.0.1/x', {}), false);
    assert.equal(await transient('http://example.com/x', {}), false);
    assert.equal(
      await transient('https://bundles.test/x', { resolve: resolver(['10.0.0.1']) }),
      true,
    );
  });
});
