import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { V1Secret } from '@kubernetes/client-node';
import {
  createCa,
  inspectCertificate,
  issueServingCertificate,
  type CertificateAuthority,
} from '../../../lib/certs/index.ts';
import { servingDnsNames } from '../../../control-plane/functions/managed-tls-core.ts';
import { computePolicyServerStatus } from '../../../control-plane/functions/policyserver-core.ts';
import {
  certificateStatus,
  expiryWarning,
  externalRecheckAt,
  readReferencedTls,
} from '../../../control-plane/functions/policyserver-tls-core.ts';
import { aPolicyServer, NAMESPACE } from '../../fixtures/builders.ts';
import { DAY, later, TLS_NOW as NOW } from '../../fixtures/tls-clock.ts';

const server = aPolicyServer({
  name: 'cm',
  spec: { image: undefined, caSecretRef: { name: 'cm-tls', key: 'ca.crt' } },
});
const b64 = (t: string) => Buffer.from(t).toString('base64');

let ca: CertificateAuthority;
let other: CertificateAuthority;
before(async () => {
  [ca, other] = await Promise.all([
    createCa({ commonName: 'cm-ca', validityMs: 365 * DAY, now: NOW }),
    createCa({ commonName: 'other', validityMs: 365 * DAY, now: NOW }),
  ]);
});

async function certManagerSecret(
  over: { signer?: CertificateAuthority; dnsNames?: string[]; drop?: string[] } = {},
): Promise<V1Secret> {
  const leaf = await issueServingCertificate({
    ca: over.signer ?? ca,
    dnsNames: over.dnsNames ?? servingDnsNames('cm', NAMESPACE),
    validityMs: 90 * DAY,
    now: NOW,
  });
  const data: Record<string, string> = {
    'ca.crt': b64(ca.certPem),
    'tls.crt': b64(leaf.certPem),
    'tls.key': b64(leaf.keyPem),
  };
  for (const key of over.drop ?? []) delete data[key];
  return { type: 'kubernetes.io/tls', data };
}

const problemOf = (r: ReturnType<typeof readReferencedTls>) =>
  r.kind === 'problem' ? r.problem : undefined;

describe('readReferencedTls', () => {
  test('a Secret as cert-manager writes it is trusted: its ca.crt and the certificate facts', async () => {
    const reading = readReferencedTls(await certManagerSecret(), server, NAMESPACE, later(DAY));
    assert.equal(reading.kind, 'ok');
    if (reading.kind !== 'ok') return;
    assert.equal(reading.caPem, ca.certPem);
    assert.deepEqual(reading.certificate?.notAfter, later(90 * DAY));
  });

  const problems: [string, () => Promise<V1Secret | undefined>, string, RegExp][] = [
    ['a missing Secret', async () => undefined, 'TLSSecretNotFound', /does not exist; create it/],
    [
      'a Secret without ca.crt',
      () => certManagerSecret({ drop: ['ca.crt'] }),
      'TLSSecretInvalid',
      /holds no CA certificate under ca.crt/,
    ],
    [
      'a certificate of another CA',
      () => certManagerSecret({ signer: other }),
      'TLSSecretInvalid',
      /cannot be trusted for the webhooks: the certificate \(issuer "CN=other"\) does not chain/,
    ],
    [
      'a certificate that does not name the Service',
      () => certManagerSecret({ dnsNames: ['elsewhere.example'] }),
      'TLSSecretInvalid',
      /does not name policy-server-cm.rollcall-system.svc/,
    ],
    [
      "no tls.crt for rollcall's image to serve",
      () => certManagerSecret({ drop: ['tls.crt'] }),
      'TLSSecretInvalid',
      /holds no tls.crt/,
    ],
  ];
  for (const [name, secret, reason, message] of problems)
    test(`${name} is a problem the operator can act on`, async () => {
      const problem = problemOf(readReferencedTls(await secret(), server, NAMESPACE, later(DAY)));
      assert.equal(problem?.reason, reason);
      assert.match(problem?.message ?? '', message);
      assert.match(
        problem?.message ?? '',
        /Secret rollcall-system\/cm-tls \(spec.caSecretRef of PolicyServer cm\)/,
      );
    });

  test('an expired certificate is a problem too', async () => {
    const problem = problemOf(
      readReferencedTls(await certManagerSecret(), server, NAMESPACE, later(91 * DAY)),
    );
    assert.match(problem?.message ?? '', /expired at/);
  });

  test('a server with an image of its own needs only the CA', async () => {
    const own = aPolicyServer({ spec: { caSecretRef: { name: 'cm-tls', key: 'ca.crt' } } });
    const reading = readReferencedTls(
      await certManagerSecret({ drop: ['tls.crt', 'tls.key'] }),
      own,
      NAMESPACE,
      NOW,
    );
    assert.deepEqual(reading, { kind: 'ok', caPem: ca.certPem });
  });
});

describe('the certificate in the status, and the expiry warning', () => {
  const facts = () => ({ ...inspectCertificate(ca.certPem), notAfter: later(90 * DAY) });

  test('an external certificate expiring within 30 days warns once per certificate', () => {
    const early = certificateStatus(facts(), 'cm-tls', 'external', later(DAY));
    assert.equal(early.expiresSoon, undefined);
    assert.equal(expiryWarning(undefined, early, later(DAY)), undefined);
    const soon = certificateStatus(facts(), 'cm-tls', 'external', later(61 * DAY));
    assert.equal(soon.expiresSoon, true);
    assert.match(
      expiryWarning(early, soon, later(61 * DAY)) ?? '',
      /expires at 2027-03-01T10:00:00.000Z \(in 29 days\) and rollcall cannot renew it/,
    );
    assert.equal(expiryWarning(soon, soon, later(62 * DAY)), undefined, 'said once');
  });

  test('a certificate rollcall renews never warns', () => {
    const mine = certificateStatus(facts(), 'x-tls', 'rollcall', later(89 * DAY));
    assert.equal(mine.expiresSoon, undefined);
    assert.equal(expiryWarning(undefined, mine, later(89 * DAY)), undefined);
  });

  test('an external certificate is looked at again when its warning is due, then at its expiry', () => {
    assert.deepEqual(externalRecheckAt(later(90 * DAY), NOW), later(60 * DAY));
    assert.deepEqual(externalRecheckAt(later(90 * DAY), later(70 * DAY)), later(90 * DAY));
  });

  test('a TLS problem makes the PolicyServer Stalled with its reason, whatever the Deployment says', () => {
    const status = computePolicyServerStatus(
      server,
      undefined,
      NOW,
      { namespace: NAMESPACE },
      {
        problem: { reason: 'TLSSecretInvalid', message: 'Secret x cannot be trusted' },
      },
    );
    assert.equal(status.summary, 'Stalled');
    const stalled = status.conditions?.find((c) => c.type === 'Stalled');
    assert.deepEqual(
      [stalled?.status, stalled?.reason, stalled?.message],
      ['True', 'TLSSecretInvalid', 'Secret x cannot be trusted'],
    );
    assert.equal(status.certificate, undefined);
  });
});
