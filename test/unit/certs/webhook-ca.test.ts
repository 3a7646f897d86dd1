import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { V1Secret } from '@kubernetes/client-node';
import {
  createCa,
  issueServingCertificate,
  type CertificateAuthority,
} from '../../../lib/certs/index.ts';
import type { KubeWriter } from '../../../control-plane/functions/kube-writer.ts';
import { caSecret } from '../../../control-plane/functions/managed-tls-core.ts';
import type { FunctionConfig } from '../../../control-plane/functions/types.ts';
import { webhookCaBundle } from '../../../control-plane/functions/webhook-ca.ts';
import { aPolicyServer, NAMESPACE } from '../../fixtures/builders.ts';
import { functionContext } from '../../fixtures/function-context.ts';
import { TLS_NOW as NOW } from '../../fixtures/tls-clock.ts';

let ca: CertificateAuthority;
before(async () => {
  ca = await createCa({ commonName: 'test-ca', validityMs: 86_400_000, now: NOW });
});

/** A job's context whose API holds `secret` as the CA Secret; counts the reads. */
function job(secret: V1Secret | undefined, config: Partial<FunctionConfig> = {}) {
  const reads: string[] = [];
  const kube = {
    getSecret: async (_ns: string, name: string) => {
      reads.push(name);
      return secret;
    },
  } as unknown as KubeWriter;
  return { ctx: functionContext({ kube, config, now: NOW }), reads };
}

const own = aPolicyServer({ name: 'a', spec: { image: undefined } });

describe('webhookCaBundle', () => {
  test("a server of rollcall's image gets the managed CA's ca.crt, base64", async () => {
    const { ctx } = job(caSecret(ca, NAMESPACE));
    // Exactly the Secret's ca.crt: during a rotation that is both CAs.
    assert.deepEqual(await webhookCaBundle(ctx, own), {
      caBundle: caSecret(ca, NAMESPACE).data?.['ca.crt'],
    });
  });

  test('reads the CA Secret once per job, however many servers ask', async () => {
    const { ctx, reads } = job(caSecret(ca, NAMESPACE));
    await webhookCaBundle(ctx, own);
    await webhookCaBundle(ctx, aPolicyServer({ name: 'b', spec: { image: undefined } }));
    assert.deepEqual(reads, ['rollcall-webhook-ca']);
    const next = job(caSecret(ca, NAMESPACE));
    await webhookCaBundle(next.ctx, own);
    assert.equal(next.reads.length, 1, 'the next job reads again');
  });

  test('is blocked while the managed CA does not exist, or cannot be used', async () => {
    const absent = await webhookCaBundle(job(undefined).ctx, own);
    assert.match('blocked' in absent ? absent.blocked : '', /does not exist yet/);
    const broken = await webhookCaBundle(job(caSecret({ ...ca, keyPem: 'x' }, NAMESPACE)).ctx, own);
    assert.match('blocked' in broken ? broken.blocked : '', /is unusable \(ca.key does not belong/);
  });

  test('spec.caBundle wins over the managed CA and reads no Secret', async () => {
    const { ctx, reads } = job(caSecret(ca, NAMESPACE));
    const server = aPolicyServer({ spec: { image: undefined, caBundle: 'Q0E=' } });
    assert.deepEqual(await webhookCaBundle(ctx, server), { caBundle: 'Q0E=' });
    assert.deepEqual(reads, []);
  });

  test('--webhook-ca-file wins over everything, as before', async () => {
    const { ctx } = job(undefined, { webhookCaBundle: 'RklMRQ==' });
    const server = aPolicyServer({ spec: { caBundle: 'Q0E=' } });
    assert.deepEqual(await webhookCaBundle(ctx, server), { caBundle: 'RklMRQ==' });
  });

  describe('spec.caSecretRef', () => {
    const server = aPolicyServer({
      name: 'cm',
      spec: { image: undefined, caSecretRef: { name: 'cm-tls', key: 'ca.crt' } },
    });
    const b64 = (t: string) => Buffer.from(t).toString('base64');
    const tlsSecret = async (signer: CertificateAuthority, caPem = ca.certPem) => {
      const leaf = await issueServingCertificate({
        ca: signer,
        dnsNames: ['policy-server-cm.rollcall-system.svc'],
        validityMs: 3_600_000,
        now: NOW,
      });
      return {
        type: 'kubernetes.io/tls',
        data: { 'ca.crt': b64(caPem), 'tls.crt': b64(leaf.certPem), 'tls.key': b64(leaf.keyPem) },
      } satisfies V1Secret;
    };

    test('a Secret as cert-manager writes it gives the webhooks its ca.crt', async () => {
      const { ctx, reads } = job(await tlsSecret(ca));
      assert.deepEqual(await webhookCaBundle(ctx, server), { caBundle: b64(ca.certPem) });
      assert.deepEqual(reads, ['cm-tls']);
    });

    test('a missing Secret is blocked, saying which Secret to create', async () => {
      const got = await webhookCaBundle(job(undefined).ctx, server);
      assert.match(
        'blocked' in got ? got.blocked : '',
        /Secret rollcall-system\/cm-tls \(spec.caSecretRef of PolicyServer cm\) does not exist/,
      );
    });

    test("a certificate that does not chain to the Secret's CA is blocked with the reason", async () => {
      const other = await createCa({ commonName: 'other-ca', validityMs: 86_400_000, now: NOW });
      const got = await webhookCaBundle(job(await tlsSecret(other)).ctx, server);
      assert.match('blocked' in got ? got.blocked : '', /does not chain to the CA/);
    });
  });

  test("a server with an image of its own and no CA gets no bundle (the API server's trust roots)", async () => {
    const { ctx, reads } = job(caSecret(ca, NAMESPACE));
    assert.deepEqual(await webhookCaBundle(ctx, aPolicyServer()), {});
    assert.deepEqual(reads, []);
  });
});
