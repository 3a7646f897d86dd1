import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import type { V1Secret } from '@kubernetes/client-node';
import {
  createCa,
  inspectCertificate,
  issueServingCertificate,
  renewalTime,
  splitPemCertificates,
  verifyServingCertificate,
  type CertificateAuthority,
} from '../../../lib/certs/index.ts';
import type { KubeWriter } from '../../../control-plane/functions/kube-writer.ts';
import {
  ensureServingSecret,
  ensureWebhookCa,
} from '../../../control-plane/functions/managed-tls.ts';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../../api/constants.ts';
import {
  caSecret,
  planCaRotation,
  serversUsingSecret,
  MAX_RENEWAL_DELAY_MS,
  readCa,
  readServing,
  renewalDelayMs,
  servingDnsNames,
  servingSecret,
  usesManagedTls,
} from '../../../control-plane/functions/managed-tls-core.ts';
import type { FunctionContext } from '../../../control-plane/functions/types.ts';
import { aPolicyServer, NAMESPACE } from '../../fixtures/builders.ts';
import { functionContext } from '../../fixtures/function-context.ts';
import { DAY, later, TLS_NOW as NOW } from '../../fixtures/tls-clock.ts';

const server = aPolicyServer({ name: 'a', uid: 'uid-a', spec: { image: undefined } });
const names = servingDnsNames('a', NAMESPACE);

let ca: CertificateAuthority;
let otherCa: CertificateAuthority;
const trustedOf = (c: CertificateAuthority) => ({
  certPem: c.certPem,
  facts: inspectCertificate(c.certPem),
});
const caFacts = () => ({ ca: trustedOf(ca), trusted: [trustedOf(ca)] });

before(async () => {
  [ca, otherCa] = await Promise.all([
    createCa({ commonName: 'test-ca', validityMs: 5 * 365 * DAY, now: NOW }),
    createCa({ commonName: 'test-ca', validityMs: 5 * 365 * DAY, now: NOW }),
  ]);
});

describe('usesManagedTls', () => {
  const rows: [string, Parameters<typeof aPolicyServer>[0], boolean][] = [
    [
      "rollcall's image and no CA: rollcall issues the certificate",
      { spec: { image: undefined } },
      true,
    ],
    ['an image of its own: its own certificate', { spec: { image: 'x/y:1' } }, false],
    [
      'a caBundle: the operator brings the certificate',
      { spec: { image: undefined, caBundle: 'Q0E=' } },
      false,
    ],
    [
      'a caSecretRef: someone else maintains it',
      { spec: { image: undefined, caSecretRef: { name: 's', key: 'ca.crt' } } },
      false,
    ],
  ];
  for (const [name, overrides, want] of rows)
    test(name, () => assert.equal(usesManagedTls(aPolicyServer(overrides)), want));
});

test("the serving names are the Service's under every form a client may use", () => {
  assert.deepEqual(names, [
    'policy-server-a.rollcall-system.svc',
    'policy-server-a.rollcall-system.svc.cluster.local',
    'policy-server-a.rollcall-system',
    'policy-server-a',
  ]);
});

describe('readCa', () => {
  test('no Secret is absent; a Secret holding a CA and its key is usable', () => {
    assert.deepEqual(readCa(undefined, NOW), { kind: 'absent' });
    const reading = readCa(caSecret(ca, NAMESPACE), NOW);
    assert.equal(reading.kind, 'usable');
  });

  const unusable: [string, () => V1Secret, Date, RegExp][] = [
    [
      'a Secret without ca.key',
      () => ({ data: { 'ca.crt': 'eA==' } }),
      NOW,
      /lacks ca.crt or ca.key/,
    ],
    [
      'a key of another CA',
      () => caSecret({ ...ca, keyPem: otherCa.keyPem }, NAMESPACE),
      NOW,
      /does not belong/,
    ],
    [
      'garbage in ca.crt',
      () => caSecret({ ...ca, certPem: 'garbage' }, NAMESPACE),
      NOW,
      /unreadable/,
    ],
    ['an expired CA', () => caSecret(ca, NAMESPACE), later(5 * 365 * DAY), /expired at 2031/],
  ];
  for (const [name, secret, now, reason] of unusable)
    test(`${name} is unusable, with the reason`, () => {
      const reading = readCa(secret(), now);
      assert.equal(reading.kind, 'unusable');
      assert.match(reading.kind === 'unusable' ? reading.reason : '', reason);
    });

  test('a serving certificate is not a CA', async () => {
    const leaf = await issueServingCertificate({ ca, dnsNames: names, validityMs: DAY, now: NOW });
    const reading = readCa(caSecret(leaf, NAMESPACE), NOW);
    assert.deepEqual(reading, { kind: 'unusable', reason: 'ca.crt is not a CA certificate' });
  });
});

