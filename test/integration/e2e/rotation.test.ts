// Certificate rotation under load on the local cluster: with short validities (flags), a
// serving certificate is renewed and then the webhook CA is rotated (new CA next to the old in
// the webhook's caBundle, serving certificates switched, old CA dropped) while dry-run creates
// run continuously through the apiserver against real policy-server processes. No request may
// fail for a TLS reason across both rotations; the counts are printed.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type V1Secret,
} from '@kubernetes/client-node';
import { createCa, inspectCertificate, splitPemCertificates } from '../../../lib/certs/index.ts';
import { metric } from '../../support/prom-text.ts';
import {
  POLICY_SERVER_ACCOUNT,
  prepareIdentities,
  type Identities,
} from '../../support/identities.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import {
  createRule,
  namespaceNamed,
  policyManifest,
  refusingPolicy,
} from '../../support/manifests.ts';
import {
  apply,
  dryRunCreate,
  isCurrent,
  readyReplicas,
  until,
  waitPolicy,
  type Obj,
} from '../../support/scenario.ts';
import {
  deleteRollcallObjects,
  ensureNamespace,
  startServing,
  type ServingRollcall,
} from '../../support/rollcall.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const admission = kc.makeApiClient(AdmissionregistrationV1Api);
const namespace = 'rollcall-e2e-rotation';
/** The namespace the load's ConfigMaps are (dry-run) created in; only this test's policy selects it. */
const loadNamespace = 'rollcall-e2e-rotation-load';
/** Where a deliberately unverifiable webhook shows what a TLS failure looks like. */
const probeNamespace = 'rollcall-e2e-rotation-probe';

const pem = (secret: V1Secret | undefined, key: string) =>
  Buffer.from(secret?.data?.[key] ?? '', 'base64').toString('utf8');
const secret = (name: string) =>
  core.readNamespacedSecret({ name, namespace }).catch(() => undefined);

/** What the apiserver says when it cannot verify (or reach over TLS) a webhook's server. */
const TLS_FAILURE = /x509|certificate|tls:|handshake|authority/i;

interface Counts {
  allowed: number;
  denied: number;
  tls: number;
  other: number;
}

