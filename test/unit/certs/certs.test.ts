import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { connect, createServer } from 'node:tls';
import { before, describe, test } from 'node:test';
// The describe blocks test certs/'s modules one by one; each is imported from its own file.
import {
  createCa,
  issueServingCertificate,
  type CertificateAndKey,
  type CertificateAuthority,
} from '../../../lib/certs/issue.ts';
import { keyMatchesCertificate, verifyServingCertificate } from '../../../lib/certs/verify.ts';
import { isDueForRenewal, renewalTime } from '../../../lib/certs/renewal.ts';
import { inspectCertificate, splitPemCertificates } from '../../../lib/certs/inspect.ts';
import { DAY, HOUR, later, TLS_NOW as NOW } from '../../fixtures/tls-clock.ts';

const names = [
  'policy-server-a.rollcall-system.svc',
  'policy-server-a.rollcall-system.svc.cluster.local',
  'policy-server-a.rollcall-system',
  'policy-server-a',
];

let ca: CertificateAuthority;
let otherCa: CertificateAuthority;
let serving: CertificateAndKey;

before(async () => {
  [ca, otherCa] = await Promise.all([
    createCa({ commonName: 'rollcall-webhook-ca', validityMs: 5 * 365 * DAY, now: NOW }),
    createCa({ commonName: 'rollcall-webhook-ca', validityMs: 5 * 365 * DAY, now: NOW }),
  ]);
  serving = await issueServingCertificate({ ca, dnsNames: names, validityMs: 365 * DAY, now: NOW });
});

describe('createCa', () => {
  test('makes a self-signed CA certificate valid from now for the given time', () => {
    const facts = inspectCertificate(ca.certPem);
    assert.equal(facts.isCa, true);
    assert.equal(facts.subject, 'CN=rollcall-webhook-ca');
    assert.equal(facts.issuer, facts.subject);
    assert.deepEqual(facts.notBefore, NOW);
    assert.deepEqual(facts.notAfter, later(5 * 365 * DAY));
  });

  test('gives its key as PKCS#8 PEM, and the key belongs to the certificate', () => {
    assert.match(ca.keyPem, /^-----BEGIN PRIVATE KEY-----/);
    assert.equal(keyMatchesCertificate(ca.certPem, ca.keyPem), true);
    assert.equal(keyMatchesCertificate(ca.certPem, otherCa.keyPem), false);
  });

  test('two CAs of the same name are different CAs (fresh key and serial number)', () => {
    assert.notEqual(ca.certPem, otherCa.certPem);
    assert.notEqual(
      inspectCertificate(ca.certPem).serialNumber,
      inspectCertificate(otherCa.certPem).serialNumber,
    );
  });
});

describe('issueServingCertificate', () => {
  test('issues a certificate for exactly the given DNS names, signed by the CA', () => {
    const facts = inspectCertificate(serving.certPem);
    assert.deepEqual(facts.dnsNames, names);
    assert.equal(facts.isCa, false);
    assert.equal(facts.issuer, 'CN=rollcall-webhook-ca');
    assert.deepEqual(facts.notAfter, later(365 * DAY));
    assert.equal(keyMatchesCertificate(serving.certPem, serving.keyPem), true);
  });

  test('never outlives its CA', async () => {
    const shortCa = await createCa({ commonName: 'short', validityMs: HOUR, now: NOW });
    const cert = await issueServingCertificate({
      ca: shortCa,
      dnsNames: names,
      validityMs: DAY,
      now: NOW,
    });
    assert.deepEqual(inspectCertificate(cert.certPem).notAfter, later(HOUR));
  });

  test('refuses to issue without a name, or with a validity under a second', async () => {
    await assert.rejects(
      issueServingCertificate({ ca, dnsNames: [], validityMs: DAY, now: NOW }),
      /at least one DNS name/,
    );
    await assert.rejects(
      issueServingCertificate({ ca, dnsNames: names, validityMs: 10, now: NOW }),
      /at least 1 s/,
    );
  });

  test('says what is wrong with a CA key that is not one', async () => {
    await assert.rejects(
      issueServingCertificate({
        ca: { certPem: ca.certPem, keyPem: 'not a key' },
        dnsNames: names,
        validityMs: DAY,
        now: NOW,
      }),
      /the CA key is not a PKCS#8 PEM ECDSA P-256 key/,
    );
  });

  test('a TLS client that trusts only the CA accepts the certificate under each of its names', async () => {
    // Issued for the real clock: the TLS stack checks validity against it.
    const now = new Date();
    const [liveCa, strangerCa] = await Promise.all([
      createCa({ commonName: 'rollcall-webhook-ca', validityMs: DAY, now }),
      createCa({ commonName: 'rollcall-webhook-ca', validityMs: DAY, now }),
    ]);
    const live = await issueServingCertificate({
      ca: liveCa,
      dnsNames: names,
      validityMs: HOUR,
      now,
    });
    const server = createServer({ cert: live.certPem, key: live.keyPem }, (socket) =>
      socket.end('hello'),
    );
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const handshake = async (servername: string, trusted: string) => {
      const socket = connect({ host: '127.0.0.1', port, servername, ca: trusted });
      try {
        await once(socket, 'secureConnect');
        return 'ok';
      } catch (err) {
        return (err as NodeJS.ErrnoException).code ?? String(err);
      } finally {
        socket.destroy();
      }
    };
    try {
      for (const name of names) assert.equal(await handshake(name, liveCa.certPem), 'ok', name);
      assert.equal(
        await handshake('policy-server-b.rollcall-system.svc', liveCa.certPem),
        'ERR_TLS_CERT_ALTNAME_INVALID',
      );
      assert.equal(
        await handshake(names[0]!, strangerCa.certPem),
        'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
      );
    } finally {
      server.close();
    }
  });
});

