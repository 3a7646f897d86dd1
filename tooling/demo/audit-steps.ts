// The demo's audit steps: how an operator adopts a policy over a cluster that already holds
// objects. ConfigMaps exist first; a Policy in Audit judges them where they are (its Report,
// its VIOLATIONS count) and records a new violation in the apiserver's audit log; the same
// Policy then Warns (kubectl prints `Warning:` and admits), then Denies (a new violating
// ConfigMap is refused) while its Report still lists the violations that predate it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AUDIT_ANNOTATION_KEY } from '../../data-plane/verdict.ts';
import { kubectl, type ClusterState } from '../cluster/cluster.ts';
import { DEMO_NAMESPACE, indent, kubectlWait, need, tryKubectl, type Demo } from './context.ts';
import {
  AUDIT_MESSAGE,
  AUDIT_POLICY,
  auditPolicyManifest,
  configMapManifests,
  EXISTING_CONFIGMAPS,
  manifestsYaml,
} from './manifests.ts';

/** Budget for one policy change: its replicas load it, the webhook and the audit follow. */
const CHANGE_MS = 60_000;
/** The apiserver picks a changed webhook configuration up from its informer, a moment later. */
const WEBHOOK_SWITCH_MS = 30_000;
const REPORT = `rollcall-${AUDIT_POLICY}`;
/** The key the apiserver logs an Audit policy's annotation under: `<webhook name>/<key>`. */
const ANNOTATION = `${AUDIT_POLICY}.policies.rollcall.dev/${AUDIT_ANNOTATION_KEY}`;

/** kubectl with what it printed on both streams (an admission warning goes to stderr). */
function kubectlBoth(
  cluster: ClusterState,
  args: string[],
): { ok: boolean; stdout: string; stderr: string } {
  const out = spawnSync(
    cluster.binaries.kube,
    ['kubectl', `--kubeconfig=${cluster.kubeconfig}`, ...args],
    { encoding: 'utf8' },
  );
  return { ok: out.status === 0, stdout: out.stdout ?? '', stderr: out.stderr ?? '' };
}

/** Writes `objects` to `<dir>/demo/<file>` and shows `kubectl apply -f` of it. */
function applyShown(demo: Demo, file: string, objects: Record<string, unknown>[]): void {
  const cluster = need(demo, 'cluster');
  const path = join(demo.dir, 'demo', file);
  mkdirSync(join(demo.dir, 'demo'), { recursive: true });
  writeFileSync(path, manifestsYaml(objects));
  demo.out(`$ kubectl apply -f ${path}`);
  demo.out(indent(kubectl(cluster, ['apply', '-f', path])));
}

function show(demo: Demo, args: string[], shown = args): void {
  demo.out(`$ kubectl ${shown.join(' ')}`);
  demo.out(indent(kubectl(need(demo, 'cluster'), args)));
}

/** Every ConfigMap the steps create (a demo run on a reused cluster starts without them). */
const CREATED = [...Object.keys(EXISTING_CONFIGMAPS), 'cache-config', 'api-keys', 'payment-keys'];

/** The ConfigMaps, before any policy judges them: admission will never see them. */
export function createConfigMaps(demo: Demo): void {
  const cluster = need(demo, 'cluster');
  // A reused cluster may hold an earlier run's policy and ConfigMaps: the story starts clean.
  tryKubectl(cluster, ['delete', 'policy', AUDIT_POLICY, '--ignore-not-found', '--wait=true']);
  tryKubectl(cluster, [
    'delete',
    'configmap',
    ...CREATED,
    '-n',
    DEMO_NAMESPACE,
    '--ignore-not-found',
  ]);
  demo.out(
    `Adopting a policy in a cluster that already holds objects: Audit, then Warn, then Deny.\n`,
  );
  applyShown(demo, 'configmaps.yaml', configMapManifests());
  show(demo, ['get', 'configmaps', '-n', DEMO_NAMESPACE]);
  const leaky = Object.entries(EXISTING_CONFIGMAPS)
    .filter(([, data]) => Object.keys(data).some((k) => k.includes('password')))
    .map(([name]) => name);
  demo.out(`  ${leaky.join(' and ')} hold a password. No policy judged them: they were created`);
  demo.out(`  before it existed, and admission only sees requests.\n`);
}

/** The policy in Audit, and its first pass over what exists. */
export async function auditExisting(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  applyShown(demo, 'audit-policy.yaml', [auditPolicyManifest(['Audit'])]);
  demo.progress(`waiting for ${AUDIT_POLICY} to load and its audit to complete a pass`);
  const started = Date.now();
  const deadline = started + CHANGE_MS;
  const wait = (...args: string[]) => demo.guard(kubectlWait(cluster, deadline, args));
  await wait(`policy/${AUDIT_POLICY}`, '--for=condition=Ready');
  const ready = Date.now();
  await wait(`policy/${AUDIT_POLICY}`, '--for=jsonpath={.status.audit.completedAt}');
  const seconds = (ms: number) => (ms / 1000).toFixed(1);
  demo.out(`$ kubectl wait policy/${AUDIT_POLICY} --for=jsonpath='{.status.audit.completedAt}'`);
  demo.out(
    `  Ready ${seconds(ready - started)} s after the apply; the audit's first pass complete ${seconds(Date.now() - ready)} s later.\n`,
  );
}

