// rollcall-managed TLS end to end on the local cluster: a PolicyServer of rollcall's image that
// brings no CA gets the webhook CA Secret and its own serving certificate Secret from the
// worker, its Deployment mounts the certificate, and a lost Secret is issued again.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  EventsV1Api,
  type KubernetesObject,
  type V1Deployment,
  type V1Secret,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import {
  createCa,
  inspectCertificate,
  issueServingCertificate,
  verifyServingCertificate,
  type CertificateAuthority,
} from '../../../lib/certs/index.ts';
import { testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import { Processes } from '../../support/driver.ts';
import {
  POLICY_SERVER_ACCOUNT,
  prepareIdentities,
  runAsAccounts,
  type Identities,
} from '../../support/identities.ts';
import {
  createRule,
  policyManifest,
  policyServerManifest,
  refusingPolicy,
} from '../../support/manifests.ts';
import { apply, readyReplicas, until, untilVerdict } from '../../support/scenario.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const namespace = 'rollcall-e2e-certs';
const secrets = `/api/v1/namespaces/${namespace}/secrets`;

const pem = (secret: V1Secret, key: string) =>
  Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');
/** The serial number of the certificate a replica (127.0.0.1:port) presents, verified as the apiserver would. */
async function servedSerial(port: number, caPem: string, servername: string): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port, servername, ca: caPem });
  try {
    await once(socket, 'secureConnect');
    return socket.getPeerX509Certificate()?.serialNumber.toLowerCase() ?? '';
  } finally {
    socket.destroy();
  }
}
const secretNamed = (name: string, done: (s: V1Secret) => boolean = () => true) =>
  watchUntil<V1Secret & KubernetesObject>(kc, secrets, done, {
    fieldSelector: `metadata.name=${name}`,
    timeoutMs: 30_000,
  });

