// spec.source as an attacker's server-side request forgery, against a real `rollcall
// policy-server` process: without its PolicyServer's allowance, a Policy whose source is
// 127.0.0.1 (spelled as a dotted address, as a decimal number, or as `localhost`) or the cloud
// metadata address fails to load with a message that says the destination is not allowed, a
// listener on 127.0.0.1 sees no connection, and the process never even tries to connect
// there (every connection attempt it makes is recorded by a preloaded diagnostics hook).
// Started again with the flags the PolicyServer's spec.sources becomes, the loopback source
// loads, and the metadata address stays refused.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { policyServerArgs } from '../../../control-plane/functions/policyserver-core.ts';
import { recordConnections } from '../../support/connection-recorder.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { createRule, policyManifest } from '../../support/manifests.ts';
import { TestPolicyServer, type ReportEntry } from '../../support/policy-server-process.ts';
import { until as poll } from '../../support/scenario.ts';

const kc = testKubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const group = { group: 'rollcall.dev', version: 'v1alpha1', plural: 'policies' };
const server = uniqueName('ssrf');
const ps = new TestPolicyServer({
  namespace: uniqueName('ps-ssrf'),
  server,
  podName: 'policy-server-ssrf',
});
const doc = 'validations:\n  - expression: "true"\n';
const sha256 = createHash('sha256').update(doc).digest('hex');
const attempts = join(tmpdir(), `${server}-connections.log`);
const METADATA = 'https://169.254.169.254/latest/meta-data/iam/security-credentials/';

const until = <T>(what: string, check: () => Promise<T | undefined>) =>
  poll(what, check, { timeoutMs: 60_000, everyMs: 200 });
/** The report's entries for `names`, once every one of them is in a final state. */
const finals = (names: string[]) =>
  until(`${names.join(', ')} reported Loaded or Failed`, async () => {
    const report = await ps.report();
    const entries = names.map((n) => report[n]);
    return entries.every((e) => e?.state === 'Loaded' || e?.state === 'Failed')
      ? (entries as ReportEntry[])
      : undefined;
  });
const attempted = () =>
  readFileSync(attempts, 'utf8')
    .split('\n')
    .filter((line) => line !== '');

describe('spec.source destinations, on a real policy server', () => {
  let listener: Server;
  let port = 0;
  let connections = 0;
  const names = {
    dotted: `${server}-dotted`,
    decimal: `${server}-decimal`,
    localhost: `${server}-localhost`,
    metadata: `${server}-metadata`,
    allowed: `${server}-allowed`,
  };
  const create = (name: string, url: string) =>
    custom.createClusterCustomObject({
      ...group,
      body: policyManifest(name, server, {
        rules: [createRule('configmaps')],
        source: { url, sha256 },
      }),
    });

  before(async () => {
    listener = createServer((_req, res) => res.end(doc));
    listener.on('connection', () => connections++);
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    port = (listener.address() as AddressInfo).port;
    writeFileSync(attempts, '');
    await ps.prepare();
    // HTTPS, which every PolicyServer allows: what is refused is the destination.
    await create(names.dotted, `https://127.0.0.1:${port}/doc.yaml`);
    await create(names.decimal, `https://2130706433:${port}/doc.yaml`);
    await create(names.localhost, `https://localhost:${port}/doc.yaml`);
    await create(names.metadata, METADATA);
  });

  after(async () => {
    ps.kill();
    for (const name of Object.values(names))
      await custom.deleteClusterCustomObject({ ...group, name }).catch(() => {});
    await ps.cleanUp();
    listener.closeAllConnections();
    listener.close();
  });

  test('without the allowance: each fails saying the destination is not allowed, and nothing connects there', async () => {
    await ps.start({ logName: 'policy-server-ssrf.log', env: recordConnections(attempts) });
    const [dotted, decimal, localhost, metadata] = await finals([
      names.dotted,
      names.decimal,
      names.localhost,
      names.metadata,
    ]);
    const loopback = (url: string, host = '127.0.0.1') =>
      `spec.source ${url}: destination ${host} is a loopback address, which PolicyServer ${server} does not allow (spec.sources.allowPrivateDestinations)`;
    assert.equal(dotted?.state, 'Failed');
    assert.equal(dotted?.message, loopback(`https://127.0.0.1:${port}/doc.yaml`));
    assert.equal(decimal?.message, loopback(`https://2130706433:${port}/doc.yaml`));
    assert.match(
      localhost?.message ?? '',
      new RegExp(
        `^spec\\.source https://localhost:${port}/doc\\.yaml: localhost resolves to (127\\.0\\.0\\.1|::1), a loopback address, which PolicyServer ${server} does not allow \\(spec\\.sources\\.allowPrivateDestinations\\)$`,
      ),
    );
    assert.equal(
      metadata?.message,
      `spec.source ${METADATA}: destination 169.254.169.254 is a link-local address, where cloud metadata services answer, which no PolicyServer may reach`,
    );
    assert.equal(connections, 0, 'the listener on 127.0.0.1 saw no connection');
    const tried = attempted();
    assert.ok(tried.length > 0, 'the recorder works: the process connected to the apiserver');
    assert.deepEqual(
      tried.filter((a) => a.startsWith('169.254.') || a.endsWith(`:${port}`)),
      [],
      `no connection attempt to the metadata address or the listener: ${tried.join(', ')}`,
    );
  });

  test("with the flags the PolicyServer's spec.sources becomes, the loopback source loads; the metadata address stays refused", async () => {
    ps.kill();
    const flags = policyServerArgs({ allowInsecureHTTP: true, allowPrivateDestinations: true });
    await create(names.allowed, `http://127.0.0.1:${port}/doc.yaml`);
    await ps.start({
      logName: 'policy-server-ssrf-allowed.log',
      args: flags.filter((arg) => arg.startsWith('--sources-')),
      env: recordConnections(attempts),
    });
    const [allowed, metadata] = await finals([names.allowed, names.metadata]);
    assert.equal(allowed?.state, 'Loaded', allowed?.message);
    assert.ok(connections > 0, 'the download reached the listener');
    assert.equal(metadata?.state, 'Failed');
    assert.match(metadata?.message ?? '', /169\.254\.169\.254 is a link-local address/);
    assert.deepEqual(
      attempted().filter((a) => a.startsWith('169.254.')),
      [],
      'never an attempt to the metadata address',
    );
  });
});
