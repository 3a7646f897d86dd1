// Runs rollcall as real processes (the same commands the image runs) against the test
// cluster and Redis, and gives tests handles to stop, kill and restart them.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  CoreV1Api,
  CustomObjectsApi,
  AdmissionregistrationV1Api,
  type KubeConfig,
} from '@kubernetes/client-node';
import { repoRoot } from '../../tooling/cluster/paths.ts';
import { freePort } from '../../tooling/cluster/ports.ts';
import { installCrds } from '../../control-plane/install-crds.ts';
import { statusCodeOf } from '../../lib/kube/errors.ts';
import { redisUrl } from './redis.ts';
import { testCluster, testKubeConfig } from './kube.ts';

export const logDir = join(
  process.env.ROLLCALL_LOCAL_DIR ?? join(repoRoot, '.rollcall', 'test'),
  'logs',
);

export interface RollcallProcess {
  name: string;
  child: ChildProcess;
  /** SIGTERM and wait for a clean exit. */
  stop(): Promise<void>;
  /** SIGKILL: the process dies mid-whatever. */
  kill(): Promise<void>;
  /** What it logged at warn and above since it started, oldest first: for failure messages. */
  problems(): { time: number; line: string }[];
}

/**
 * Starts `rollcall <args>` with output in .rollcall/test/logs/<name>.log. `db` picks a Redis
 * database so that test files never share queues or projections.
 */
export function startRollcall(
  name: string,
  args: string[],
  { db, env = {} }: { db: number; env?: Record<string, string> },
): RollcallProcess {
  mkdirSync(logDir, { recursive: true });
  const logFile = join(logDir, `${name}.log`);
  const logStart = existsSync(logFile) ? statSync(logFile).size : 0;
  const log = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'rollcall.ts'), ...args], {
    cwd: repoRoot,
    env: {
      ...process.env,
      KUBECONFIG: testCluster().kubeconfig,
      REDIS_URL: `${redisUrl()}/${db}`,
      LOG_LEVEL: 'debug',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signal = async (sig: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    await exited;
  };
  const problems = () =>
    readFileSync(logFile)
      .subarray(logStart)
      .toString()
      .split('\n')
      .flatMap((text) => {
        const entry = parseLogLine(text);
        if (!entry || entry.level < 40) return [];
        const err = typeof entry.err === 'string' ? entry.err : (entry.err?.message ?? '');
        return [{ time: entry.time, line: `${name}: ${entry.msg ?? ''} ${err}`.slice(0, 300) }];
      });
  return { name, child, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL'), problems };
}

function parseLogLine(
  text: string,
): { level: number; time: number; msg?: string; err?: string | { message?: string } } | undefined {
  try {
    return JSON.parse(text);
  } catch {
    return undefined; // a stack trace or other plain output
  }
}

/**
 * The last `count` distinct warnings and errors of `procs`, in the order each was last logged,
 * one per line with how often it was.
 */
export function lastProblems(procs: readonly RollcallProcess[], count = 25): string {
  const seen = new Map<string, { time: number; times: number }>();
  for (const { time, line } of procs.flatMap((p) => p.problems())) {
    const before = seen.get(line);
    seen.set(line, { time: Math.max(time, before?.time ?? 0), times: (before?.times ?? 0) + 1 });
  }
  return [...seen]
    .sort(([, a], [, b]) => a.time - b.time)
    .slice(-count)
    .map(([line, { time, times }]) => {
      const at = new Date(time).toISOString().slice(11, 23);
      return `${at} ${line}${times > 1 ? ` (×${times})` : ''}`;
    })
    .join('\n  ');
}

/** A rollcall process with an HTTP server, and the URL of a path on it. */
export interface ServingRollcall extends RollcallProcess {
  url(path: string): string;
}

/**
 * Starts `rollcall <role> --namespace <namespace> --port <free port> <args>` once the namespace
 * and the CRDs exist (the way an install leaves them), on this file's Redis database.
 */
export async function startServing(
  name: string,
  role: 'run' | 'watcher' | 'worker',
  namespace: string,
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<ServingRollcall> {
  const kc = testKubeConfig();
  await ensureNamespace(kc, namespace);
  await installCrds(kc, { info: () => {} });
  const port = await freePort();
  const proc = startRollcall(
    name,
    [role, '--namespace', namespace, '--port', String(port), ...args],
    { db: testDb(), env },
  );
  return { ...proc, url: (path) => `http://127.0.0.1:${port}${path}` };
}

/** A fresh Redis database number for this test file. */
export const testDb = () => 1 + (process.pid % 15);

/** Deletes every Policy and PolicyServer, and the webhooks rollcall made, so the next file starts clean. */
export async function deleteRollcallObjects(kc: KubeConfig): Promise<void> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  for (const plural of ['policies', 'policyservers']) {
    const list = (await whileStorageInitializes(() =>
      custom.listClusterCustomObject({ group: 'rollcall.dev', version: 'v1alpha1', plural }),
    )) as { items: { metadata: { name: string } }[] };
    for (const item of list.items)
      await custom
        .deleteClusterCustomObject({
          group: 'rollcall.dev',
          version: 'v1alpha1',
          plural,
          name: item.metadata.name,
        })
        .catch(() => {});
  }
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await admission.deleteCollectionValidatingWebhookConfiguration({
    labelSelector: 'app.kubernetes.io/managed-by=rollcall',
  });
}

/**
 * Retries `call` while the apiserver answers 429: a fresh apiserver does so ("storage is
 * (re)initializing") for a moment after a CRD is established, while its watch cache fills.
 */
async function whileStorageInitializes<T>(call: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await call();
    } catch (err) {
      if (statusCodeOf(err) !== 429 || Date.now() > deadline) throw err;
      await sleep(500);
    }
  }
}

/** Creates the namespace (idempotent). */
export async function ensureNamespace(kc: KubeConfig, name: string): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name } } }).catch((err: { code?: number }) => {
    if (err.code !== 409) throw err;
  });
}
