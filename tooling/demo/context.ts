// What the demo's steps share: where to print, how to start and stop processes, and the
// state one step leaves for the next (the cluster, Redis, ports). Plus the small kubectl
// and process helpers the steps use.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { POLICY_SERVER_LABEL } from '../../api/constants.ts';
import { kubectl, type ClusterState } from '../cluster/cluster.ts';
import { repoRoot } from '../cluster/paths.ts';
import { freePort } from '../cluster/ports.ts';
import type { StatusIo } from '../../cli/status.ts';

/** rollcall's namespace: the policy-server pods run here. */
export const NAMESPACE = 'rollcall-system';
/** Where the demo's requests go; require-labels governs pods here. */
export const DEMO_NAMESPACE = 'rollcall-demo';
export const SERVER = 'default';
/** `kubectl get` arguments for the pods of the demo's PolicyServer. */
export const SERVER_PODS = ['pods', '-n', NAMESPACE, '-l', `${POLICY_SERVER_LABEL}=${SERVER}`];
export const GOOD = 'require-labels';
/** The failing policies, each a real failure, and what its MESSAGE column must show. */
export const FAILING = {
  'deny-latest-tag': 'a source URL that answers 404',
  'limit-replicas': 'a CEL typo',
  'require-probes': 'a source whose digest does not match',
} as const;

/** A child process the demo started: a promise that rejects if it dies. */
export interface Child {
  name: string;
  log: string;
  process: ChildProcess;
  died: Promise<never>;
}

export interface Demo {
  io: StatusIo;
  /** The cluster's directory. */
  dir: string;
  logs: string;
  once: boolean;
  /** A line of the demo's output (stdout). */
  out(line?: string): void;
  /** A progress line (stderr). */
  progress(line: string): void;
  /** Races `p` against Ctrl-C and the death of any child. */
  guard<T>(p: Promise<T>): Promise<T>;
  /** Registers a cleanup; they run in reverse order on the way out. */
  onExit(what: string, run: () => Promise<void>): void;
  /** Starts `rollcall <args>` with its own log; it is stopped on the way out. */
  startRollcall(name: string, args: string[]): Child;
  /** Filled in by the steps, in order. */
  state: Partial<DemoState>;
}

export interface DemoState {
  cluster: ClusterState;
  redisUrl: string;
  httpPort: number;
  credentials: string;
  /** Base URL of the demo's policy bundle server. */
  bundles: string;
}

/** The state a step needs; a missing one is a bug in the step order. */
export function need<K extends keyof DemoState>(demo: Demo, key: K): DemoState[K] {
  const value = demo.state[key];
  if (value === undefined) throw new Error(`demo step order: ${key} is not set yet`);
  return value as DemoState[K];
}

export const indent = (text: string) =>
  text
    .trimEnd()
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n') + '\n';

export function tryKubectl(cluster: ClusterState, args: string[]): { ok: boolean; output: string } {
  try {
    return { ok: true, output: kubectl(cluster, args) };
  } catch (err) {
    // cluster.kubectl throws "kubectl ARGS failed: STDERR"; show only what kubectl said.
    return { ok: false, output: (err as Error).message.replace(/^kubectl .*? failed: /s, '') };
  }
}

/** `kubectl wait` (a watch) for one condition, within what is left of the deadline. */
export function kubectlWait(
  cluster: ClusterState,
  deadline: number,
  args: string[],
): Promise<void> {
  const seconds = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
  return new Promise((resolve, reject) => {
    const child = spawn(
      cluster.binaries.kube,
      ['kubectl', `--kubeconfig=${cluster.kubeconfig}`, 'wait', ...args, `--timeout=${seconds}s`],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) return resolve();
      const now = tryKubectl(cluster, ['get', 'policyservers,policies', '-o', 'wide']).output;
      reject(new Error(`gave up waiting for ${args.join(' ')}: ${stderr.trim()}\n${now}`));
    });
  });
}

/** The port when it is free, else any free port. */
export async function preferredPort(port: number, host: string): Promise<number> {
  const free = await new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
  return free ? port : freePort();
}

export function startChild(name: string, logDir: string, args: string[]): Child {
  mkdirSync(logDir, { recursive: true });
  const log = join(logDir, `${name}.log`);
  const fd = openSync(log, 'w'); // this run's log only, so a crash shows its own tail
  // Its own process group: Ctrl-C reaches only the demo, which stops the children in order.
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'rollcall.ts'), ...args], {
    cwd: repoRoot,
    stdio: ['ignore', fd, fd],
    detached: true,
  });
  closeSync(fd);
  const died = new Promise<never>((_, reject) =>
    child.once('exit', (code, signal) => {
      const tail = readFileSync(log, 'utf8').trimEnd().split('\n').slice(-8).join('\n');
      reject(
        new Error(`${name} exited (${signal ?? `code ${code}`}); the end of ${log}:\n${tail}`),
      );
    }),
  );
  died.catch(() => {});
  return { name, log, process: child, died };
}

/** SIGTERM, then SIGKILL after 10 s. */
export async function stopChild(child: Child): Promise<void> {
  const p = child.process;
  if (p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => p.once('exit', () => resolve()));
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}