describe('rollcall-managed TLS', () => {
  const procs = new Processes(namespace);
  const ps = uniqueName('tls').slice(0, 40);
  const service = `policy-server-${ps}`;
  const servingName = `${service}-tls`;
  let ids: Identities | undefined;

  before(async () => {
    await procs.prepare();
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    // rollcall's image (no spec.image) and no caBundle/caSecretRef: rollcall issues the certificate.
    await apply(
      policyServerManifest(ps, { replicas: 1, serviceAccountName: POLICY_SERVER_ACCOUNT }),
    );
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
  });

  test('the server gets a serving certificate that chains to the webhook CA and names its Service', async () => {
    const ca = await secretNamed('rollcall-webhook-ca');
    assert.equal(ca.type, 'Opaque');
    assert.equal(inspectCertificate(pem(ca, 'ca.crt')).isCa, true);
    assert.match(pem(ca, 'ca.key'), /^-----BEGIN PRIVATE KEY-----/);

    const serving = await secretNamed(servingName);
    assert.equal(serving.type, 'kubernetes.io/tls');
    const owner = serving.metadata?.ownerReferences?.[0];
    assert.deepEqual([owner?.kind, owner?.name, owner?.controller], ['PolicyServer', ps, true]);
    assert.equal(pem(serving, 'ca.crt'), pem(ca, 'ca.crt'), 'the Secret carries the CA too');
    assert.deepEqual(
      verifyServingCertificate({
        caPem: pem(ca, 'ca.crt'),
        certPem: pem(serving, 'tls.crt'),
        keyPem: pem(serving, 'tls.key'),
        dnsNames: [`${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`],
        now: new Date(),
      }),
      { ok: true },
    );
    const facts = inspectCertificate(pem(serving, 'tls.crt'));
    const lifeDays = (facts.notAfter.getTime() - facts.notBefore.getTime()) / 86_400_000;
    assert.equal(lifeDays, 365, 'serving certificates last a year by default');
  });

  test("the server's Deployment runs rollcall's policy server with the certificate mounted read-only", async () => {
    const deployment = await watchUntil<V1Deployment & KubernetesObject>(
      kc,
      `/apis/apps/v1/namespaces/${namespace}/deployments`,
      () => true,
      { fieldSelector: `metadata.name=${service}`, timeoutMs: 30_000 },
    );
    const pod = deployment.spec?.template.spec;
    const container = pod?.containers[0];
    assert.equal(container?.image, 'rollcall:0.1.0');
    assert.deepEqual(container?.args, [
      'policy-server',
      '--port=8443',
      '--tls-dir=/var/run/rollcall/tls',
    ]);
    // Readable by the pod's fsGroup (the image's user) only: mode 0440 (issue 36).
    assert.deepEqual(pod?.volumes, [
      { name: 'tls', secret: { secretName: servingName, defaultMode: 0o440 } },
      { name: 'tmp', emptyDir: { sizeLimit: '16Mi' } },
    ]);
    assert.deepEqual(container?.volumeMounts, [
      { name: 'tls', mountPath: '/var/run/rollcall/tls', readOnly: true },
      { name: 'tmp', mountPath: '/tmp' },
    ]);
    assert.equal(container?.livenessProbe?.httpGet?.path, '/healthz');
  });

  test("the server's replica serves that certificate over HTTPS and the PolicyServer becomes Ready", async () => {
    // The local cluster's node agent runs `rollcall policy-server` for the pod, with the Secret
    // materialized as its --tls-dir; Ready needs /readyz to answer over that TLS.
    const [replica] = await readyReplicas(kc, namespace, ps, 1, 90_000);
    const port = replica!.process!.port;
    const ca = await core.readNamespacedSecret({ name: 'rollcall-webhook-ca', namespace });
    const serving = await core.readNamespacedSecret({ name: servingName, namespace });
    assert.equal(
      await servedSerial(port, pem(ca, 'ca.crt'), `${service}.${namespace}.svc`),
      inspectCertificate(pem(serving, 'tls.crt')).serialNumber.toLowerCase(),
    );
    await watchUntil<
      KubernetesObject & { status?: { conditions?: { type: string; status: string }[] } }
    >(
      kc,
      '/apis/rollcall.dev/v1alpha1/policyservers',
      (s) => s.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
      { fieldSelector: `metadata.name=${ps}`, timeoutMs: 30_000 },
    );
  });

  test("a Policy of the server gets a webhook trusting the managed CA, and the apiserver's calls verify", async () => {
    const policy = `${ps}-names`;
    await apply(
      policyManifest(policy, ps, {
        validations: [
          { expression: "object.metadata.name != 'refused'", message: 'refused by rollcall' },
        ],
        rules: [createRule('configmaps')],
      }),
    );
    const hook = await watchUntil<V1ValidatingWebhookConfiguration & KubernetesObject>(
      kc,
      '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
      () => true,
      { fieldSelector: `metadata.name=rollcall-${policy}`, timeoutMs: 60_000 },
    );
    const ca = await core.readNamespacedSecret({ name: 'rollcall-webhook-ca', namespace });
    assert.equal(hook.webhooks?.[0]?.clientConfig.caBundle, ca.data?.['ca.crt']);
    // A denial with the policy's message can only come from the replica, over TLS the apiserver
    // verified against that bundle (a failed handshake would say so instead).
    const configMap = (name: string) => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: 'default' },
    });
    const denied = await untilVerdict(
      kc,
      '/api/v1/namespaces/default/configmaps',
      configMap('refused'),
      (v) => !v.allowed,
    );
    assert.match(denied.message, /refused by rollcall/);
    const allowed = await untilVerdict(
      kc,
      '/api/v1/namespaces/default/configmaps',
      configMap('fine'),
      () => true,
    );
    assert.equal(allowed.allowed, true, allowed.message);
  });

  test('a deleted serving Secret is issued again (a new certificate) as soon as the watcher sees it go', async () => {
    const before = await secretNamed(servingName);
    const serial = inspectCertificate(pem(before, 'tls.crt')).serialNumber;
    await core.deleteNamespacedSecret({ name: servingName, namespace });
    // The watcher watches Secrets (metadata only): the deletion alone runs the server's key.
    const again = await secretNamed(
      servingName,
      (s) => inspectCertificate(pem(s, 'tls.crt')).serialNumber !== serial,
    );
    const reissued = inspectCertificate(pem(again, 'tls.crt'));
    assert.notEqual(reissued.serialNumber, serial);
    const ca = await core.readNamespacedSecret({ name: 'rollcall-webhook-ca', namespace });
    assert.deepEqual(
      verifyServingCertificate({
        caPem: pem(ca, 'ca.crt'),
        certPem: pem(again, 'tls.crt'),
        dnsNames: [`${service}.${namespace}.svc`],
        now: new Date(),
      }),
      { ok: true },
      'the same CA signed it',
    );
    // The Deployment did not change: the mount names the Secret, not its content.
    const deployment = await apps.readNamespacedDeployment({ name: service, namespace });
    assert.equal(deployment.metadata?.generation, 1);

    // The running replica picks the new certificate up from its mounted Secret, no restart.
    const [replica] = await readyReplicas(kc, namespace, ps, 1, 30_000);
    const { port, pid } = replica!.process!;
    const wanted = reissued.serialNumber.toLowerCase();
    await until(
      'the replica to serve the re-issued certificate',
      async () =>
        (await servedSerial(port, pem(ca, 'ca.crt'), `${service}.${namespace}.svc`)) === wanted
          ? true
          : undefined,
      { timeoutMs: 30_000, everyMs: 500 },
    );
    const [still] = await readyReplicas(kc, namespace, ps, 1, 5_000);
    assert.equal(still!.process!.pid, pid, 'the same process');
  });
});

