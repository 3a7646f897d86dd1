// The demo's steps, in order. Each is a small function of the shared Demo context; runDemo
// (tooling/demo/demo.ts) runs them one after the other and cleans up whatever they started.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { down, kubectl, status, up } from '../cluster/cluster.ts';
import { startRedis } from '../cluster/redis.ts';
import { installCrds } from '../../control-plane/install-crds.ts';
import { loadKubeConfig } from '../../lib/kube/kube-config.ts';
import {
  DEMO_NAMESPACE,
  FAILING,
  GOOD,
  NAMESPACE,
  SERVER,
  SERVER_PODS,
  indent,
  kubectlWait,
  need,
  preferredPort,
  tryKubectl,
  type Demo,
} from './context.ts';
import {
  auditExisting,
  createConfigMaps,
  showAudit,
  showAuditLog,
  showDeny,
  showWarn,
} from './audit-steps.ts';
import { accountKubeconfig, grantIdentities, showLeastPrivilege } from './identities.ts';
import { demoManifests, manifestsYaml, startBundleServer } from './manifests.ts';

export interface DemoStep {
  name: string;
  run(demo: Demo): Promise<void>;
}

/** Budget for convergence: a cold start of rollcall and three policy-server processes. */
const CONVERGE_MS = 180_000;

export const DEMO_STEPS: DemoStep[] = [
  { name: 'start the local cluster', run: startCluster },
  { name: 'start Redis', run: startRedisStep },
  { name: 'install the CRDs', run: installApi },
  { name: "grant rollcall's accounts their rights", run: async (demo) => grantIdentities(demo) },
  { name: 'start rollcall', run: startRollcall },
  { name: 'serve the policy bundles', run: serveBundles },
  { name: 'apply the policies', run: applyManifests },
  { name: 'wait for convergence', run: waitForConvergence },
  { name: 'show the policies', run: showPolicies },
  { name: 'show the replicas', run: showReplicas },
  { name: 'show admission', run: showAdmission },
  { name: 'create ConfigMaps before any policy', run: async (demo) => createConfigMaps(demo) },
  { name: 'audit them with a new policy', run: auditExisting },
  { name: 'show the audit', run: showAudit },
  { name: "show Audit in the apiserver's audit log", run: showAuditLog },
  { name: 'switch the policy to Warn', run: showWarn },
  { name: 'switch the policy to Deny', run: showDeny },
  { name: 'show least privilege', run: showLeastPrivilege },
  { name: 'show where to look next', run: showNextSteps },
];

/** The cluster (reused when it already runs; then it is not ours to stop). */
async function startCluster(demo: Demo): Promise<void> {
  const wasRunning = (await status(demo.dir)).healthy;
  if (!wasRunning) demo.onExit('cluster', () => down(demo.dir, demo.progress));
  demo.progress(
    wasRunning
      ? `reusing the running cluster in ${demo.dir}`
      : `starting the local cluster in ${demo.dir}`,
  );
  demo.state.cluster = await demo.guard(up(demo.dir, demo.progress));
}

/** Redis (REDIS_URL when set). */
async function startRedisStep(demo: Demo): Promise<void> {
  const redis = await demo.guard(startRedis({ dir: join(demo.dir, 'redis'), log: demo.progress }));
  demo.onExit('redis', () => redis.stop());
  demo.state.redisUrl = redis.url;
}

/** rollcall's namespace and the CRDs first, so the policies apply as soon as rollcall runs. */
async function installApi(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }),
  );
  await demo.guard(installCrds(loadKubeConfig(cluster.kubeconfig), { info: () => {} }));
}

/**
 * rollcall's watcher and worker, as their Deployments run them: each with a token of its own
 * ServiceAccount, never the admin's. No --webhook-url: webhooks reference the policy server's
 * Service, and the local cluster's node agent routes the apiserver's calls to the real
 * policy-server processes, as kube-proxy would.
 */