describe('readServing', () => {
  const issue = (
    over: { ca?: CertificateAuthority; dnsNames?: string[]; validityMs?: number } = {},
  ) =>
    issueServingCertificate({
      ca: over.ca ?? ca,
      dnsNames: over.dnsNames ?? names,
      validityMs: over.validityMs ?? 30 * DAY,
      now: NOW,
    });
  const read = (secret: V1Secret | undefined, now = later(DAY)) =>
    readServing(secret, server, caFacts(), NAMESPACE, now);
  const reason = (r: ReturnType<typeof read>) => (r.kind === 'reissue' ? r.reason : `usable`);

  test('a fresh certificate is usable until two thirds of its life', async () => {
    const reading = read(servingSecret(server, NAMESPACE, await issue(), ca.certPem));
    assert.equal(reading.kind, 'usable');
    assert.deepEqual(reading.kind === 'usable' ? reading.renewAt : undefined, later(20 * DAY));
  });

  test('a missing Secret is issued', () => {
    assert.equal(reason(read(undefined)), 'the Secret does not exist');
  });

  test('a Secret of an older PolicyServer of the same name is issued again', async () => {
    const older = aPolicyServer({ name: 'a', uid: 'uid-old', spec: { image: undefined } });
    const secret = servingSecret(older, NAMESPACE, await issue(), ca.certPem);
    assert.equal(reason(read(secret)), 'the Secret is not owned by this PolicyServer');
  });

  test('a certificate of another CA is issued again', async () => {
    const secret = servingSecret(server, NAMESPACE, await issue({ ca: otherCa }), ca.certPem);
    assert.match(reason(read(secret)), /does not chain to the CA/);
  });

  test('a certificate that does not name the Service is issued again', async () => {
    const secret = servingSecret(
      server,
      NAMESPACE,
      await issue({ dnsNames: names.slice(0, 2) }),
      ca.certPem,
    );
    assert.equal(
      reason(read(secret)),
      'the certificate does not name policy-server-a.rollcall-system, policy-server-a',
    );
  });

  test('a Secret whose ca.crt is not the CA that signed it is issued again', async () => {
    const secret = servingSecret(server, NAMESPACE, await issue(), otherCa.certPem);
    assert.equal(reason(read(secret)), 'its ca.crt is not the CA that signs');
  });

  test('a certificate two thirds through its life is issued again; an expired one too', async () => {
    const secret = servingSecret(server, NAMESPACE, await issue(), ca.certPem);
    assert.match(reason(read(secret, later(20 * DAY))), /two thirds of its life have passed/);
    assert.match(reason(read(secret, later(30 * DAY))), /expired at/);
  });

  test('a certificate that lasts as long as its CA is not re-issued for age (that cannot extend it)', async () => {
    const shortCa = await createCa({ commonName: 'short', validityMs: 3 * DAY, now: NOW });
    const leaf = await issueServingCertificate({
      ca: shortCa,
      dnsNames: names,
      validityMs: 30 * DAY,
      now: NOW,
    });
    const reading = readServing(
      servingSecret(server, NAMESPACE, leaf, shortCa.certPem),
      server,
      { ca: trustedOf(shortCa), trusted: [trustedOf(shortCa)] },
      NAMESPACE,
      later(2.5 * DAY),
    );
    assert.equal(reading.kind, 'usable');
    assert.deepEqual(reading.kind === 'usable' ? reading.renewAt : undefined, later(3 * DAY));
  });
});

