// The local node agent runs a real `rollcall policy-server` process per pod of rollcall's
// image on the fake node, as the pod's ServiceAccount (a token bound to the pod, not the
// admin), probes it into Ready, hands it the CONNECTs from the apiserver's
// `cluster` egress, stops it with its pod, replaces a pod whose process died, and
// leaves nothing behind after `cluster down`.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as tlsConnect } from 'node:tls';
import {
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Pod,
} from '@kubernetes/client-node';
import { DEFAULT_POLICY_SERVER_IMAGE, POLICY_SERVER_TLS_DIR } from '../../../api/constants.ts';
import { down, kubectl, up, type ClusterState } from '../../../tooling/cluster/cluster.ts';
import {
  readNodeAgentState,
  type NodeAgentPod,
} from '../../../tooling/cluster/node-agent-state.ts';
import { issueCertificate } from '../../../tooling/cluster/pki.ts';
import { processAlive } from '../../../tooling/cluster/process.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { credentialsTarget, requestJson } from '../../../lib/kube/api.ts';
import {
  POLICY_SERVER_ACCOUNT,
  prepareIdentities,
  type Identities,
} from '../../support/identities.ts';
import { testCluster, testKubeConfig, uniqueName } from '../../support/kube.ts';

const cluster = testCluster();
const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const namespace = uniqueName('node-agent');
const app = 'policy-server-agent-test';
const serviceHost = `${app}.${namespace}.svc`;

/** Polls `check` until it returns a value (not undefined/false), or fails saying what it waited for. */
async function until<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** The agent's processes for pods of the test namespace, by pod name. */
function agentPods(dir: string, ns = namespace): Record<string, NodeAgentPod> {
  const pods = readNodeAgentState(dir)?.pods ?? {};
  return Object.fromEntries(Object.entries(pods).filter(([, p]) => p.namespace === ns));
}

/** A TLS Secret signed by the cluster's CA for the Service's names, as rollcall's worker issues one. */
function tlsSecret(state: ClusterState, ns: string, name: string) {
  const pki = join(state.dir, 'pki');
  const issued = issueCertificate(pki, `${name}-${ns}`, serviceHost, [
    `DNS:${app}.${ns}.svc`,
    `DNS:${app}.${ns}.svc.cluster.local`,
  ]);
  const b64 = (file: string) => readFileSync(file).toString('base64');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'kubernetes.io/tls',
    metadata: { name, namespace: ns },
    data: {
      'tls.crt': b64(issued.cert),
      'tls.key': b64(issued.key),
      'ca.crt': b64(join(pki, 'ca.crt')),
    },
  };
}

/** The Deployment control-plane/functions/policyserver-core.ts writes for the default image, reduced to what the agent reads. */
function deployment(ns: string, replicas: number, account = POLICY_SERVER_ACCOUNT) {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: app, namespace: ns },
    spec: {
      replicas,
      selector: { matchLabels: { app } },
      template: {
        metadata: { labels: { app } },
        spec: {
          serviceAccountName: account,
          terminationGracePeriodSeconds: 5,
          containers: [
            {
              name: 'policy-server',
              image: DEFAULT_POLICY_SERVER_IMAGE,
              args: ['policy-server', '--port=8443', `--tls-dir=${POLICY_SERVER_TLS_DIR}`],
              env: [
                { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                {
                  name: 'POD_NAMESPACE',
                  valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } },
                },
                { name: 'POLICY_SERVER', value: app },
              ],
              volumeMounts: [{ name: 'tls', mountPath: POLICY_SERVER_TLS_DIR, readOnly: true }],
            },
          ],
          volumes: [{ name: 'tls', secret: { secretName: `${app}-tls` } }],
        },
      },
    },
  };
}

function apply(state: ClusterState, objects: unknown[]): void {
  kubectl(
    state,
    ['apply', '-f', '-'],
    JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
  );
}

