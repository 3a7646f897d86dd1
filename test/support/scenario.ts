// A small scenario kit for end-to-end tests with real policy servers: apply manifests, wait
// for a state through a watch, read the node agent's pod table, call one replica's
// /validate directly, and send a dry-run create through the apiserver (the way a user's
// request reaches the webhooks) to read its verdict, message and warnings.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { z } from 'zod';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import type { Condition, Policy, PolicyServer } from '../../api/v1alpha1.ts';
import { readReplicaReport, type ReplicaReport } from '../../api/report.ts';
import { getJson, kubeConfigTarget } from '../../lib/kube/api.ts';
import { httpsRequest, type HttpsAnswer } from './https.ts';
import { POLICY_SERVER_ACCOUNT } from './identities.ts';
import { testCluster, watchUntil } from './kube.ts';
import { policyServerManifest } from './manifests.ts';

export type Obj = KubernetesObject & Record<string, unknown>;
export type PolicyObject = Policy & KubernetesObject;

export const POLICIES_PATH = '/apis/rollcall.dev/v1alpha1/policies';
export const POLICY_SERVERS_PATH = '/apis/rollcall.dev/v1alpha1/policyservers';
export const WEBHOOKS_PATH =
  '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations';

// ---------------------------------------------------------------- manifests and waits

/**
 * `kubectl apply` of the objects, without blocking the event loop (watches of the same test
 * keep running meanwhile). Rejects with kubectl's stderr.
 */
export function apply(...objects: Obj[]): Promise<string> {
  return kubectlAsync(['apply', '-f', '-'], objects.map((o) => stringify(o)).join('---\n'));
}

