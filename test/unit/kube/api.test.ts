import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { parse } from 'yaml';
import {
  credentialsTarget,
  inClusterCredentials,
  isHealthy,
  KubeApiError,
  kubeconfigCredentials,
  loadApiTarget,
  requestJson,
  watchJson,
  type ApiTarget,
} from '../../../lib/kube/api.ts';
import { responseHeaderOf, statusCodeOf } from '../../../lib/kube/errors.ts';

const kubeconfigText = (user: string, cluster = 'server: https://127.0.0.1:6443') => `
apiVersion: v1
kind: Config
current-context: local
contexts: [{ name: local, context: { cluster: c, user: u } }]
clusters: [{ name: c, cluster: { ${cluster} } }]
users: [{ name: u, user: { ${user} } }]
`;
const kubeconfig = (user: string, cluster?: string): unknown =>
  parse(kubeconfigText(user, cluster));
const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('kubeconfigCredentials', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-kubeconfig-'));
  writeFileSync(join(dir, 'ca.crt'), 'CA FILE');
  writeFileSync(join(dir, 'token'), 'TOKEN FILE');

  test('reads inline certificate data and the server of the current context', () => {
    const c = kubeconfigCredentials(
      kubeconfig(
        `client-certificate-data: ${b64('CERT')}, client-key-data: ${b64('KEY')}`,
        `server: https://10.0.0.1:6443, certificate-authority-data: ${b64('CA')}`,
      ),
      dir,
    );
    assert.equal(c?.server, 'https://10.0.0.1:6443');
    assert.equal(c?.ca?.toString(), 'CA');
    assert.equal(c?.cert?.toString(), 'CERT');
    assert.equal(c?.key?.toString(), 'KEY');
    assert.equal(c?.insecure, false);
  });

  test('reads files relative to the kubeconfig folder, a token and a token file', () => {
    const c = kubeconfigCredentials(
      kubeconfig(
        'token: abc, tokenFile: token',
        'server: https://h, certificate-authority: ca.crt',
      ),
      dir,
    );
    assert.equal(c?.ca?.toString(), 'CA FILE');
    assert.equal(c?.token, 'abc');
    assert.equal(c?.tokenFile, join(dir, 'token'));
  });

  test('honours insecure-skip-tls-verify and tls-server-name', () => {
    const c = kubeconfigCredentials(
      kubeconfig(
        'token: t',
        'server: https://h, insecure-skip-tls-verify: true, tls-server-name: api',
      ),
      dir,
    );
    assert.equal(c?.insecure, true);
    assert.equal(c?.serverName, 'api');
  });

  test("reads client-node's in-cluster form (auth-provider tokenFile) as a token file", () => {
    const c = kubeconfigCredentials(
      kubeconfig('auth-provider: { name: tokenFile, config: { tokenFile: token } }'),
      dir,
    );
    assert.equal(c?.tokenFile, join(dir, 'token'));
    assert.equal(c?.token, undefined);
  });

  test('property: an auth-provider other than tokenFile with a file is always handed to client-node', () => {
    fc.assert(
      fc.property(
        fc.string().filter((name) => name !== 'tokenFile'),
        fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.integer(), fc.constant(null))),
        (name, config) => {
          const document = kubeconfig('token: t');
          (document as { users: { user: Record<string, unknown> }[] }).users[0]!.user = {
            'auth-provider': { name, config },
          };
          assert.equal(kubeconfigCredentials(document, dir), undefined);
        },
      ),
    );
  });

  for (const [name, user, cluster] of [
    ['an exec plugin', 'exec: { command: aws }', undefined],
    ['an auth-provider', 'auth-provider: { name: oidc }', undefined],
    ['a tokenFile auth-provider without a file', 'auth-provider: { name: tokenFile }', undefined],
    ['a proxy', 'token: t', 'server: https://h, proxy-url: http://proxy:3128'],
  ] as const)
    test(`leaves ${name} to client-node (undefined)`, () => {
      assert.equal(kubeconfigCredentials(kubeconfig(user, cluster), dir), undefined);
    });

  test('names a current context that does not exist', () => {
    const text = kubeconfigText('token: t').replace(
      'current-context: local',
      'current-context: nope',
    );
    assert.throws(() => kubeconfigCredentials(parse(text), dir), /no context named 'nope'/);
  });

  test('hands a kubeconfig with a plugin to client-node, which reads the same server', async () => {
    const path = join(dir, 'exec.kubeconfig');
    writeFileSync(
      path,
      kubeconfigText('exec: { apiVersion: client.authentication.k8s.io/v1, command: true }'),
    );
    assert.equal((await loadApiTarget(path)).server, 'https://127.0.0.1:6443');
  });
});