describe('verifyServingCertificate', () => {
  const verify = (over: Partial<Parameters<typeof verifyServingCertificate>[0]> = {}) =>
    verifyServingCertificate({
      caPem: ca.certPem,
      certPem: serving.certPem,
      keyPem: serving.keyPem,
      dnsNames: names,
      now: later(HOUR),
      ...over,
    });

  test('accepts a certificate the CA signed, valid now, naming every name, with its key', () => {
    assert.deepEqual(verify(), { ok: true });
  });

  test('a certificate signed by another CA does not chain', () => {
    const result = verify({ caPem: otherCa.certPem });
    assert.equal(result.ok, false);
    assert.match(!result.ok ? result.reason : '', /does not chain to the CA/);
  });

  test('a bundle of the old and the new CA accepts certificates of either', () => {
    assert.deepEqual(verify({ caPem: otherCa.certPem + ca.certPem }), { ok: true });
    assert.equal(splitPemCertificates(otherCa.certPem + ca.certPem).length, 2);
  });

  test('an expired certificate fails, saying when it expired', () => {
    assert.deepEqual(verify({ now: later(365 * DAY) }), {
      ok: false,
      reason: 'the certificate expired at 2027-12-01T10:00:00.000Z',
    });
  });

  test('a certificate used before its start fails', () => {
    const result = verify({ now: later(-HOUR) });
    assert.match(!result.ok ? result.reason : '', /not valid before 2026-12-01T10:00:00/);
  });

  test('a certificate that does not name the Service fails, naming what is missing', () => {
    assert.deepEqual(
      verify({ dnsNames: [...names, 'policy-server-a.other.svc', 'policy-server-b'] }),
      {
        ok: false,
        reason: 'the certificate does not name policy-server-a.other.svc, policy-server-b',
      },
    );
  });

  test('a key that belongs to another certificate fails', () => {
    assert.deepEqual(verify({ keyPem: ca.keyPem }), {
      ok: false,
      reason: 'the private key does not belong to the certificate',
    });
  });

  test('garbage in either place is a reason, not an exception', () => {
    assert.deepEqual(verify({ certPem: 'garbage' }), {
      ok: false,
      reason: 'the certificate is not a readable PEM certificate',
    });
    assert.deepEqual(verify({ caPem: '' }), {
      ok: false,
      reason: 'the CA bundle holds no readable CA certificate',
    });
    assert.deepEqual(verify({ keyPem: 'garbage' }), {
      ok: false,
      reason: 'the private key is not a readable PEM key',
    });
  });

  test('a serving certificate is not accepted as a CA', () => {
    const result = verify({ caPem: serving.certPem });
    assert.equal(result.ok, false);
  });
});

describe('renewal', () => {
  const life = { notBefore: NOW, notAfter: later(30 * DAY) };
  test('is due once two thirds of the life have passed', () => {
    assert.deepEqual(renewalTime(life), later(20 * DAY));
    assert.equal(isDueForRenewal(life, later(20 * DAY - 1)), false);
    assert.equal(isDueForRenewal(life, later(20 * DAY)), true);
  });
});

describe('inspectCertificate', () => {
  test('reads the first certificate of a bundle and rejects text without one', () => {
    assert.equal(inspectCertificate(serving.certPem + ca.certPem).isCa, false);
    assert.throws(() => inspectCertificate('nothing here'), /no PEM certificate found/);
  });
});