export async function showAudit(demo: Demo): Promise<void> {
  show(demo, ['get', 'policies', '-o', 'wide']);
  show(demo, ['get', 'reports', '-A']);
  const results = [
    'get',
    'report',
    REPORT,
    '-n',
    DEMO_NAMESPACE,
    '-o',
    'jsonpath={range .results[*]}{.resources[0].name}{"\\t"}{.result}{"\\t"}{.message}{"\\n"}{end}',
  ];
  show(demo, results, [...results.slice(0, -1), `'${results.at(-1)}'`]);
  demo.out(`  The ConfigMaps existed before the policy; the audit judged them where they are.
  The watcher watches what an audited policy's rules name (metadata only); the worker sent
  each ConfigMap to a replica of the policy server, which judged it as a dry-run CREATE
  with the policy's own CEL at the generation its webhook serves: the audit and admission
  cannot disagree. kube-root-ca.crt is judged too: the rules match every ConfigMap of the
  namespace.
  - VIOLATIONS (kubectl get policies -o wide) is status.audit.failing; status.audit also
    names up to 10 failing objects, which the status page shows.
  - One OpenReports Report per namespace and policy, here ${REPORT},
    owned by the Policy: its columns count each result, its results say which object
    and why.
  - It stays current without rescans: a ConfigMap that changes is judged again, alone.\n`);
}

/**
 * Switches the policy's validationActions, waits until its webhook serves the new generation,
 * then until the apiserver calls it (`switched` tells from a server-side dry run).
 */
async function switchActions(
  demo: Demo,
  actions: string[],
  switched: (probe: { ok: boolean; stderr: string }) => boolean,
): Promise<number> {
  const cluster = need(demo, 'cluster');
  const patch = JSON.stringify({ spec: { validationActions: actions } });
  demo.out(`$ kubectl patch policy ${AUDIT_POLICY} --type=merge -p '${patch}'`);
  demo.out(
    indent(kubectl(cluster, ['patch', 'policy', AUDIT_POLICY, '--type=merge', '-p', patch])),
  );
  const generation = kubectl(cluster, [
    'get',
    'policy',
    AUDIT_POLICY,
    '-o',
    'jsonpath={.metadata.generation}',
  ]).trim();
  const deadline = Date.now() + CHANGE_MS;
  await demo.guard(
    kubectlWait(cluster, deadline, [
      `policy/${AUDIT_POLICY}`,
      `--for=jsonpath={.status.servedGeneration}=${generation}`,
    ]),
  );
  const until = Date.now() + WEBHOOK_SWITCH_MS;
  const probe = [
    'create',
    'configmap',
    'probe',
    '--from-literal=probe-password=x',
    '-n',
    DEMO_NAMESPACE,
    '--dry-run=server',
  ];
  while (!switched(kubectlBoth(cluster, probe))) {
    if (Date.now() > until)
      throw new Error(
        `the apiserver did not call generation ${generation} of ${AUDIT_POLICY} within ${WEBHOOK_SWITCH_MS / 1000} s`,
      );
    await demo.guard(new Promise((r) => setTimeout(r, 250)));
  }
  return Number(generation);
}

/** Warn: a violating ConfigMap is admitted, and kubectl prints the policy's message. */
export async function showWarn(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const generation = await switchActions(
    demo,
    ['Warn'],
    (p) => p.ok && p.stderr.includes('Warning:'),
  );
  const create = [
    'create',
    'configmap',
    'api-keys',
    '--from-literal=api-password=s3cret',
    '-n',
    DEMO_NAMESPACE,
  ];
  demo.out(`$ kubectl ${create.join(' ')}`);
  const warned = kubectlBoth(cluster, create);
  demo.out(indent(`${warned.stderr}${warned.stdout}`));
  if (!warned.ok || !warned.stderr.includes(AUDIT_MESSAGE))
    throw new Error(
      `under Warn, api-keys should be admitted with a warning: ${warned.stderr.trim()}`,
    );
  await auditPassOf(demo, generation);
  show(demo, ['get', 'reports', '-n', DEMO_NAMESPACE]);
  demo.out(`  Warn admits and tells whoever sent the request: kubectl printed the policy's`);
  demo.out(`  message as a Warning. The new generation's audit judged every ConfigMap again;`);
  demo.out(`  under Warn alone a failure is reported as \`warn\`.\n`);
}