describe('inClusterCredentials', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-sa-'));
  writeFileSync(join(dir, 'ca.crt'), 'SA CA');

  test('uses the service host and port, the CA and the token file of the service account', () => {
    const c = inClusterCredentials(
      { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' },
      dir,
    );
    assert.equal(c.server, 'https://10.96.0.1:443');
    assert.equal(c.ca?.toString(), 'SA CA');
    assert.equal(c.tokenFile, `${dir}/token`);
  });

  test('brackets an IPv6 service host', () => {
    const env = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
    assert.equal(inClusterCredentials(env, dir).server, 'https://[fd00::1]:443');
  });

  test('says what is missing outside a pod', () => {
    assert.throws(() => inClusterCredentials({}, dir), /not a pod/);
  });
});

describe('requests and watches', () => {
  let handle: (req: IncomingMessage, res: ServerResponse) => void = () => {};
  const server = createServer((req, res) => handle(req, res));
  let target: ApiTarget;
  const tokenDir = mkdtempSync(join(tmpdir(), 'rollcall-token-'));
  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    writeFileSync(join(tokenDir, 'token'), 'first\n');
    target = credentialsTarget({
      server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      tokenFile: join(tokenDir, 'token'),
    });
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  test('sends a JSON body with the bearer token from the file, reread as it rotates', async () => {
    const seen: { auth?: string; type?: string; body: string }[] = [];
    handle = (req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ auth: req.headers.authorization, type: req.headers['content-type'], body });
        res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
      });
    };
    assert.deepEqual(await requestJson(target, 'POST', '/x', { body: { a: 1 } }), { ok: true });
    writeFileSync(join(tokenDir, 'token'), 'second\n');
    await requestJson(target, 'GET', '/x');
    assert.deepEqual(seen, [
      { auth: 'Bearer first', type: 'application/json', body: '{"a":1}' },
      { auth: 'Bearer second', type: undefined, body: '' },
    ]);
  });

  test('sends a PATCH body with the media type it names', async () => {
    let seen: { method?: string; type?: string; body: string } | undefined;
    handle = (req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen = { method: req.method, type: req.headers['content-type'], body };
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    };
    await requestJson(target, 'PATCH', '/p/status', {
      body: { status: { phase: 'Running' } },
      contentType: 'application/merge-patch+json',
    });
    assert.deepEqual(seen, {
      method: 'PATCH',
      type: 'application/merge-patch+json',
      body: '{"status":{"phase":"Running"}}',
    });
  });

  test('sends the body of a DELETE (its options), which Node frames only with a Content-Length', async () => {
    const seen: string[] = [];
    handle = (req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push(`${req.method} ${body}`);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    };
    await requestJson(target, 'DELETE', '/p', { body: { gracePeriodSeconds: 0 } });
    await requestJson(target, 'GET', '/p');
    assert.deepEqual(seen, ['DELETE {"gracePeriodSeconds":0}', 'GET ']);
  });

  test('reads a health endpoint, whose answer is text: healthy only on 200', async () => {
    handle = (req, res) =>
      req.url === '/readyz' ? res.writeHead(200).end('ok') : res.writeHead(500).end('[-]etcd');
    assert.equal(await isHealthy(target, '/readyz'), true);
    assert.equal(await isHealthy(target, '/livez'), false);
    const nobody = credentialsTarget({ server: 'http://127.0.0.1:1' });
    assert.equal(await isHealthy(nobody, '/readyz'), false);
  });

  test("rejects a non-2xx answer with the apiserver's status", async () => {
    handle = (_req, res) =>
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(
          '{"kind":"Status","code":404,"reason":"NotFound","message":"leases \\"l\\" not found"}',
        );
    const err = await requestJson(target, 'GET', '/missing').catch((e: unknown) => e);
    assert.ok(err instanceof KubeApiError);
    assert.equal(err.statusCode, 404);
    assert.match(err.message, /404 NotFound: leases "l" not found/);
  });

  test("keeps a refusal's headers (a 429's Retry-After)", async () => {
    handle = (_req, res) =>
      res
        .writeHead(429, { 'content-type': 'application/json', 'retry-after': '3' })
        .end('{"kind":"Status","code":429,"reason":"TooManyRequests"}');
    const err = await requestJson(target, 'PATCH', '/p').catch((e: unknown) => e);
    assert.equal(statusCodeOf(err), 429);
    assert.equal(responseHeaderOf(err, 'Retry-After'), '3');
  });

  test('gives up on an apiserver that stops answering, before or during its answer, saying so', async () => {
    for (const stall of ['before headers', 'mid-body']) {
      handle = (_req, res) => {
        if (stall === 'mid-body')
          res.writeHead(200, { 'content-type': 'application/json' }).write('{"a"');
      };
      const started = Date.now();
      const err = await requestJson(target, 'GET', '/slow', { timeoutMs: 200 }).catch(
        (e: unknown) => e,
      );
      assert.ok(err instanceof Error, stall);
      assert.match(err.message, /did not answer GET \/slow within 200 ms/, stall);
      assert.ok(Date.now() - started < 5000, stall);
    }
  });

  test('property: a server that trickles its answer, from any point and at any pace, is given up on in time', async () => {
    const timers = new Set<NodeJS.Timeout>();
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          // How much of a valid answer comes at once, then one byte per `everyMs`, never ending.
          prefix: fc.integer({ min: 0, max: 40 }),
          everyMs: fc.integer({ min: 1, max: 80 }),
          timeoutMs: fc.integer({ min: 50, max: 250 }),
          headers: fc.boolean(),
        }),
        async ({ prefix, everyMs, timeoutMs, headers }) => {
          const body = JSON.stringify({ items: Array.from({ length: 20 }, (_, i) => i) });
          handle = (_req, res) => {
            if (!headers) return; // not even the status line
            res.writeHead(200, { 'content-type': 'application/json' });
            res.write(body.slice(0, prefix));
            let at = prefix;
            const timer = setInterval(() => {
              // Short of the last byte: the answer is never whole.
              if (at < body.length - 1 && !res.destroyed) res.write(body[at++]!);
            }, everyMs);
            timers.add(timer);
            res.on('close', () => clearInterval(timer));
          };
          const started = Date.now();
          const err = await requestJson(target, 'GET', '/trickle', { timeoutMs }).catch(
            (e: unknown) => e,
          );
          assert.ok(err instanceof Error);
          assert.match(err.message, new RegExp(`within ${timeoutMs} ms`));
          assert.ok(Date.now() - started < timeoutMs + 2000, 'bounded by the timeout');
        },
      ),
      { numRuns: 15 },
    );
    for (const t of timers) clearInterval(t);
  });

  test('delivers watch events in order, whatever the chunks, and resolves when the server ends', async () => {
    handle = (req, res) => {
      assert.equal(new URL(req.url!, 'http://x').searchParams.get('watch'), 'true');
      res.writeHead(200, { 'content-type': 'application/json' });
      const lines = [1, 2, 3]
        .map((n) => JSON.stringify({ type: 'ADDED', object: { n } }))
        .join('\n');
      res.write(lines.slice(0, 10));
      setTimeout(() => res.end(`${lines.slice(10)}\n`), 20);
    };
    const events: unknown[] = [];
    await watchJson(target, '/w', {}, (type, object) => events.push([type, object]));
    assert.deepEqual(events, [
      ['ADDED', { n: 1 }],
      ['ADDED', { n: 2 }],
      ['ADDED', { n: 3 }],
    ]);
  });

  test('delivers a last event that the server ended without a newline', async () => {
    handle = (_req, res) => res.writeHead(200).end('{"type":"ADDED","object":{"n":1}}');
    const events: unknown[] = [];
    await watchJson(target, '/w', {}, (type, object) => events.push([type, object]));
    assert.deepEqual(events, [['ADDED', { n: 1 }]]);
  });

  test('rejects a refused watch with its status code (410 makes the reflector relist)', async () => {
    handle = (_req, res) =>
      res
        .writeHead(410, { 'content-type': 'application/json' })
        .end('{"code":410,"reason":"Expired"}');
    const err = await watchJson(target, '/w', {}, () => {}).catch((e: unknown) => e);
    assert.ok(err instanceof KubeApiError);
    assert.equal(err.statusCode, 410);
  });

  test('rejects a stream that sends a line that is not JSON', async () => {
    handle = (_req, res) => res.writeHead(200).end('{"type":"ADDED","object":{}}\nnot json\n');
    await assert.rejects(
      watchJson(target, '/w', {}, () => {}),
      /not JSON/,
    );
  });
});