describe('spec.caSecretRef: a Secret someone else maintains (as cert-manager writes it)', () => {
  const procs = new Processes(namespace);
  const ps = uniqueName('cm').slice(0, 40);
  const service = `policy-server-${ps}`;
  const secretName = `${ps}-cert`;
  const policy = `${ps}-names`;
  const loadNamespace = 'rollcall-e2e-certs-cm';
  const configMaps = `/api/v1/namespaces/${loadNamespace}/configmaps`;
  const webhookName = `rollcall-${policy}`;
  const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
  const dnsNames = [
    `${service}.${namespace}.svc`,
    `${service}.${namespace}.svc.cluster.local`,
    `${service}.${namespace}`,
    service,
  ];

  /** The Secret cert-manager's CA issuer writes: type kubernetes.io/tls, ca.crt, tls.crt, tls.key. */
  async function certManagerSecret(ca: CertificateAuthority, signer = ca): Promise<V1Secret> {
    const leaf = await issueServingCertificate({
      ca: signer,
      dnsNames,
      validityMs: 3_600_000,
      now: new Date(),
    });
    return {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: secretName, namespace },
      type: 'kubernetes.io/tls',
      data: {
        'ca.crt': b64(ca.certPem),
        'tls.crt': b64(leaf.certPem),
        'tls.key': b64(leaf.keyPem),
      },
    };
  }
  const writeSecret = async (secret: V1Secret) => {
    const current = await core
      .readNamespacedSecret({ name: secretName, namespace })
      .catch(() => undefined);
    if (current === undefined) await core.createNamespacedSecret({ namespace, body: secret });
    else await core.replaceNamespacedSecret({ name: secretName, namespace, body: secret });
  };
  const newCa = (name: string) =>
    createCa({ commonName: name, validityMs: 86_400_000, now: new Date() });
  const webhookBundle = async () =>
    (
      await kc
        .makeApiClient(AdmissionregistrationV1Api)
        .readValidatingWebhookConfiguration({ name: webhookName })
    ).webhooks?.[0]?.clientConfig.caBundle;
  type ServerObject = KubernetesObject & {
    status?: {
      summary?: string;
      certificate?: { renewedBy?: string; notAfter?: string; expiresSoon?: boolean };
      conditions?: { type: string; status: string; reason: string; message: string }[];
    };
  };
  const serverUntil = (done: (s: ServerObject) => boolean) =>
    watchUntil<ServerObject>(kc, '/apis/rollcall.dev/v1alpha1/policyservers', done, {
      fieldSelector: `metadata.name=${ps}`,
      timeoutMs: 60_000,
    });
  const configMap = (name: string) => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name, namespace: loadNamespace },
  });
  let first: CertificateAuthority;
  let second: CertificateAuthority;
  let ids: Identities | undefined;

  before(async () => {
    await procs.prepare(loadNamespace);
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    [first, second] = await Promise.all([newCa('cm-ca-1'), newCa('cm-ca-2')]);
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
    await core.deleteNamespacedSecret({ name: secretName, namespace }).catch(() => {});
  });

  test("the webhook trusts the Secret's ca.crt and the apiserver's calls verify against it", async () => {
    await writeSecret(await certManagerSecret(first));
    await apply(
      policyServerManifest(ps, {
        replicas: 1,
        serviceAccountName: POLICY_SERVER_ACCOUNT,
        caSecretRef: { name: secretName },
      }),
      refusingPolicy(policy, ps, loadNamespace),
    );
    // The pods mount that Secret.
    const deployment = await watchUntil<V1Deployment & KubernetesObject>(
      kc,
      `/apis/apps/v1/namespaces/${namespace}/deployments`,
      () => true,
      { fieldSelector: `metadata.name=${service}`, timeoutMs: 30_000 },
    );
    assert.equal(deployment.spec?.template.spec?.volumes?.[0]?.secret?.secretName, secretName);
    await until(
      "the webhook with the Secret's CA",
      async () =>
        (await webhookBundle().catch(() => undefined)) === b64(first.certPem) ? true : undefined,
      { timeoutMs: 90_000, everyMs: 500 },
    );
    const denied = await untilVerdict(
      kc,
      configMaps,
      configMap('refused-1'),
      (v) => !v.allowed,
      60_000,
    );
    assert.match(denied.message, /refused by rollcall/);

    // rollcall cannot renew it: the status shows its expiry, and it expires within 30 days.
    const server = await serverUntil((s) => s.status?.certificate?.renewedBy === 'external');
    assert.equal(server.status?.certificate?.expiresSoon, true);
    const events = await kc
      .makeApiClient(EventsV1Api)
      .listNamespacedEvent({ namespace: 'default' });
    const warning = events.items.find(
      (e) => e.regarding?.name === ps && e.reason === 'CertificateExpiring',
    );
    assert.equal(warning?.type, 'Warning');
    assert.match(warning?.note ?? '', /rollcall cannot renew it \(spec.caSecretRef\)/);
  });

  test('the Secret replaced with a new CA: the webhook follows and the calls verify again', async () => {
    await writeSecret(await certManagerSecret(second));
    await until(
      'the webhook with the new CA',
      async () => ((await webhookBundle()) === b64(second.certPem) ? true : undefined),
      { timeoutMs: 30_000, everyMs: 250 },
    );
    // The replica reloads the new certificate from its mounted Secret: the policy answers again.
    const denied = await untilVerdict(
      kc,
      configMaps,
      configMap('refused-2'),
      (v) => /refused by rollcall/.test(v.message),
      60_000,
    );
    assert.equal(denied.allowed, false);
  });

  test('a broken Secret makes the server Stalled with the reason and leaves the webhook untouched', async () => {
    // tls.crt signed by a CA that is not the Secret's ca.crt.
    const stranger = await newCa('stranger');
    await writeSecret(await certManagerSecret(second, stranger));
    const stalled = await serverUntil((s) => s.status?.summary === 'Stalled');
    const condition = stalled.status?.conditions?.find((c) => c.type === 'Stalled');
    assert.equal(condition?.reason, 'TLSSecretInvalid');
    assert.match(condition?.message ?? '', /does not chain to the CA/);
    // The same Secret event ran the webhook's key: give it time to (not) write.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    assert.equal(await webhookBundle(), b64(second.certPem), 'the webhook keeps the working CA');

    // A missing Secret says so.
    await core.deleteNamespacedSecret({ name: secretName, namespace });
    const missing = await serverUntil(
      (s) =>
        s.status?.conditions?.find((c) => c.type === 'Stalled')?.reason === 'TLSSecretNotFound',
    );
    assert.match(
      missing.status?.conditions?.find((c) => c.type === 'Stalled')?.message ?? '',
      /does not exist/,
    );
    assert.equal(await webhookBundle(), b64(second.certPem));
  });
});