async function startRollcall(demo: Demo): Promise<void> {
  const httpPort = await preferredPort(8080, '0.0.0.0');
  const credentials = `admin:${randomBytes(9).toString('base64url')}`;
  const common = ['--namespace', NAMESPACE, '--redis-url', need(demo, 'redisUrl')];
  const [watcherConfig, workerConfig] = [
    await accountKubeconfig(demo, 'rollcall-watcher'),
    await accountKubeconfig(demo, 'rollcall-worker'),
  ];
  const watcher = demo.startRollcall('rollcall-watcher', [
    'watcher',
    ...common,
    '--kubeconfig',
    watcherConfig,
    '--port',
    '0',
  ]);
  const worker = demo.startRollcall('rollcall-worker', [
    'worker',
    ...common,
    '--kubeconfig',
    workerConfig,
    '--port',
    String(httpPort),
    '--ui-credentials',
    credentials,
  ]);
  demo.progress(
    `rollcall's watcher (pid ${watcher.process.pid}) and worker (pid ${worker.process.pid}) started as their ServiceAccounts; logs in ${demo.logs}`,
  );
  demo.state.httpPort = httpPort;
  demo.state.credentials = credentials;
}

/** The HTTP server the `source` policies download from (a real download, on loopback). */
async function serveBundles(demo: Demo): Promise<void> {
  const server = await startBundleServer();
  demo.onExit('the bundle server', () => server.close());
  demo.state.bundles = server.url;
}

async function applyManifests(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const file = join(demo.dir, 'demo', 'policies.yaml');
  mkdirSync(join(demo.dir, 'demo'), { recursive: true });
  writeFileSync(file, manifestsYaml(demoManifests(need(demo, 'bundles'))));
  demo.progress('applying the demo policies');
  demo.out(`$ kubectl apply -f ${file}`);
  demo.out(indent(kubectl(cluster, ['apply', '-f', file])));
}

/** `kubectl wait` (watches, no sleeps) until every object reached its end state. */
async function waitForConvergence(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  demo.progress('waiting for the policy server and the policies to converge');
  const deadline = Date.now() + CONVERGE_MS;
  const wait = (...args: string[]) => demo.guard(kubectlWait(cluster, deadline, args));
  await wait(`policyserver/${SERVER}`, '--for=condition=Ready');
  await Promise.all([
    wait(`policy/${GOOD}`, '--for=jsonpath={.status.ready}=3/3'),
    wait(`policy/${GOOD}`, '--for=condition=Ready'),
    ...Object.keys(FAILING).flatMap((name) => [
      wait(`policy/${name}`, '--for=jsonpath={.status.failedReplicas}=3'),
      wait(`policy/${name}`, '--for=condition=Stalled'),
    ]),
  ]);
  await wait(`validatingwebhookconfiguration/rollcall-${GOOD}`, '--for=create');
}

async function showPolicies(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  demo.out('$ kubectl get policyservers,policies -o wide');
  demo.out(indent(kubectl(cluster, ['get', 'policyservers,policies', '-o', 'wide'])));
  demo.out(`
  The PolicyServer "${SERVER}" runs 3 replicas of rollcall's own image; each replica loads
  every policy of its server and reports what it loaded on its pod. rollcall aggregates
  those reports like a Deployment aggregates pods:

  - ${GOOD}: READY 3/3, Ready. Every replica compiled its CEL, so its webhook is registered.
  - ${Object.entries(FAILING)
    .map(([name, what]) => `${name} (${what})`)
    .join(',\n    ')}:
    READY 0/3, Stalled. Every replica failed to load them; the MESSAGE column names the pod
    and the error. They will not converge without a change, and they have no webhook.
`);
  demo.out(
    '$ kubectl get validatingwebhookconfigurations -l app.kubernetes.io/managed-by=rollcall',
  );
  demo.out(
    indent(
      kubectl(cluster, [
        'get',
        'validatingwebhookconfigurations',
        '-l',
        'app.kubernetes.io/managed-by=rollcall',
      ]),
    ),
  );
  demo.out(`  Only the Ready policy has a webhook. The Stalled ones block nothing.\n`);
}