async function readyPods(client: KubeConfig, ns: string): Promise<V1Pod[]> {
  const list = await client
    .makeApiClient(CoreV1Api)
    .listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` });
  return list.items.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
  );
}

/** Opens a tunnel through the agent's proxy; resolves with the status line and the socket. */
function connectThrough(
  proxySocket: string,
  authority: string,
): Promise<{ status: string; body: string; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path: proxySocket });
    let received = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf('\r\n\r\n');
      if (end === -1) return;
      socket.off('data', onData);
      const head = received.subarray(0, end).toString();
      const status = head.split('\r\n')[0]!;
      if (status.includes(' 200 ')) return resolve({ status, body: '', socket });
      socket.on('data', (c: Buffer) => (received = Buffer.concat([received, c])));
      socket.on('end', () =>
        resolve({ status, body: received.subarray(end + 4).toString(), socket }),
      );
    };
    socket.on('data', onData);
    socket.on('error', reject);
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  });
}

/** GET `path` over TLS inside a tunnel, verifying the server's certificate for the Service's name. */
function httpsGetOver(socket: Socket, ca: Buffer, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const tls = tlsConnect({ socket, servername: serviceHost, ca }, () => {
      tls.write(`GET ${path} HTTP/1.1\r\nHost: ${serviceHost}\r\nConnection: close\r\n\r\n`);
    });
    let text = '';
    tls.setEncoding('utf8');
    tls.on('data', (c: string) => (text += c));
    tls.on('end', () => resolve(text.split('\r\n')[0]!));
    tls.on('error', reject);
  });
}

function tlsHandshake(socket: Socket, ca: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const tls = tlsConnect({ socket, servername: serviceHost, ca }, () => resolve());
    tls.on('error', reject);
  });
}

/**
 * Tunnels (connections accepted on the agent's proxy socket) that process `pid` holds open:
 * `ss -x` lists a socket under each process that has it.
 */
function tunnelsHeldBy(pid: number, proxySocket: string): number {
  const out = execFileSync('ss', ['-Hxp', 'state', 'established'], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes(` ${proxySocket} `) && l.includes(`pid=${pid},`))
    .length;
}

let ids: Identities | undefined;
before(async () => {
  await installCrds(kc, { info: () => {} }); // the policy server watches Policies
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  // The policy servers' account and its rights (deploy/rbac.yaml) in this namespace.
  ids = await prepareIdentities(namespace);
  apply(cluster, [tlsSecret(cluster, namespace, `${app}-tls`)]);
});
after(async () => {
  ids?.remove();
  await core.deleteNamespace({ name: namespace }).catch(() => {});
});

let podsCreatedAt = 0;

test("each pod of rollcall's image runs a real policy-server process that the agent probes into Ready", async (t) => {
  podsCreatedAt = Date.now();
  apply(cluster, [
    deployment(namespace, 2),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: app, namespace },
      spec: { selector: { app }, ports: [{ port: 443, targetPort: 8443 }] },
    },
  ]);
  const firstProcess = await until('a process for a pod', () => {
    const pods = Object.values(agentPods(cluster.dir));
    return pods.length > 0 && Date.now();
  });
  const ready = await until('2 Ready pods', async () => {
    const pods = await readyPods(kc, namespace);
    return pods.length === 2 && pods;
  });
  const readyAt = Date.now();
  t.diagnostic(`pod create → process started: ${firstProcess - podsCreatedAt} ms`);
  t.diagnostic(`pod create → both pods Ready: ${readyAt - podsCreatedAt} ms`);

  const processes = agentPods(cluster.dir);
  for (const pod of ready) {
    const name = pod.metadata!.name!;
    const entry = processes[name];
    assert.ok(entry, `node-agent.json lists ${name}`);
    assert.ok(processAlive(entry.pid), `the process of ${name} runs`);
    assert.equal(entry.ready, true);
    assert.equal(pod.status?.phase, 'Running');
    assert.equal(pod.status?.podIP, entry.podIP);
    assert.match(entry.podIP, /^10\.244\.\d+\.\d+$/);
    assert.equal(pod.status?.containerStatuses?.[0]?.ready, true);
    assert.ok(pod.status?.containerStatuses?.[0]?.state?.running, 'the container is running');

    const argv = readFileSync(`/proc/${entry.pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
    const tlsDir = join(cluster.dir, 'pods', name, 'volumes', 'tls');
    assert.ok(argv.includes('policy-server'), argv.join(' '));
    assert.ok(
      argv.includes(`--tls-dir=${tlsDir}`),
      'the mount path is rewritten to the materialized volume',
    );
    assert.deepEqual(argv.slice(-2), ['--address=127.0.0.1', `--port=${entry.port}`]);
    const secret = await core.readNamespacedSecret({ name: `${app}-tls`, namespace });
    assert.equal(
      readFileSync(join(tlsDir, 'tls.crt')).toString('base64'),
      secret.data?.['tls.crt'],
      "the volume holds the Secret's certificate",
    );
  }
  const podIPs = ready.map((p) => p.status?.podIP);
  assert.equal(new Set(podIPs).size, 2, 'each pod has its own IP');
});

