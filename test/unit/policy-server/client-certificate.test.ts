// `--client-ca-file`: with it, the policy server answers AdmissionReviews only on connections
// whose client certificate its CAs signed (the apiserver's), over a real TLS listener; the
// probes and /metrics stay open to clients without one (the kubelet has none).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pino } from 'pino';
import { ensurePki, issueCertificate } from '../../../tooling/cluster/pki.ts';
import {
  readClientCa,
  startHttpsServer,
  type PolicyHttpsServer,
} from '../../../data-plane/https-server.ts';
import { PolicyServerMetrics } from '../../../data-plane/metrics.ts';
import { httpsRequest } from '../../support/https.ts';
import { loadedTarget } from './fixtures/slow-server.ts';

const review = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: { uid: 'r' },
});

describe('the policy server with --client-ca-file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-client-ca-'));
  // The apiserver's client CA, which also signs the serving certificate here; and another CA.
  const pki = ensurePki(join(dir, 'clients'));
  const stranger = ensurePki(join(dir, 'stranger'));
  const ca = readFileSync(pki.caCert);
  const pair = (issuer: string, name: string, cn: string) => {
    const files = issueCertificate(issuer, name, cn, ['IP:127.0.0.1']);
    return { cert: readFileSync(files.cert), key: readFileSync(files.key) };
  };
  const apiserver = pair(pki.dir, 'apiserver-webhook-client', 'kube-apiserver');
  const impostor = pair(stranger.dir, 'impostor', 'kube-apiserver');
  let server: PolicyHttpsServer;

  /** A request from a client with `identity` (a certificate and key), or none. */
  const call = (
    method: string,
    path: string,
    identity: { cert: Buffer; key: Buffer } | undefined,
  ) =>
    httpsRequest(
      {
        host: '127.0.0.1',
        port: server.port,
        method,
        path,
        ca,
        agent: false,
        headers: { 'content-type': 'application/json' },
        ...identity,
      },
      method === 'POST' ? review : undefined,
    );

  before(async () => {
    server = await startHttpsServer({
      port: 0,
      address: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      metrics: new PolicyServerMetrics(),
      readiness: () => ({ ready: true, detail: 'all loaded' }),
      admission: {
        target: loadedTarget,
        evaluate: async () => ({ kind: 'verdict', verdict: { allowed: true } }),
      },
      clientCaFile: pki.caCert,
    });
    server.setCertificate(pair(pki.dir, 'serving-1', 'policy-server'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('refuses an AdmissionReview from a client without a certificate, unread', async () => {
    const res = await call('POST', '/validate/p/1', undefined);
    assert.equal(res.status, 403);
    assert.match(
      JSON.parse(res.body).error,
      /need a client certificate signed by a CA of --client-ca-file; none was presented/,
    );
    assert.equal(res.headers.connection, 'close');
  });

  test('refuses one whose certificate another CA signed', async () => {
    const res = await call('POST', '/validate/p/1', impostor);
    assert.equal(res.status, 403);
    assert.match(JSON.parse(res.body).error, /the one presented is not: /);
  });

  test('answers one whose certificate the client CA signed', async () => {
    const res = await call('POST', '/validate/p/1', apiserver);
    assert.equal(res.status, 200);
    assert.equal(JSON.parse(res.body).response.allowed, true);
  });

  test('the audit endpoint is under the same rule', async () => {
    const batch = JSON.stringify({
      resource: { group: '', version: 'v1', resource: 'configmaps' },
      kind: { group: '', version: 'v1', kind: 'ConfigMap' },
      policies: [{ name: 'p', generation: 1 }],
      items: [{ object: { metadata: { name: 'a', namespace: 'n' } }, policies: [0] }],
    });
    const audit = (identity: { cert: Buffer; key: Buffer } | undefined) =>
      httpsRequest(
        {
          host: '127.0.0.1',
          port: server.port,
          method: 'POST',
          path: '/audit',
          ca,
          agent: false,
          headers: { 'content-type': 'application/json' },
          ...identity,
        },
        batch,
      );
    const refused = await audit(undefined);
    assert.equal(refused.status, 403);
    assert.equal((await audit(impostor)).status, 403);
    const answered = await audit(apiserver);
    assert.equal(answered.status, 200, answered.body);
    assert.deepEqual(JSON.parse(answered.body), { results: [[{ result: 'pass' }]] });
  });

  test('keeps the probes and /metrics open to clients without a certificate (the kubelet)', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics'])
      assert.equal((await call('GET', path, undefined)).status, 200, path);
  });

  test('still checks client certificates after the serving certificate is swapped', async () => {
    server.setCertificate(pair(pki.dir, 'serving-2', 'policy-server'));
    assert.equal((await call('POST', '/validate/p/1', undefined)).status, 403);
    assert.equal((await call('POST', '/validate/p/1', impostor)).status, 403);
    assert.equal((await call('POST', '/validate/p/1', apiserver)).status, 200);
  });
});

test('a client CA file that is missing or holds no certificate is an error naming the file', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-client-ca-'));
  try {
    const missing = join(dir, 'missing.crt');
    await assert.rejects(readClientCa(missing), new RegExp(`--client-ca-file ${missing}: ENOENT`));
    const junk = join(dir, 'junk.crt');
    writeFileSync(junk, 'not a certificate\n');
    await assert.rejects(
      readClientCa(junk),
      /--client-ca-file .*junk\.crt: holds no PEM certificate/,
    );
    const broken = join(dir, 'broken.crt');
    writeFileSync(broken, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    await assert.rejects(readClientCa(broken), /certificate 1 does not parse/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