/** The replicas are real processes: the node agent's table says which pid serves which pod. */
async function showReplicas(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  demo.out(`$ kubectl get ${SERVER_PODS.join(' ')}`);
  demo.out(indent(kubectl(cluster, ['get', ...SERVER_PODS])));
  const file = join(demo.dir, 'node-agent.json');
  let pods: Record<string, { port?: number; pid?: number }> = {};
  try {
    pods = (JSON.parse(readFileSync(file, 'utf8')) as { pods?: typeof pods }).pods ?? {};
  } catch {
    // shown as "none" below
  }
  const rows = Object.entries(pods)
    .filter(([name]) => name.startsWith(`policy-server-${SERVER}-`))
    .map(([name, p]) => `  ${name}   pid ${p.pid}   https://127.0.0.1:${p.port}`);
  demo.out(
    `  Each pod is a real \`rollcall policy-server\` process on this machine, started by the`,
  );
  demo.out(`  local cluster's node agent (${file}):`);
  demo.out(rows.length > 0 ? rows.join('\n') : '  (none)');
  demo.out();
}

/** Admission for real: the apiserver calls a policy-server replica through its Service. */
async function showAdmission(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  await demo.guard(untilWebhookActive(demo));
  demo.out(`$ kubectl run demo-pod --image=nginx -n ${DEMO_NAMESPACE}`);
  const denied = tryKubectl(cluster, ['run', 'demo-pod', '--image=nginx', '-n', DEMO_NAMESPACE]);
  demo.out(indent(denied.output));
  if (denied.ok)
    throw new Error(
      `the pod was admitted, but ${GOOD} should have denied it; see the policy servers' logs in ${join(demo.dir, 'logs', 'pods')}`,
    );
  demo.out(`  Denied by ${GOOD}: the apiserver sent an AdmissionReview to one of the 3 replicas,`);
  demo.out(`  which evaluated the policy's CEL and answered with its message.\n`);
  tryKubectl(cluster, ['delete', 'deployment', 'web', '-n', 'default', '--ignore-not-found']);
  demo.out('$ kubectl create deployment web --image=nginx:latest -n default');
  const allowed = tryKubectl(cluster, [
    'create',
    'deployment',
    'web',
    '--image=nginx:latest',
    '-n',
    'default',
  ]);
  demo.out(indent(allowed.output));
  if (!allowed.ok)
    throw new Error('creating the deployment failed, but no Ready policy targets deployments');
  demo.out(`  Allowed: ${Object.keys(FAILING).join(', ')} target deployments, but they never`);
  demo.out(`  loaded, so rollcall registered no webhook for them. A broken policy shows up as`);
  demo.out(`  Stalled; it does not lock the cluster.\n`);
}

/**
 * The apiserver picks up a new webhook configuration from its own informer, a moment after
 * it exists. Probe with a server-side dry run (it runs admission, but persists nothing)
 * until the webhook answers, so the real request is judged by it.
 */
async function untilWebhookActive(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const probe = tryKubectl(cluster, [
      'run',
      'probe',
      '--image=nginx',
      '-n',
      DEMO_NAMESPACE,
      '--dry-run=server',
    ]);
    if (!probe.ok) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the apiserver did not call the ${GOOD} webhook within 30 s`);
}

async function showNextSteps(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const httpPort = need(demo, 'httpPort');
  const [user, password] = need(demo, 'credentials').split(':') as [string, string];
  const out = demo.out;
  out('Try it yourself:');
  out(`  export KUBECONFIG=${cluster.kubeconfig}`);
  out(
    `  alias kubectl='${cluster.binaries.kube} kubectl'   # the kubectl built with the cluster, or use your own`,
  );
  out(
    `  kubectl get policies -w                 # then fix one: kubectl edit policy limit-replicas`,
  );
  out(`  kubectl describe policy require-probes  # conditions and Events`);
  out(`  kubectl get reports -A                  # the audit: fix one, its result flips alone:`);
  out(
    `  kubectl patch configmap db-config -n ${DEMO_NAMESPACE} --type=json -p '[{"op":"remove","path":"/data/db-password"}]'`,
  );
  out('');
  out(
    `  status page:  http://127.0.0.1:${httpPort}/   (each policy's replicas, MODE and failing objects)`,
  );
  out(`  queue UI:     http://127.0.0.1:${httpPort}/queues`);
  out(`                (both ask for user ${user}, password ${password})`);
  out(`  metrics:      http://127.0.0.1:${httpPort}/metrics`);
  out(
    `  logs:         ${demo.logs}/rollcall-watcher.log, rollcall-worker.log, pods/ (one per policy-server pod)`,
  );
  if (httpPort !== 8080) out(`  (port 8080 was taken, so rollcall listens on ${httpPort})`);
  out('');
}