describe('certificate rotation under load', () => {
  /** The worker (it serves the certificate metrics), and the watcher beside it. */
  let rollcall: ServingRollcall;
  let watcher: ServingRollcall;
  let ids: Identities | undefined;
  const ps = uniqueName('rot').slice(0, 30);
  const policy = `${ps}-names`;
  const keptPolicy = `${ps}-kept`;
  const servingName = `policy-server-${ps}-tls`;

  before(async () => {
    await ensureNamespace(kc, loadNamespace);
    await ensureNamespace(kc, namespace);
    ids = await prepareIdentities(namespace);
    watcher = await startServing('rotation-watcher', 'watcher', namespace, [
      '--kubeconfig',
      ids.watcher,
    ]);
    // CA rotation starts two thirds into the CA's 90 s; serving certificates renew every 16 s.
    rollcall = await startServing('rotation-worker', 'worker', namespace, [
      '--kubeconfig',
      ids.worker,
      '--ca-validity',
      '90s',
      '--serving-cert-validity',
      '24s',
      '--tls-propagation-delay',
      '3s',
    ]);
    await apply({
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'PolicyServer',
      metadata: { name: ps },
      spec: { replicas: 2, serviceAccountName: POLICY_SERVER_ACCOUNT },
    } as Obj);
  });

  after(async () => {
    await Promise.all([rollcall?.stop(), watcher?.stop()]);
    await deleteRollcallObjects(kc);
    ids?.remove();
  });

  test('a serving certificate and then the CA rotate while requests run: zero TLS failures', async () => {
    await readyReplicas(kc, namespace, ps, 2, 120_000);
    await apply(refusingPolicy(policy, ps, loadNamespace, { failurePolicy: 'Fail' }));
    // A second policy on the same requests, served at generation 1 and then broken (a CEL typo):
    // its webhook is kept with generation 1's rules, and must still follow the CA bundle, or
    // every request would fail its TLS handshake once the old CA is dropped.
    const kept = (generation: 1 | 2) =>
      policyManifest(keptPolicy, ps, {
        failurePolicy: 'Fail',
        namespaceSelector: namespaceNamed(loadNamespace),
        rules: [createRule('configmaps')],
        validations: [
          {
            expression: generation === 1 ? 'true' : "objekt.metadata.name != ''",
            message: 'never denies',
          },
        ],
      });
    await apply(kept(1));
    await until(
      'the kept policy to be served at generation 1',
      async () =>
        (
          await admission
            .readValidatingWebhookConfiguration({ name: `rollcall-${keptPolicy}` })
            .catch(() => undefined)
        )?.metadata?.annotations?.['rollcall.dev/served-generation'] === '1'
          ? true
          : undefined,
      { timeoutMs: 90_000, everyMs: 500 },
    );
    await apply(kept(2));
    await waitPolicy(kc, keptPolicy, (p) => isCurrent(p) && p.status?.summary === 'Stalled');

    const path = `/api/v1/namespaces/${loadNamespace}/configmaps`;
    const configMap = (name: string): Obj => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: loadNamespace },
    });
    // Enforced: the replica's own denial comes back through the apiserver.
    await until(
      'the policy to be enforced',
      async () => {
        const v = await dryRunCreate(kc, path, configMap('refused-0'));
        return /refused by rollcall/.test(v.message) ? v : undefined;
      },
      { timeoutMs: 90_000, everyMs: 500 },
    );

    // The counter can count: a webhook that does not trust the server's CA fails the way a
    // gap in the rotation would, and is classified as a TLS failure.
    const stranger = await createCa({
      commonName: 'stranger',
      validityMs: 3_600_000,
      now: new Date(),
    });
    await ensureNamespace(kc, probeNamespace);
    await admission.createValidatingWebhookConfiguration({
      body: {
        metadata: { name: `${ps}-tls-probe` },
        webhooks: [
          {
            name: 'tls-probe.rollcall.dev',
            admissionReviewVersions: ['v1'],
            sideEffects: 'None',
            failurePolicy: 'Fail',
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': probeNamespace } },
            rules: [
              {
                operations: ['CREATE'],
                apiGroups: [''],
                apiVersions: ['v1'],
                resources: ['configmaps'],
              },
            ],
            clientConfig: {
              service: {
                namespace,
                name: `policy-server-${ps}`,
                path: `/validate/${policy}/1`,
                port: 443,
              },
              caBundle: Buffer.from(stranger.certPem).toString('base64'),
            },
          },
        ],
      },
    });
    try {
      const probe = await until(
        'the probe webhook to fail the TLS handshake',
        async () => {
          const v = await dryRunCreate(kc, `/api/v1/namespaces/${probeNamespace}/configmaps`, {
            apiVersion: 'v1',
            kind: 'ConfigMap',
            metadata: { name: 'probe', namespace: probeNamespace },
          } as Obj);
          return v.allowed ? undefined : v;
        },
        { timeoutMs: 30_000, everyMs: 250 },
      );
      assert.match(probe.message, TLS_FAILURE, probe.message);
    } finally {
      await admission.deleteValidatingWebhookConfiguration({ name: `${ps}-tls-probe` });
    }

    const counts: Counts = { allowed: 0, denied: 0, tls: 0, other: 0 };
    const failures: string[] = [];
    let stop = false;

    // Continuous load: three loops, each alternating a conforming and a violating object.
    const loop = async (id: number) => {
      for (let i = 0; !stop; i++) {
        const refused = i % 2 === 1;
        const v = await dryRunCreate(
          kc,
          path,
          configMap(`${refused ? 'refused' : 'fine'}-${id}-${i}`),
        ).catch((err: Error) => ({
          allowed: false,
          code: 0,
          message: `request error: ${err.message}`,
        }));
        if (v.allowed && !refused) counts.allowed++;
        else if (!v.allowed && refused && /refused by rollcall/.test(v.message)) counts.denied++;
        else {
          if (TLS_FAILURE.test(v.message)) counts.tls++;
          else counts.other++;
          if (failures.length < 10) failures.push(`${v.code} ${v.message}`);
        }
      }
    };
    const loops = [0, 1, 2].map(loop);

    // Watch the Secrets and the webhook: first a serving renewal by the CA of the moment, then
    // a CA rotation (both CAs in the webhook's bundle, then the new one alone).
    const servingSerials = new Set<string>();
    let phase: 'renewal' | 'publish' | 'drop' | 'done' = 'renewal';
    let caAtRenewal: string | undefined;
    let newCaSerial: string | undefined;
    const started = Date.now();
    try {
      await until(
        'a serving renewal, then a complete CA rotation',
        async () => {
          const [ca, serving, hook] = await Promise.all([
            secret('rollcall-webhook-ca'),
            secret(servingName),
            admission
              .readValidatingWebhookConfiguration({ name: `rollcall-${policy}` })
              .catch(() => undefined),
          ]);
          const serial = (certPem: string | undefined) =>
            certPem === undefined ? undefined : inspectCertificate(certPem).serialNumber;
          const bundle = splitPemCertificates(pem(ca, 'ca.crt')).map(serial);
          const hookBundle = splitPemCertificates(
            Buffer.from(hook?.webhooks?.[0]?.clientConfig.caBundle ?? '', 'base64').toString(),
          ).map(serial);
          const servingPem = pem(serving, 'tls.crt');
          const fresh = servingPem !== '' && !servingSerials.has(serial(servingPem)!);
          if (fresh) servingSerials.add(serial(servingPem)!);
          if (phase === 'renewal' && fresh && servingSerials.size > 1 && bundle.length === 1) {
            if (serial(pem(serving, 'ca.crt')) === bundle[0]) {
              caAtRenewal = bundle[0];
              phase = 'publish';
            }
          }
          if (phase === 'publish' && bundle.length === 2 && hookBundle.length === 2) phase = 'drop';
          if (
            phase === 'drop' &&
            bundle.length === 1 &&
            bundle[0] !== caAtRenewal &&
            hookBundle.length === 1 &&
            hookBundle[0] === bundle[0]
          ) {
            newCaSerial = bundle[0];
            phase = 'done';
          }
          return phase === 'done' ? true : undefined;
        },
        { timeoutMs: 180_000, everyMs: 250 },
      );
      // A few more seconds of load on the new CA alone.
      await new Promise((r) => setTimeout(r, 5000));
    } finally {
      stop = true;
      await Promise.all(loops);
    }
    const total = counts.allowed + counts.denied + counts.tls + counts.other;
    console.log(
      `rotation under load (${Math.round((Date.now() - started) / 1000)} s): ${total} requests, ` +
        `${counts.allowed} allowed, ${counts.denied} denied by the policy, ` +
        `${counts.tls} failed for TLS reasons, ${counts.other} failed otherwise; ` +
        `${servingSerials.size} serving certificates seen, CA ${caAtRenewal} -> ${newCaSerial}`,
    );
    if (failures.length > 0) console.log(`first failures:\n  ${failures.join('\n  ')}`);
    assert.equal(counts.tls, 0, `requests failed for TLS reasons: ${failures.join('; ')}`);
    assert.equal(counts.other, 0, `requests failed: ${failures.join('; ')}`);
    assert.ok(counts.allowed > 50 && counts.denied > 50, 'the load ran throughout');

    // The kept webhook followed the bundle and still serves generation 1.
    const keptHook = await admission.readValidatingWebhookConfiguration({
      name: `rollcall-${keptPolicy}`,
    });
    assert.equal(keptHook.metadata?.annotations?.['rollcall.dev/served-generation'], '1');
    assert.equal(keptHook.webhooks?.[0]?.clientConfig.service?.path, `/validate/${keptPolicy}/1`);
    assert.deepEqual(
      splitPemCertificates(
        Buffer.from(keptHook.webhooks?.[0]?.clientConfig.caBundle ?? '', 'base64').toString(),
      ).map((c) => inspectCertificate(c).serialNumber),
      [newCaSerial],
    );

    // The serving certificate now comes from the new CA; the status and the metric say when
    // it expires (read together until they agree: it renews every 16 s).
    const serving = await secret(servingName);
    assert.equal(inspectCertificate(pem(serving, 'ca.crt')).serialNumber, newCaSerial);
    const port = Number(new URL(rollcall.url('/')).port);
    await until(
      "the status and the expiry metric to show the serving certificate's expiry",
      async () => {
        const current = inspectCertificate(pem(await secret(servingName), 'tls.crt'));
        const server = (await kc.makeApiClient(CustomObjectsApi).getClusterCustomObject({
          group: 'rollcall.dev',
          version: 'v1alpha1',
          plural: 'policyservers',
          name: ps,
        })) as { status?: { certificate?: { notAfter?: string; renewedBy?: string } } };
        const gauge = await metric(
          port,
          'rollcall_policy_server_certificate_expiry_timestamp_seconds',
          { policy_server: ps, renewed_by: 'rollcall' },
        );
        const notAfter = current.notAfter.toISOString();
        return server.status?.certificate?.notAfter === notAfter &&
          gauge === current.notAfter.getTime() / 1000
          ? true
          : undefined;
      },
      { timeoutMs: 30_000, everyMs: 500 },
    );
  });
});