export interface KubectlRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The built kubectl against the test cluster; resolves with its exit code and both outputs. */
export function kubectlRun(args: string[], input?: string): Promise<KubectlRun> {
  const cluster = testCluster();
  return new Promise((resolve, reject) => {
    const child = spawn(cluster.binaries.kube, [
      'kubectl',
      `--kubeconfig=${cluster.kubeconfig}`,
      ...args,
    ]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

/** The built kubectl against the test cluster, asynchronously; rejects with its stderr. */
export async function kubectlAsync(args: string[], input?: string): Promise<string> {
  const { code, stdout, stderr } = await kubectlRun(args, input);
  if (code !== 0) throw new Error(`kubectl ${args.join(' ')} failed: ${stderr.trim()}`);
  return stdout;
}

export const condition = (obj: { status?: { conditions?: Condition[] } }, type: string) =>
  obj.status?.conditions?.find((c) => c.type === type);
export const isTrue = (obj: { status?: { conditions?: Condition[] } }, type: string) =>
  condition(obj, type)?.status === 'True';
/** The status describes the current generation. */
export const isCurrent = (p: PolicyObject) =>
  p.metadata?.generation !== undefined && p.status?.observedGeneration === p.metadata.generation;

/** Ready on all of `replicas` replicas, for its current generation. */
export const readyOnAll = (replicas: number) => (p: PolicyObject) =>
  isCurrent(p) && isTrue(p, 'Ready') && p.status?.ready === `${replicas}/${replicas}`;
/** Stalled, its current generation failed on all of `replicas` replicas. */
export const stalledOnAll = (replicas: number) => (p: PolicyObject) =>
  isCurrent(p) && isTrue(p, 'Stalled') && p.status?.failedReplicas === replicas;
export const readyMessage = (p: PolicyObject) => condition(p, 'Ready')?.message ?? '';

/** The Policy's webhook configuration, or undefined when it has none. */
export const webhookOf = (kc: KubeConfig, policyName: string) =>
  kc
    .makeApiClient(AdmissionregistrationV1Api)
    .readValidatingWebhookConfiguration({ name: `rollcall-${policyName}` })
    .catch((err: { code?: number }): undefined => {
      if (err.code === 404) return undefined;
      throw err;
    });

/**
 * Applies a PolicyServer of rollcall's own image and waits until all its replicas are Ready.
 * Its pods act as POLICY_SERVER_ACCOUNT (prepareIdentities grants it) unless `spec` says otherwise.
 */
export async function startPolicyServer(
  kc: KubeConfig,
  name: string,
  replicas: number,
  spec: Record<string, unknown> = {},
): Promise<void> {
  await apply(
    policyServerManifest(name, { replicas, serviceAccountName: POLICY_SERVER_ACCOUNT, ...spec }),
  );
  await watchUntil<PolicyServer & KubernetesObject>(
    kc,
    POLICY_SERVERS_PATH,
    (s) => s.status?.ready === `${replicas}/${replicas}` && isTrue(s, 'Ready'),
    { fieldSelector: `metadata.name=${name}`, timeoutMs: 90_000 },
  );
}

/** The resourceVersion of a list now: a watch from it sees every later change, none before. */
export async function listVersion(kc: KubeConfig, path: string): Promise<string> {
  const list = (await getJson(kubeConfigTarget(kc), path, { limit: 1 })) as {
    metadata: { resourceVersion: string };
  };
  return list.metadata.resourceVersion;
}

/**
 * Watches one Policy until `done` holds. `seen` receives every state on the way (a watch
 * delivers each update), so a test can assert what never happened.
 */
export function waitPolicy(
  kc: KubeConfig,
  name: string,
  done: (p: PolicyObject) => boolean,
  {
    timeoutMs = 60_000,
    resourceVersion,
    seen,
  }: { timeoutMs?: number; resourceVersion?: string; seen?: (p: PolicyObject) => void } = {},
): Promise<PolicyObject> {
  return watchUntil<PolicyObject>(
    kc,
    POLICIES_PATH,
    (p, phase) => {
      if (phase === 'DELETED') return false;
      seen?.(p);
      return done(p);
    },
    { fieldSelector: `metadata.name=${name}`, timeoutMs, resourceVersion },
  );
}

/** Polls `probe` every `everyMs` until it returns a value other than undefined. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  { timeoutMs = 30_000, everyMs = 200 }: { timeoutMs?: number; everyMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `; last error: ${String(lastError)}` : ''}`,
      );
    await sleep(everyMs);
  }
}

// ---------------------------------------------------------------- the node agent's pods

const nodeAgentSchema = z.object({
  pods: z.record(
    z.string(),
    z.looseObject({ port: z.number(), pid: z.number(), ready: z.boolean().optional() }),
  ),
});
export type NodeAgentPods = z.output<typeof nodeAgentSchema>['pods'];

/** `<cluster dir>/node-agent.json`: the live policy-server processes, by pod. */
export function readNodeAgent(): NodeAgentPods {
  const file = join(testCluster().dir, 'node-agent.json');
  try {
    return nodeAgentSchema.parse(JSON.parse(readFileSync(file, 'utf8'))).pods;
  } catch (err) {
    // Rewritten on every change: a read in the middle of a write is retried by the caller.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new Error(`unreadable ${file}: ${String(err)}`);
  }
}

/** The pods of one PolicyServer, from the apiserver (name → report), with their process. */
export async function serverPods(
  kc: KubeConfig,
  namespace: string,
  server: string,
): Promise<
  {
    name: string;
    deleting: boolean;
    ready: boolean;
    report: ReplicaReport | undefined;
    process: NodeAgentPods[string] | undefined;
  }[]
> {
  const core = kc.makeApiClient(CoreV1Api);
  const pods = await core.listNamespacedPod({
    namespace,
    labelSelector: `${POLICY_SERVER_LABEL}=${server}`,
  });
  const agent = readNodeAgent();
  return pods.items.map((pod) => {
    const name = pod.metadata?.name ?? '';
    const reading = readReplicaReport(pod.metadata?.annotations?.[REPORT_ANNOTATION]);
    return {
      name,
      deleting: pod.metadata?.deletionTimestamp !== undefined,
      ready:
        pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
      report: reading.kind === 'valid' ? reading.report : undefined,
      process: agent[name],
    };
  });
}

/** A live replica: its pod, and the loopback port and pid of its process. */
export interface ReplicaProcess {
  pod: string;
  port: number;
  pid: number;
}

/** The processes of `readyReplicas`. */
export async function replicaProcesses(
  kc: KubeConfig,
  namespace: string,
  server: string,
  replicas: number,
): Promise<ReplicaProcess[]> {
  const pods = await readyReplicas(kc, namespace, server, replicas);
  return pods.map((p) => ({ pod: p.name, port: p.process!.port, pid: p.process!.pid }));
}

/**
 * Waits until the server has exactly `replicas` live, Ready pods, each with a ready process
 * in node-agent.json, and returns them.
 */
export function readyReplicas(
  kc: KubeConfig,
  namespace: string,
  server: string,
  replicas: number,
  timeoutMs = 60_000,
) {
  return until(
    `${replicas} Ready replicas of ${server} with a ready process each`,
    async () => {
      const pods = (await serverPods(kc, namespace, server)).filter((p) => !p.deleting);
      const ok =
        pods.length === replicas && pods.every((p) => p.ready && p.process?.ready !== false);
      return ok && pods.every((p) => p.process) ? pods : undefined;
    },
    { timeoutMs, everyMs: 250 },
  );
}

// ---------------------------------------------------------------- admission

/** What an AdmissionReview answer says, from a replica or from the apiserver. */
export interface Verdict {
  allowed: boolean;
  /** The HTTP status (the apiserver's; for a replica, the review's status.code). */
  code: number;
  message: string;
  warnings: string[];
  ms: number;
}

/** An AdmissionReview v1 for creating `object` (a namespaced core/v1 object). */
export function admissionReview(
  object: Obj,
  { resource, namespace }: { resource: string; namespace: string },
): Record<string, unknown> {
  const [group, version] = object.apiVersion?.includes('/')
    ? object.apiVersion.split('/')
    : ['', object.apiVersion ?? 'v1'];
  const kind = { group, version, kind: object.kind };
  const gvr = { group, version, resource };
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: randomUUID(),
      kind,
      resource: gvr,
      requestKind: kind,
      requestResource: gvr,
      name: object.metadata?.name,
      namespace,
      operation: 'CREATE',
      userInfo: { username: 'rollcall-e2e', groups: ['system:authenticated'] },
      object: { ...object, metadata: { ...object.metadata, namespace } },
      oldObject: null,
      dryRun: true,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
    },
  };
}

const reviewResponseSchema = z.object({
  response: z.looseObject({
    uid: z.string(),
    allowed: z.boolean(),
    status: z
      .looseObject({ code: z.number().optional(), message: z.string().optional() })
      .optional(),
    warnings: z.array(z.string()).optional(),
  }),
});

/** TLS to a replica as the apiserver does it: the server's CA, the Service's DNS name. */
export interface ReplicaTls {
  ca: string;
  servername: string;
}

/** The CA and DNS name a PolicyServer's replicas serve with (the managed serving Secret). */
export async function replicaTls(
  kc: KubeConfig,
  namespace: string,
  server: string,
): Promise<ReplicaTls> {
  const secret = await kc
    .makeApiClient(CoreV1Api)
    .readNamespacedSecret({ name: `policy-server-${server}-tls`, namespace });
  const ca = secret.data?.['ca.crt'];
  if (!ca) throw new Error(`Secret policy-server-${server}-tls has no ca.crt`);
  return {
    ca: Buffer.from(ca, 'base64').toString('utf8'),
    servername: `policy-server-${server}.${namespace}.svc`,
  };
}

/** POSTs a review to one replica (127.0.0.1:port) and reads its answer. */
export async function callReplica(
  port: number,
  path: string,
  review: Record<string, unknown>,
  tls: ReplicaTls,
  timeoutMs = 35_000,
): Promise<Verdict & { httpStatus: number }> {
  const started = performance.now();
  const { status, body } = await httpsJson(
    {
      host: '127.0.0.1',
      port,
      path,
      method: 'POST',
      ca: tls.ca,
      servername: tls.servername,
      headers: { 'content-type': 'application/json' },
      timeout: timeoutMs,
    },
    JSON.stringify(review),
  );
  const ms = performance.now() - started;
  if (status !== 200) throw new Error(`POST ${path} on port ${port} answered ${status}: ${body}`);
  const parsed = reviewResponseSchema.parse(JSON.parse(body));
  const r = parsed.response;
  return {
    httpStatus: status,
    allowed: r.allowed,
    code: r.status?.code ?? (r.allowed ? 200 : 403),
    message: r.status?.message ?? '',
    warnings: r.warnings ?? [],
    ms,
  };
}

/**
 * Creates `object` through the apiserver with `dryRun=All`: admission runs (webhooks with
 * sideEffects None are called), nothing is stored. A raw request, because the verdict's
 * warnings travel in `Warning` response headers that client-node does not expose.
 */
export async function dryRunCreate(
  kc: KubeConfig,
  collectionPath: string,
  object: Obj,
): Promise<Verdict> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const url = new URL(`${cluster.server}${collectionPath}`);
  url.searchParams.set('dryRun', 'All');
  const options: RequestOptions = {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
  };
  await kc.applyToHTTPSOptions(options);
  const started = performance.now();
  const { status, body, headers } = await httpsJson(
    {
      ...options,
      host: url.hostname,
      port: url.port,
      path: `${url.pathname}${url.search}`,
      timeout: 60_000,
    },
    JSON.stringify(object),
  );
  const ms = performance.now() - started;
  let message = '';
  try {
    const parsed = JSON.parse(body) as { kind?: string; message?: unknown };
    if (parsed.kind === 'Status' && typeof parsed.message === 'string') message = parsed.message;
  } catch {
    message = body.slice(0, 500);
  }
  return {
    allowed: status >= 200 && status < 300,
    code: status,
    message,
    warnings: parseWarnings(headers['warning']),
    ms,
  };
}

/** RFC 7234 Warning headers as the apiserver writes them: `299 - "text"`. */
export function parseWarnings(header: string | string[] | undefined): string[] {
  const values = header === undefined ? [] : Array.isArray(header) ? header : [header];
  return values.flatMap((value) =>
    [...value.matchAll(/\d{3} \S+ "((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!.replace(/\\(.)/g, '$1')),
  );
}

/** Dry-runs until `done` holds for the verdict: the apiserver picks up a webhook a moment after it is written. */
export function untilVerdict(
  kc: KubeConfig,
  collectionPath: string,
  object: Obj,
  done: (v: Verdict) => boolean,
  timeoutMs = 30_000,
): Promise<Verdict> {
  let last: Verdict | undefined;
  return until(
    `a dry-run create of ${object.kind} ${object.metadata?.name} to be judged as expected (last: ${JSON.stringify(last)})`,
    async () => {
      last = await dryRunCreate(kc, collectionPath, object);
      return done(last) ? last : undefined;
    },
    { timeoutMs, everyMs: 250 },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; last verdict: ${JSON.stringify(last)}`);
  });
}

/** A request whose body length is declared up front. */
function httpsJson(options: RequestOptions, body: string): Promise<HttpsAnswer> {
  const headers = { ...options.headers, 'content-length': Buffer.byteLength(body) };
  return httpsRequest({ ...options, headers }, body);
}