/** Waits until the audit of `generation` has been through every audited object. */
async function auditPassOf(demo: Demo, generation: number): Promise<void> {
  const cluster = need(demo, 'cluster');
  const deadline = Date.now() + CHANGE_MS;
  const wait = (...args: string[]) => demo.guard(kubectlWait(cluster, deadline, args));
  // completedAt belongs to the generation status.audit names: first that one, then it.
  await wait(`policy/${AUDIT_POLICY}`, `--for=jsonpath={.status.audit.generation}=${generation}`);
  await wait(`policy/${AUDIT_POLICY}`, '--for=jsonpath={.status.audit.completedAt}');
}

/** Deny: a new violation is refused; the Report still lists the ones that predate the policy. */
export async function showDeny(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const generation = await switchActions(demo, ['Deny'], (p) => !p.ok);
  const create = [
    'create',
    'configmap',
    'payment-keys',
    '--from-literal=stripe-password=s3cret',
    '-n',
    DEMO_NAMESPACE,
  ];
  demo.out(`$ kubectl ${create.join(' ')}`);
  const denied = kubectlBoth(cluster, create);
  demo.out(indent(`${denied.stderr}${denied.stdout}`));
  if (denied.ok) throw new Error(`under Deny, payment-keys should have been refused`);
  await auditPassOf(demo, generation);
  show(demo, ['get', 'reports', '-n', DEMO_NAMESPACE]);
  demo.out(`  Deny refuses new violations. The ConfigMaps that broke the policy before it was`);
  demo.out(`  enforced are still there, and still in the Report as \`fail\` until someone fixes`);
  demo.out(`  them; fixing one changes only its own result.\n`);
}

/** The annotation of an Audit policy on the logged `create` of ConfigMap `name`, if any. */
function loggedAnnotation(file: string, name: string): string | undefined {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined; // nothing logged yet
  }
  for (const line of text.split('\n').reverse()) {
    if (!line.includes(`"${name}"`)) continue;
    try {
      const event = JSON.parse(line) as {
        verb?: string;
        stage?: string;
        objectRef?: { namespace?: string; name?: string };
        annotations?: Record<string, string>;
      };
      const ref = event.objectRef;
      if (event.verb !== 'create' || event.stage !== 'ResponseComplete') continue;
      if (ref?.namespace !== DEMO_NAMESPACE || ref.name !== name) continue;
      return event.annotations?.[ANNOTATION];
    } catch {
      // a line being written
    }
  }
  return undefined;
}

/** Polls the audit log for the annotation on the create of `name`, for at most `ms`. */
async function untilLogged(demo: Demo, file: string, name: string, ms: number) {
  const until = Date.now() + ms;
  for (;;) {
    const found = loggedAnnotation(file, name);
    if (found !== undefined || Date.now() > until) return found;
    await demo.guard(new Promise((r) => setTimeout(r, 200)));
  }
}

/**
 * Audit admits a new violation and says nothing to the client; the apiserver's audit log
 * records the policy's annotation on the request's event.
 */
export async function showAuditLog(demo: Demo): Promise<void> {
  const cluster = need(demo, 'cluster');
  const log = cluster.auditLog;
  if (!log) {
    demo.progress('this cluster has no audit log (started by an older rollcall): skipping');
    return;
  }
  // The apiserver may still be picking the new webhook up: server-side dry runs (logged with
  // the annotation too, nothing stored) until one is annotated.
  const until = Date.now() + WEBHOOK_SWITCH_MS;
  for (let i = 0; ; i++) {
    const probe = `audit-probe-${i}`;
    kubectlBoth(cluster, [
      'create',
      'configmap',
      probe,
      '--from-literal=probe-password=x',
      '-n',
      DEMO_NAMESPACE,
      '--dry-run=server',
    ]);
    if ((await untilLogged(demo, log, probe, 1000)) !== undefined) break;
    if (Date.now() > until)
      throw new Error(`the apiserver logged no ${ANNOTATION} within ${WEBHOOK_SWITCH_MS / 1000} s`);
  }
  const create = [
    'create',
    'configmap',
    'cache-config',
    '--from-literal=cache-password=s3cret',
    '-n',
    DEMO_NAMESPACE,
  ];
  demo.out(`$ kubectl ${create.join(' ')}`);
  const created = kubectlBoth(cluster, create);
  demo.out(indent(`${created.stderr}${created.stdout}`));
  if (!created.ok || created.stderr.includes('Warning:'))
    throw new Error(`under Audit, cache-config should be admitted silently: ${created.stderr}`);
  const annotation = await untilLogged(demo, log, 'cache-config', 10_000);
  if (annotation === undefined)
    throw new Error(`the apiserver's audit log has no ${ANNOTATION} for cache-config`);
  demo.out(`  Admitted, and nothing said to the client. The apiserver's audit log`);
  demo.out(`  (${log}) has the policy's annotation on the request's event:`);
  demo.out(`  ${ANNOTATION}: ${annotation}\n`);
}
