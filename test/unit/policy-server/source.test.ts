import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { compilePolicy } from '../../../data-plane/cel/index.ts';
import { neededLoads } from '../../../data-plane/lifecycle.ts';
import { loadNeed, type Compile, type LoadDeps } from '../../../data-plane/load.ts';
import { fetchSource, SourceError, type FetchSourceOptions } from '../../../data-plane/source.ts';

const good = `validations:
  - expression: "object.metadata.name != 'forbidden'"
    message: the name forbidden is taken
`;
const typo = `validations:
  - expression: "objekt.metadata.name != 'x'"
`;
const sha = (text: string) => createHash('sha256').update(text).digest('hex');
/** A PolicyServer that allows this file's bundle server: plain HTTP on loopback. */
const local: FetchSourceOptions = {
  allowances: { allowInsecureHTTP: true, allowPrivateDestinations: true },
};
const fetchLocal: LoadDeps['fetch'] = (source, options) =>
  fetchSource(source, { ...options, ...local });

describe('policy code from spec.source', () => {
  let server: Server;
  let base: string;
  before(async () => {
    server = createServer((req, res) => {
      if (req.url === '/good.yaml') return res.end(good);
      if (req.url === '/good.json')
        return res.end(JSON.stringify({ validations: [{ expression: 'true' }] }));
      if (req.url === '/typo.yaml') return res.end(typo);
      if (req.url === '/extra.yaml')
        return res.end('validations: [{expression: "true"}]\nvalidation: []\n');
      if (req.url === '/huge') {
        res.write('#'.repeat(600_000));
        return res.end('#'.repeat(600_000));
      }
      if (req.url === '/slow') {
        setTimeout(() => res.end(good), 1500);
        return;
      }
      res.writeHead(404, 'Not Found').end('no');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  test('parses a YAML or JSON document whose digest matches', async () => {
    const doc = await fetchSource({ url: `${base}/good.yaml`, sha256: sha(good) }, local);
    assert.equal(doc.validations[0]!.message, 'the name forbidden is taken');
    const json = JSON.stringify({ validations: [{ expression: 'true' }] });
    assert.deepEqual(await fetchSource({ url: `${base}/good.json`, sha256: sha(json) }, local), {
      validations: [{ expression: 'true' }],
    });
  });

  test('a 404 names the HTTP status and the URL', async () => {
    await assert.rejects(fetchSource({ url: `${base}/missing`, sha256: sha('') }, local), {
      name: 'SourceError',
      message: `spec.source: GET ${base}/missing answered HTTP 404 Not Found`,
      transient: true,
    });
  });

  test('a digest mismatch names the pinned digest, never the digest of what was served', async () => {
    const wrong = 'a'.repeat(64);
    await assert.rejects(
      fetchSource({ url: `${base}/good.yaml`, sha256: wrong }, local),
      (err: Error) => {
        assert.ok(err instanceof SourceError);
        assert.equal(
          err.message,
          `spec.source: ${base}/good.yaml does not match spec.source.sha256 ${wrong}`,
        );
        assert.doesNotMatch(err.message, new RegExp(sha(good)), 'a confirmation oracle');
        assert.equal(err.transient, true, 'the server may serve the pinned bytes later');
        return true;
      },
    );
  });

  test('a download slower than the timeout fails saying so', async () => {
    const started = Date.now();
    await assert.rejects(
      fetchSource({ url: `${base}/slow`, sha256: sha(good) }, { ...local, timeoutMs: 100 }),
      {
        message: `spec.source: GET ${base}/slow did not finish within 100 ms`,
      },
    );
    assert.ok(Date.now() - started < 1000, 'gave up at the timeout, not when the server answered');
  });

  test('a slow download within the timeout loads', async () => {
    const doc = await fetchSource(
      { url: `${base}/slow`, sha256: sha(good) },
      { ...local, timeoutMs: 5000 },
    );
    assert.equal(doc.validations.length, 1);
  });

  test('a document over the size cap is refused, naming the limit, not its size', async () => {
    await assert.rejects(fetchSource({ url: `${base}/huge`, sha256: sha('') }, local), {
      message: `spec.source: ${base}/huge is over the 1048576-byte limit`,
    });
  });

  test('a document with an unknown field is refused, naming it', async () => {
    const text = 'validations: [{expression: "true"}]\nvalidation: []\n';
    await assert.rejects(
      fetchSource({ url: `${base}/extra.yaml`, sha256: sha(text) }, local),
      (err: Error) => {
        assert.match(err.message, /is not a policy document .*Unrecognized key: "validation"/);
        assert.equal((err as SourceError).transient, false, 'the pinned document will not change');
        return true;
      },
    );
  });

  test('a refused connection fails with the URL and the cause', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/x`;
    await new Promise((r) => closed.close(r));
    await assert.rejects(fetchSource({ url, sha256: sha('') }, local), {
      message: `spec.source: GET ${url} failed: ECONNREFUSED`,
    });
  });

  describe('loading a generation', () => {
    const compile: Compile = compilePolicy;
    const need = (specExtra: Record<string, unknown>) =>
      neededLoads(
        [
          {
            metadata: { name: 'p', uid: 'u', generation: 1 },
            spec: {
              policyServer: 'default',
              rules: [
                {
                  operations: ['CREATE'],
                  apiGroups: [''],
                  apiVersions: ['v1'],
                  resources: ['pods'],
                },
              ],
              ...specExtra,
            },
          },
        ],
        [],
      )[0]!.current;

    test('inline validations compile and load', async () => {
      const outcome = await loadNeed(
        need({ validations: [{ expression: 'has(object.metadata)' }] }),
        { compile },
      );
      assert.equal(outcome.state, 'Loaded');
    });

    test('a CEL typo fails with the field path and the position', async () => {
      const outcome = await loadNeed(
        need({
          validations: [{ expression: 'true' }, { expression: 'objekt.metadata.name == "x"' }],
        }),
        { compile },
      );
      assert.equal(outcome.state, 'Failed');
      assert.match(
        outcome.state === 'Failed' ? outcome.message : '',
        /^spec\.validations\[1\]\.expression: .*objekt.* at 1:1/,
      );
    });

    test('a source document loads, and its typo names the URL and the document path', async () => {
      const ok = await loadNeed(need({ source: { url: `${base}/good.yaml`, sha256: sha(good) } }), {
        compile,
        fetch: fetchLocal,
      });
      assert.equal(ok.state, 'Loaded');
      const bad = await loadNeed(
        need({ source: { url: `${base}/typo.yaml`, sha256: sha(typo) } }),
        { compile, fetch: fetchLocal },
      );
      assert.equal(bad.state, 'Failed');
      assert.match(
        bad.state === 'Failed' ? bad.message : '',
        new RegExp(
          `^spec\\.source ${base}/typo\\.yaml: document\\.validations\\[0\\]\\.expression: .*objekt`,
        ),
      );
    });

    test('a source that answers 404 fails with the status', async () => {
      const outcome = await loadNeed(
        need({ source: { url: `${base}/missing`, sha256: sha('') } }),
        { compile, fetch: fetchLocal },
      );
      assert.deepEqual(outcome, {
        state: 'Failed',
        message: `spec.source: GET ${base}/missing answered HTTP 404 Not Found`,
        source: 'url',
        transient: true,
      });
    });

    test('by default the Policy is refused as its PolicyServer would: HTTPS to public addresses only', async () => {
      const outcome = await loadNeed(
        need({ source: { url: `${base}/good.yaml`, sha256: sha(good) } }),
        { compile },
      );
      assert.deepEqual(outcome, {
        state: 'Failed',
        message: `spec.source ${base}/good.yaml: plain HTTP, which PolicyServer default does not allow (spec.sources.allowInsecureHTTP); use https://`,
        source: 'url',
        transient: false,
      });
    });

    test('an engine that throws fails the policy, not the caller', async () => {
      const outcome = await loadNeed(need({ validations: [{ expression: 'true' }] }), {
        compile: () => {
          throw new Error('engine bug');
        },
      });
      assert.equal(outcome.state, 'Failed');
    });
  });
});
