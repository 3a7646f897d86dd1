// The simulated policy server's admission verdicts, and one AdmissionReview over TLS.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pino } from 'pino';
import { ensurePki, issueCertificate } from '../../../tooling/cluster/pki.ts';
import {
  startAdmissionServer,
  verdict,
  type AdmissionPolicy,
} from '../../../tooling/sim/admission.ts';

test('verdicts', () => {
  const cases: {
    name: string;
    policy: AdmissionPolicy;
    allowed: boolean;
    message?: string;
    warning?: boolean;
    audit?: boolean;
  }[] = [
    { name: 'sim://ok allows', policy: { module: 'sim://ok' }, allowed: true },
    {
      name: 'sim://deny denies with its message',
      policy: { module: 'sim://deny?message=no+latest' },
      allowed: false,
      message: 'no latest',
    },
    {
      name: 'sim://deny without a message',
      policy: { module: 'sim://deny' },
      allowed: false,
      message: 'denied by policy',
    },
    {
      name: 'Warn only warns',
      policy: { module: 'sim://deny?message=x', actions: ['Warn'] },
      allowed: true,
      warning: true,
    },
    {
      name: 'Audit admits, annotating the audit event',
      policy: { module: 'sim://deny?message=x', actions: ['Audit'] },
      allowed: true,
      audit: true,
    },
    {
      name: 'Deny with Audit denies and annotates',
      policy: { module: 'sim://deny?message=x', actions: ['Deny', 'Audit'] },
      allowed: false,
      message: 'x',
      audit: true,
    },
    {
      name: 'a real module is allowed',
      policy: { module: 'https://example.com/p.wasm' },
      allowed: true,
    },
  ];
  for (const c of cases) {
    const r = verdict('uid-1', 'p', c.policy);
    assert.equal(r.uid, 'uid-1', c.name);
    assert.equal(r.allowed, c.allowed, c.name);
    assert.equal(r.status?.message, c.message, c.name);
    assert.equal((r.warnings?.length ?? 0) > 0, c.warning ?? false, c.name);
    assert.equal(r.auditAnnotations !== undefined, c.audit ?? false, c.name);
  }
});

test('answers an AdmissionReview over TLS, and 404 for an unknown policy', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-admission-'));
  const pki = ensurePki(dir);
  const { cert, key } = issueCertificate(dir, 'sim', 'sim', ['IP:127.0.0.1']);
  const policies: Record<string, AdmissionPolicy> = {
    strict: { module: 'sim://deny?message=nope' },
  };
  const server = await startAdmissionServer({
    port: 0,
    certFile: cert,
    keyFile: key,
    policy: (n) => policies[n],
    logger: pino({ level: 'silent' }),
  });
  const port = (server.address() as { port: number }).port;
  const post = (path: string, body: unknown) =>
    new Promise<{ code: number; body: { response?: unknown } }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path,
          method: 'POST',
          ca: readFileSync(pki.caCert),
          headers: { 'content-type': 'application/json' },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ code: res.statusCode ?? 0, body: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(body));
    });
  try {
    const review = {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: { uid: 'abc', operation: 'CREATE' },
    };
    const denied = await post('/validate/strict/3', review);
    assert.equal(denied.code, 200);
    assert.deepEqual(denied.body.response, {
      uid: 'abc',
      allowed: false,
      status: { code: 403, message: 'nope', reason: 'Forbidden' },
    });
    assert.equal((await post('/validate/strict', review)).code, 404, 'a path without generation');
    assert.equal((await post('/validate/unknown/1', review)).code, 404);
    assert.equal((await post('/validate/strict/1', { kind: 'Nope' })).code, 400);
  } finally {
    server.close();
    server.closeAllConnections();
    rmSync(dir, { recursive: true, force: true });
  }
});
