// The watcher needs the names of rollcall's namespace's Secrets, never their data (private
// keys). Its RBAC lets it list and watch them, and RBAC cannot say "metadata only", so the
// watcher itself asks the apiserver for metadata only: the keys never reach its process (a
// heap dump or a compromised watcher finds none). Checked on the wire: a `rollcall watcher`
// process talks to the real apiserver through a recording proxy, and no answer it receives,
// list or watch event, holds a byte of a Secret's data.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';
import { Reflector } from '../../../lib/kube/reflector.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { eventually, waitForStatus } from '../../support/poll.ts';
import { startServing, type ServingRollcall } from '../../support/rollcall.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const namespace = uniqueName('rollcall-secret-meta').slice(0, 40);
const upstream = kubeConfigTarget(kc);

/** What the proxy passed to the watcher: each request's path and Accept, and every answer byte. */
interface Exchange {
  path: string;
  accept: string;
  body: Buffer[];
}
const exchanges: Exchange[] = [];
const seen = (needle: string) =>
  exchanges.filter((e) => Buffer.concat(e.body).includes(needle)).map((e) => e.path);

/** Plain HTTP in, the real apiserver out (as admin): what a watcher's kubeconfig points at. */
function recordingProxy(): Server {
  return createServer((req: IncomingMessage, res) => {
    const exchange: Exchange = {
      path: req.url ?? '',
      accept: req.headers.accept ?? '',
      body: [],
    };
    exchanges.push(exchange);
    void upstream.requestOptions().then((base) => {
      const out = request(
        new URL(upstream.server + (req.url ?? '/')),
        {
          ...base,
          method: req.method,
          headers: {
            ...(req.headers.accept && { accept: req.headers.accept }),
            ...(req.headers['content-type'] && { 'content-type': req.headers['content-type'] }),
            ...(req.headers['content-length'] && {
              'content-length': req.headers['content-length'],
            }),
            ...base.headers,
          },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.on('data', (chunk: Buffer) => {
            exchange.body.push(chunk);
            res.write(chunk);
          });
          answer.on('end', () => res.end());
          answer.on('error', () => res.destroy());
        },
      );
      out.on('error', () => res.destroy());
      res.on('close', () => out.destroy());
      req.pipe(out);
    });
  });
}

let proxy: Server;
let watcher: ServingRollcall | undefined;
const dir = mkdtempSync(join(tmpdir(), 'rollcall-secret-meta-'));
// Markers in the Secret's data, base64 as the API carries them; either on the wire is a leak.
const key = `PRIVATE-KEY-${randomBytes(8).toString('hex')}`;
const rotated = `ROTATED-KEY-${randomBytes(8).toString('hex')}`;
const b64 = (s: string) => Buffer.from(s).toString('base64');

before(async () => {
  proxy = recordingProxy();
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const port = (proxy.address() as { port: number }).port;
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'proxy', cluster: { server: `http://127.0.0.1:${port}` } }],
      users: [{ name: 'watcher', user: {} }],
      contexts: [{ name: 'proxy', context: { cluster: 'proxy', user: 'watcher' } }],
      'current-context': 'proxy',
    }),
  );
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  await core.createNamespacedSecret({
    namespace,
    body: {
      metadata: { name: 'rollcall-webhook-ca' },
      type: 'Opaque',
      data: { 'ca.key': b64(key) },
    },
  });
  watcher = await startServing('secret-metadata-watcher', 'watcher', namespace, [], {
    KUBECONFIG: kubeconfig,
  });
});

after(async () => {
  await watcher?.stop();
  proxy?.closeAllConnections();
  proxy?.close();
  await core.deleteNamespace({ name: namespace }).catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

test('the watcher lists and watches Secrets as metadata only: their data never reaches it', async () => {
  assert.ok(watcher);
  await waitForStatus(watcher.url('/readyz'), 200, 60_000, 'the watcher to lead and sync');
  const secrets = `/api/v1/namespaces/${namespace}/secrets`;
  assert.ok(seen('rollcall-webhook-ca').length > 0, 'the list named the Secret');
  assert.deepEqual(seen(b64(key)), [], "the Secret's data reached the watcher");
  const asked = () => exchanges.filter((e) => e.path.startsWith(secrets));
  // Ready once the list synced; the watch follows it.
  await eventually(
    `a list and a watch of ${secrets}`,
    () => asked().some((e) => e.path.includes('watch=true')),
    10_000,
    50,
  ).catch((err: Error) => {
    throw new Error(
      `${err.message}; asked: ${asked()
        .map((e) => e.path)
        .join(', ')}`,
    );
  });
  assert.ok(asked().length >= 2);
  for (const e of asked())
    assert.match(
      e.accept,
      /^application\/json;as=PartialObjectMetadata(List)?;g=meta\.k8s\.io;v=v1$/,
      e.path,
    );

  // A change arrives as a watch event, still without the data.
  await core.replaceNamespacedSecret({
    namespace,
    name: 'rollcall-webhook-ca',
    body: {
      metadata: { name: 'rollcall-webhook-ca', labels: { rotated: 'yes' } },
      type: 'Opaque',
      data: { 'ca.key': b64(rotated) },
    },
  });
  await eventually(
    'the watch event of the change',
    () =>
      exchanges.some(
        (e) =>
          e.path.startsWith(secrets) &&
          e.path.includes('watch=true') &&
          Buffer.concat(e.body).includes('"rotated":"yes"'),
      ),
    30_000,
    100,
  );
  for (const marker of [key, rotated])
    assert.deepEqual(seen(b64(marker)), [], `the Secret's data reached the watcher`);
});

test('a metadata-only list of a namespace without Secrets syncs too (the apiserver says items: null)', async () => {
  const empty = uniqueName('rollcall-no-secrets').slice(0, 40);
  await core.createNamespace({ body: { metadata: { name: empty } } });
  const reflector = new Reflector({
    api: upstream,
    path: `/api/v1/namespaces/${empty}/secrets`,
    metadataOnly: true,
  });
  try {
    reflector.start();
    await eventually('the reflector to sync', () => reflector.hasSynced(), 20_000, 50);
    assert.deepEqual(reflector.list(), []);
  } finally {
    await reflector.stop();
    await core.deleteNamespace({ name: empty }).catch(() => {});
  }
});