test("each process acts as its pod's ServiceAccount, by a token bound to its pod, never as the admin", async () => {
  const pods = Object.entries(agentPods(cluster.dir));
  assert.equal(pods.length, 2);
  const ca = readFileSync(join(cluster.dir, 'pki', 'ca.crt'));
  for (const [name, entry] of pods) {
    const env = readFileSync(`/proc/${entry.pid}/environ`, 'utf8').split('\0');
    const kubeconfig = join(cluster.dir, 'pods', name, 'kubeconfig');
    assert.ok(env.includes(`KUBECONFIG=${kubeconfig}`), `KUBECONFIG of ${name}`);
    assert.ok(
      !env.some((e) => e === `KUBECONFIG=${cluster.kubeconfig}`),
      'not the admin kubeconfig',
    );
    const tokenFile = join(cluster.dir, 'pods', name, 'serviceaccount', 'token');
    assert.equal(statSync(tokenFile).mode & 0o777, 0o600);
    assert.match(readFileSync(kubeconfig, 'utf8'), new RegExp(`tokenFile: ${tokenFile}`));
    // Who the apiserver says the token is.
    const token = readFileSync(tokenFile, 'utf8');
    const review = (await requestJson(
      credentialsTarget({ server: cluster.server, ca, token }),
      'POST',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' } },
    )) as { status: { userInfo: { username: string; extra?: Record<string, string[]> } } };
    const pod = await core.readNamespacedPod({ name, namespace });
    const user = review.status.userInfo;
    assert.equal(user.username, `system:serviceaccount:${namespace}:${POLICY_SERVER_ACCOUNT}`);
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/pod-name'], [name]);
    assert.deepEqual(user.extra?.['authentication.kubernetes.io/pod-uid'], [pod.metadata?.uid]);
  }
});

test('a pod whose ServiceAccount does not exist is not started and says why; it starts once the account exists', async (t) => {
  const account = 'not-yet';
  const name = `${app}-${account}`;
  const template = deployment(namespace, 1, account).spec.template;
  apply(cluster, [
    {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace, labels: { app: name } },
      spec: template.spec,
    },
  ]);
  t.after(async () => {
    kubectl(cluster, ['delete', 'pod', name, '-n', namespace, '--wait=false']);
    await until(`the process of ${name} to stop`, () => !agentPods(cluster.dir)[name], 30_000);
  });
  const waiting = await until('the pod to say why it does not start', async () => {
    const pod = await core.readNamespacedPod({ name, namespace });
    const state = pod.status?.containerStatuses?.[0]?.state?.waiting;
    return state?.message?.includes('token') && state;
  });
  assert.equal(waiting.reason, 'ContainerCreating');
  assert.match(waiting.message ?? '', /failed to fetch token: serviceaccounts "not-yet" not found/);
  assert.equal(agentPods(cluster.dir)[name], undefined, 'no process');
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: account } } });
  await until('its process, once the account exists', () => agentPods(cluster.dir)[name], 90_000);
});

test("a CONNECT to the Service's cluster IP reaches a process, which presents the Secret's certificate", async () => {
  const proxySocket = readNodeAgentState(cluster.dir)!.proxySocket;
  const service = await core.readNamespacedService({ name: app, namespace });
  const ca = readFileSync(join(cluster.dir, 'pki', 'ca.crt'));
  for (let i = 0; i < 2; i++) {
    const tunnel = await connectThrough(proxySocket, `${service.spec!.clusterIP}:443`);
    assert.equal(tunnel.status, 'HTTP/1.1 200 Connection established');
    assert.equal(await httpsGetOver(tunnel.socket, ca, '/readyz'), 'HTTP/1.1 200 OK');
  }

  // Round robin per connection: two tunnels held open land on the two processes, one each,
  // handed over: the agent keeps none of them (no byte passes through it, as with kube-proxy).
  const held: Socket[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const tunnel = await connectThrough(proxySocket, `${service.spec!.clusterIP}:443`);
      held.push(tunnel.socket);
      await tlsHandshake(tunnel.socket, ca);
    }
    const agentPid = readNodeAgentState(cluster.dir)!.pid;
    const pids = Object.values(agentPods(cluster.dir)).map((p) => p.pid);
    const holders = () => [agentPid, ...pids].map((pid) => tunnelsHeldBy(pid, proxySocket));
    await until('the tunnels handed over', () => holders().join() === '0,1,1', 5_000).catch(
      () => {},
    );
    assert.deepEqual(holders(), [0, 1, 1], 'tunnels held by the agent, then by each process');
  } finally {
    for (const socket of held) socket.destroy();
  }

  const wrongPort = await connectThrough(proxySocket, `${service.spec!.clusterIP}:80`);
  assert.match(wrongPort.status, / 503 /);
  assert.match(wrongPort.body, /has no port 80/);
  const nothing = await connectThrough(proxySocket, '10.0.0.254:443');
  assert.match(nothing.status, / 503 /);
  assert.match(nothing.body, /no Service has cluster IP 10\.0\.0\.254/);
});

test('a change to the Secret reaches the files of every pod that mounts it', async () => {
  await core.patchNamespacedSecret(
    {
      name: `${app}-tls`,
      namespace,
      body: { stringData: { 'rotated.txt': 'second version' } },
    },
    setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
  );
  for (const name of Object.keys(agentPods(cluster.dir))) {
    const file = join(cluster.dir, 'pods', name, 'volumes', 'tls', 'rotated.txt');
    await until(`${file} to appear`, () => existsSync(file), 15_000);
    assert.equal(readFileSync(file, 'utf8'), 'second version');
  }
});