test('the renewal re-run waits at least a second and at most a week', () => {
  assert.equal(renewalDelayMs(later(5000), NOW), 5000);
  assert.equal(renewalDelayMs(later(-5000), NOW), 1000);
  assert.equal(renewalDelayMs(later(300 * DAY), NOW), MAX_RENEWAL_DELAY_MS);
});

/** An API server of Secrets in memory, with resourceVersions and the 404/409 it would give. */
class FakeSecrets {
  secrets = new Map<string, V1Secret>();
  writes: string[] = [];
  private version = 0;
  /** Runs once before the next create: someone else's write that wins the race. */
  beforeCreate?: () => void;

  put(secret: V1Secret): V1Secret {
    const stored = structuredClone(secret);
    stored.metadata = { ...stored.metadata, resourceVersion: String(++this.version) };
    this.secrets.set(stored.metadata.name ?? '', stored);
    return structuredClone(stored);
  }

  writer(): KubeWriter {
    const conflict = () => Object.assign(new Error('conflict'), { code: 409 });
    return {
      getSecret: async (_ns: string, name: string) => {
        const s = this.secrets.get(name);
        return s === undefined ? undefined : structuredClone(s);
      },
      createSecret: async (_ns: string, secret: V1Secret) => {
        const race = this.beforeCreate;
        this.beforeCreate = undefined;
        race?.();
        if (this.secrets.has(secret.metadata?.name ?? '')) throw conflict();
        this.writes.push(`create ${secret.metadata?.name}`);
        return this.put(secret);
      },
      replaceSecret: async (_ns: string, secret: V1Secret) => {
        const current = this.secrets.get(secret.metadata?.name ?? '');
        if (current?.metadata?.resourceVersion !== secret.metadata?.resourceVersion)
          throw conflict();
        this.writes.push(`replace ${secret.metadata?.name}`);
        return this.put(secret);
      },
    } as unknown as KubeWriter;
  }
}

function context(api: FakeSecrets, now: Date, servingCertValidityMs = 30 * DAY): FunctionContext {
  return functionContext({
    kube: api.writer(),
    config: { caValidityMs: 365 * DAY, servingCertValidityMs },
    now,
  });
}