test('the apiserver calls a webhook that names the Service through the agent, and trusts its certificate', async (t) => {
  const webhookName = 'probe.node-agent.rollcall.dev';
  const name = uniqueName('node-agent-webhook');
  apply(cluster, [
    {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: { name },
      webhooks: [
        {
          name: webhookName,
          clientConfig: {
            // A policy this server does not have: the policy server answers 404.
            service: { namespace, name: app, path: '/validate/absent/1', port: 443 },
            caBundle: readFileSync(join(cluster.dir, 'pki', 'ca.crt')).toString('base64'),
          },
          rules: [
            {
              operations: ['CREATE'],
              apiGroups: [''],
              apiVersions: ['v1'],
              resources: ['configmaps'],
            },
          ],
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } },
          failurePolicy: 'Fail',
          sideEffects: 'None',
          admissionReviewVersions: ['v1'],
          timeoutSeconds: 5,
        },
      ],
    },
  ]);
  t.after(() => kubectl(cluster, ['delete', 'validatingwebhookconfiguration', name]));
  const message = await until('the apiserver to call the webhook', () => {
    try {
      kubectl(cluster, ['create', 'configmap', '-n', namespace, uniqueName('cm')]);
      return undefined; // the webhook is not active yet
    } catch (err) {
      const text = (err as Error).message;
      return text.includes(webhookName) && text;
    }
  });
  // Through the proxy (no "proxy error", no dial of the cluster IP) to a server whose
  // certificate verified for the Service's name (no x509 error), which answered 404.
  assert.doesNotMatch(message, /proxy error|dial tcp|x509|certificate/);
  assert.match(message, /could not find the requested resource/);
});

test('deleting a pod stops its process, and its replacement gets a new one', async () => {
  const [name, entry] = Object.entries(agentPods(cluster.dir))[0]!;
  await core.deleteNamespacedPod({ name, namespace });
  await until(`the process of deleted pod ${name} to stop`, () => !processAlive(entry.pid), 15_000);
  assert.equal(agentPods(cluster.dir)[name], undefined, 'node-agent.json drops it');
  await until('2 Ready pods again', async () => {
    const pods = await readyPods(kc, namespace);
    return pods.length === 2 && pods.every((p) => p.metadata!.name !== name);
  });
  const replacement = Object.entries(agentPods(cluster.dir)).find(([n]) => n !== name)!;
  assert.ok(processAlive(replacement[1].pid));
});

test('a process that dies gets its pod deleted and replaced, as a crash would', async () => {
  const [name, entry] = Object.entries(agentPods(cluster.dir)).find(([, p]) => p.ready)!;
  process.kill(entry.pid, 'SIGKILL');
  await until(`pod ${name} to be deleted`, async () => {
    const pods = await core.listNamespacedPod({
      namespace,
      fieldSelector: `metadata.name=${name}`,
    });
    return pods.items.length === 0;
  });
  const pods = await until('2 Ready pods without the crashed one', async () => {
    const ready = await readyPods(kc, namespace);
    return ready.length === 2 && ready.every((p) => p.metadata!.name !== name) && ready;
  });
  for (const pod of pods) assert.ok(processAlive(agentPods(cluster.dir)[pod.metadata!.name!]?.pid));
  const log = readFileSync(join(cluster.dir, 'logs', 'node-agent.log'), 'utf8');
  assert.match(
    log,
    new RegExp(
      `pod ${namespace}/${name}: process ${entry.pid} was killed by SIGKILL; deleting the pod`,
    ),
  );
});

test('cluster down stops the node agent and every process it started', async (t) => {
  // A private cluster: the shared one must outlive this file.
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-node-agent-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const started = Date.now();
  const state = await up(dir, () => {});
  t.diagnostic(`cluster up with the node agent: ${Date.now() - started} ms`);
  let pids: number[] = [];
  try {
    const ns = 'default';
    // The namespace's own account: the private cluster has no rollcall accounts.
    apply(state, [tlsSecret(state, ns, `${app}-tls`), deployment(ns, 2, 'default')]);
    const pods = await until('2 pod processes', () => {
      const found = Object.values(agentPods(dir, ns));
      return found.length === 2 && found;
    });
    pids = [state.pids['node-agent']!, ...pods.map((p) => p.pid)];
    assert.ok(pids.every(processAlive));
  } finally {
    await down(dir, () => {});
  }
  assert.deepEqual(pids.filter(processAlive), [], 'no process of the agent is left');
  const ps = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  assert.deepEqual(
    ps.split('\n').filter((line) => line.includes(dir) && !line.includes('ps -eo')),
    [],
  );
});