describe('ensureWebhookCa and ensureServingSecret against the API', () => {
  test('create the CA and a serving certificate that verifies against it, once', async () => {
    const api = new FakeSecrets();
    const ctx = context(api, NOW);
    const first = (await ensureWebhookCa(ctx)).ca;
    const { renewAt } = await ensureServingSecret(ctx, server, first);
    assert.deepEqual(renewAt, later(20 * DAY));
    const secret = api.secrets.get('policy-server-a-tls');
    assert.equal(secret?.type, 'kubernetes.io/tls');
    assert.deepEqual(
      secret?.metadata?.ownerReferences?.map((r) => r.uid),
      ['uid-a'],
    );
    const pem = (key: string) => Buffer.from(secret?.data?.[key] ?? '', 'base64').toString();
    assert.deepEqual(
      verifyServingCertificate({
        caPem: pem('ca.crt'),
        certPem: pem('tls.crt'),
        keyPem: pem('tls.key'),
        dnsNames: names,
        now: NOW,
      }),
      { ok: true },
    );
    // Running again changes nothing.
    const again = (await ensureWebhookCa(ctx)).ca;
    await ensureServingSecret(ctx, server, again);
    assert.equal(again.ca.certPem, first.ca.certPem);
    assert.deepEqual(api.writes, ['create rollcall-webhook-ca', 'create policy-server-a-tls']);
  });

  test('a CA created by another job meanwhile (409) is the one used', async () => {
    const api = new FakeSecrets();
    api.beforeCreate = () => api.put(caSecret(otherCa, NAMESPACE));
    const used = (await ensureWebhookCa(context(api, NOW))).ca;
    assert.equal(used.ca.certPem, otherCa.certPem);
  });

  test('an expired CA is replaced, and the serving certificate follows it', async () => {
    const api = new FakeSecrets();
    await ensureServingSecret(
      context(api, NOW),
      server,
      (await ensureWebhookCa(context(api, NOW))).ca,
    );
    const afterExpiry = context(api, later(366 * DAY));
    const fresh = (await ensureWebhookCa(afterExpiry)).ca;
    await ensureServingSecret(afterExpiry, server, fresh);
    assert.deepEqual(api.writes.slice(2), [
      'replace rollcall-webhook-ca',
      'replace policy-server-a-tls',
    ]);
    const tls = api.secrets.get('policy-server-a-tls');
    assert.equal(
      Buffer.from(tls?.data?.['ca.crt'] ?? '', 'base64').toString(),
      `${fresh.ca.certPem.trim()}\n`,
    );
  });

  test('a deleted serving Secret is issued again', async () => {
    const api = new FakeSecrets();
    const ctx = context(api, NOW);
    const current = (await ensureWebhookCa(ctx)).ca;
    await ensureServingSecret(ctx, server, current);
    api.secrets.delete('policy-server-a-tls');
    await ensureServingSecret(ctx, server, current);
    assert.deepEqual(api.writes.slice(-1), ['create policy-server-a-tls']);
  });

  test('a Secret of that name but another type is not overwritten: the error says what to do', async () => {
    const api = new FakeSecrets();
    const ctx = context(api, NOW);
    api.put({ metadata: { name: 'policy-server-a-tls' }, type: 'Opaque', data: {} });
    await assert.rejects(
      ensureServingSecret(ctx, server, (await ensureWebhookCa(ctx)).ca),
      (err: Error) =>
        err.name === 'TerminalError' &&
        /has type Opaque, not kubernetes.io\/tls; delete it/.test(err.message),
    );
  });
});

describe('CA rotation without a gap', () => {
  const delay = 60_000;
  const pemOf = (secret: V1Secret | undefined, key: string) =>
    Buffer.from(secret?.data?.[key] ?? '', 'base64').toString();
  const bundleCount = (api: FakeSecrets) =>
    splitPemCertificates(pemOf(api.secrets.get('rollcall-webhook-ca'), 'ca.crt')).length;
  const signedBy = (api: FakeSecrets, caPem: string, at: Date) =>
    verifyServingCertificate({
      caPem,
      certPem: pemOf(api.secrets.get('policy-server-a-tls'), 'tls.crt'),
      dnsNames: names,
      now: at,
    }).ok;

  /** A job at `at` whose projections hold server `a` and one webhook trusting `caBundle`. */
  function rotationContext(api: FakeSecrets, at: Date, caBundle: () => string): FunctionContext {
    const webhook = () => ({
      metadata: { name: 'rollcall-p', labels: { [MANAGED_BY_LABEL]: MANAGED_BY } },
      webhooks: [
        {
          clientConfig: {
            service: { name: 'policy-server-a', namespace: NAMESPACE },
            caBundle: caBundle(),
          },
        },
      ],
    });
    return functionContext({
      kube: api.writer(),
      store: { all: async () => [server], webhooks: async () => [webhook()] },
      config: {
        caValidityMs: 365 * DAY,
        servingCertValidityMs: 30 * DAY,
        tlsPropagationDelayMs: delay,
      },
      now: at,
    });
  }

  async function run(ctx: FunctionContext) {
    const { ca: current, nextAt } = await ensureWebhookCa(ctx);
    const serving = await ensureServingSecret(ctx, server, current);
    return { current, nextAt, renewAt: serving.renewAt };
  }

  test('publish the new CA next to the old one, switch once the webhooks trust it, then drop the old one', async () => {
    const api = new FakeSecrets();
    let hookBundle = '';
    const at = (ms: number) => rotationContext(api, later(ms), () => hookBundle);
    // Day 0: the CA; day 240 (before two thirds of its year): a fresh serving certificate.
    const first = await run(at(0));
    const oldCa = first.current.ca.certPem;
    hookBundle = Buffer.from(oldCa).toString('base64');
    const steady = await run(at(240 * DAY));
    assert.equal(bundleCount(api), 1);
    assert.deepEqual(
      steady.nextAt,
      renewalTime(inspectCertificate(oldCa)),
      'the CA is next due at two thirds',
    );

    // Day 245: the CA is due. The new CA signs from now on and both are trusted.
    const published = await run(at(245 * DAY));
    assert.equal(bundleCount(api), 2);
    const newCa = published.current.ca.certPem;
    assert.notEqual(newCa, oldCa);
    assert.equal(
      signedBy(api, oldCa, later(245 * DAY)),
      true,
      'the webhooks trust only the old CA: no switch',
    );

    // The webhooks now trust both; the switch still waits the propagation delay.
    hookBundle = api.secrets.get('rollcall-webhook-ca')?.data?.['ca.crt'] ?? '';
    await run(at(245 * DAY + delay / 2));
    assert.equal(signedBy(api, oldCa, later(245 * DAY)), true);
    await run(at(245 * DAY + delay));
    assert.equal(signedBy(api, newCa, later(245 * DAY + delay)), true, 'switched to the new CA');
    assert.equal(bundleCount(api), 2, 'the old CA stays until the pods had time to reload');
    // The serving Secret's change brings the server's key back: it says when to drop.
    const again = await run(at(245 * DAY + delay));
    assert.deepEqual(again.nextAt, later(245 * DAY + 2 * delay));

    // A restarted worker (a fresh context) finishes it: the state is in the Secrets.
    await run(at(245 * DAY + 2 * delay));
    assert.equal(bundleCount(api), 1);
    assert.equal(pemOf(api.secrets.get('rollcall-webhook-ca'), 'ca.crt').trim(), newCa.trim());
  });

  test('planCaRotation waits for every managed server before dropping the old CA', async () => {
    const newer = await createCa({ commonName: 'new', validityMs: 365 * DAY, now: later(DAY) });
    const reading = readCa(caSecret(newer, NAMESPACE, undefined, [ca.certPem]), later(DAY));
    assert.equal(reading.kind, 'usable');
    if (reading.kind !== 'usable') return;
    const behind = planCaRotation(
      reading,
      [
        { server: 'a', signedByCurrent: true, issuedAt: later(DAY) },
        { server: 'b', signedByCurrent: false },
      ],
      later(2 * DAY),
      delay,
    );
    assert.deepEqual(behind, {
      kind: 'wait',
      why: 'waiting for the certificates of b to be signed by the new CA',
    });
    const all = planCaRotation(
      reading,
      [{ server: 'a', signedByCurrent: true, issuedAt: later(DAY) }],
      later(2 * DAY),
      delay,
    );
    assert.equal(all.kind, 'drop');
  });
});

describe('serversUsingSecret', () => {
  const servers = [
    aPolicyServer({ name: 'managed', spec: { image: undefined } }),
    aPolicyServer({
      name: 'cm',
      spec: { image: undefined, caSecretRef: { name: 'cm-tls', key: 'ca.crt' } },
    }),
    aPolicyServer({ name: 'own', spec: { image: 'x/y:1' } }),
  ];
  test('the webhook CA concerns every managed server; a caSecretRef Secret the servers naming it', () => {
    assert.deepEqual(serversUsingSecret('rollcall-webhook-ca', servers), ['managed']);
    assert.deepEqual(serversUsingSecret('policy-server-managed-tls', servers), ['managed']);
    assert.deepEqual(serversUsingSecret('cm-tls', servers), ['cm']);
    assert.deepEqual(serversUsingSecret('unrelated', servers), []);
  });
});
