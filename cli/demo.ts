// `rollcall demo` (npm run demo): rollcall doing its main job on the embedded local cluster.
// Starts the cluster, Redis, rollcall (all-in-one) and the simulated policy servers, applies
// examples/, waits until the policies converged, shows what kubectl shows and a request
// denied by a Ready policy, then stays up until Ctrl-C (or exits at once with --once).
// Every process it started is stopped on the way out, also on errors.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { down, kubectl, status, up, type ClusterState } from '../cluster/cluster.ts';
import { localDir, repoRoot } from '../cluster/paths.ts';
import { issueCertificate } from '../cluster/pki.ts';
import { freePort } from '../cluster/ports.ts';
import { startRedis } from '../cluster/redis.ts';
import { installCrds } from '../roles/install-crds.ts';
import { loadKubeConfig } from '../roles/kube-config.ts';
import type { StatusIo } from './status.ts';

const help = `usage: rollcall demo [--once] [--dir DIR]

Runs rollcall on the embedded local cluster: builds (or reuses) the cluster binaries, starts
the cluster, Redis, rollcall and the simulated policy servers, applies examples/, waits until
the policies converged and shows the result, including a request denied by a Ready policy.

  --once     print everything, then stop and clean up (for CI)
  --dir DIR  the local cluster's directory (default ${relative(process.cwd(), localDir) || localDir})
`;

const NAMESPACE = 'rollcall-system';
const DEMO_NAMESPACE = 'rollcall-demo';
const GOOD = 'require-labels';
const FAILING = ['deny-latest-tag', 'limit-replicas'];
/** Budget for convergence: a cold start of rollcall plus three fake pods takes ~20 s. */
const CONVERGE_MS = 180_000;

/** A child process we started: its name, its log, and a promise that rejects if it dies. */
interface Child {
  name: string;
  log: string;
  process: ChildProcess;
  died: Promise<never>;
}

export async function runDemo(argv: readonly string[], io: StatusIo): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        once: { type: 'boolean' },
        dir: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    io.stderr(`rollcall demo: ${(err as Error).message}\n\n${help}`);
    return 2;
  }
  if (values.help) {
    io.stdout(help);
    return 0;
  }
  const dir = values.dir ?? localDir;
  const out = (s = '') => io.stdout(`${s}\n`);
  const progress = (line: string) => io.stderr(`[demo] ${line}\n`);

  // Cleanups run in reverse order of the starts; Ctrl-C during setup jumps straight to them.
  const cleanups: { what: string; run: () => Promise<void> }[] = [];
  let interrupt: (signal: string) => void = () => {};
  const interrupted = new Promise<never>(
    (_, reject) => (interrupt = (signal) => reject(new Interrupted(signal))),
  );
  interrupted.catch(() => {});
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    if (++signals > 1) {
      io.stderr('[demo] second interrupt: exiting without cleaning up\n');
      process.exit(130);
    }
    progress(`${signal}: stopping (press Ctrl-C again to exit at once)`);
    interrupt(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const children: Child[] = [];
  const guard = <T>(p: Promise<T>): Promise<T> =>
    Promise.race([p, interrupted, ...children.map((c) => c.died)]);

  let code = 0;
  try {
    // 1. The cluster (reused when it already runs; then it is not ours to stop).
    const wasRunning = (await status(dir)).healthy;
    if (!wasRunning) cleanups.push({ what: 'cluster', run: () => down(dir, progress) });
    progress(
      wasRunning ? `reusing the running cluster in ${dir}` : `starting the local cluster in ${dir}`,
    );
    const cluster = await guard(up(dir, progress));

    // 2. Redis (REDIS_URL when set), certificates and ports.
    const redis = await guard(startRedis({ dir: join(dir, 'redis'), log: progress }));
    cleanups.push({ what: 'redis', run: () => redis.stop() });
    const pki = join(dir, 'pki');
    if (!existsSync(join(pki, 'sim-admission.crt')))
      issueCertificate(pki, 'sim-admission', 'rollcall-sim', ['IP:127.0.0.1']);
    const httpPort = await preferredPort(8080, '0.0.0.0');
    const admissionPort = await preferredPort(8443, '127.0.0.1');
    const credentials = `admin:${randomBytes(9).toString('base64url')}`;

    // 3. CRDs and namespace first, so examples/ applies as soon as rollcall runs.
    kubectl(
      cluster,
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } }),
    );
    await guard(installCrds(loadKubeConfig(cluster.kubeconfig), { info: () => {} }));

    // 4. rollcall and the simulated policy servers, as the user would run them.
    const logs = join(dir, 'logs');
    const common = ['--namespace', NAMESPACE, '--kubeconfig', cluster.kubeconfig];
    const rollcall = startChild('rollcall', logs, [
      'run',
      ...common,
      '--install-crds',
      '--redis-url',
      redis.url,
      '--port',
      String(httpPort),
      '--ui-credentials',
      credentials,
      '--webhook-url',
      `https://127.0.0.1:${admissionPort}`,
      '--webhook-ca-file',
      join(pki, 'ca.crt'),
    ]);
    const sim = startChild('sim', logs, [
      'sim',
      ...common,
      '--admission-port',
      String(admissionPort),
      '--tls-cert-file',
      join(pki, 'sim-admission.crt'),
      '--tls-key-file',
      join(pki, 'sim-admission.key'),
    ]);
    for (const child of [rollcall, sim]) {
      children.push(child);
      cleanups.push({ what: child.name, run: () => stopChild(child) });
    }
    progress(
      `rollcall (pid ${rollcall.process.pid}) and the simulated policy servers (pid ${sim.process.pid}) started; logs in ${logs}`,
    );

    // 5. The examples, then wait (kubectl wait watches) until they converged.
    progress('applying examples/');
    out(`$ kubectl apply -f examples/`);
    out(indent(kubectl(cluster, ['apply', '-f', join(repoRoot, 'examples')])));
    progress('waiting for the policies to converge');
    const deadline = Date.now() + CONVERGE_MS;
    const wait = (...args: string[]) => guard(waitFor(cluster, deadline, args));
    await wait('policyserver/default', '--for=condition=Ready');
    await wait(`policy/${GOOD}`, '--for=jsonpath={.status.ready}=3/3');
    await wait(`policy/${GOOD}`, '--for=condition=Ready');
    for (const name of FAILING) {
      await wait(`policy/${name}`, '--for=jsonpath={.status.failedReplicas}=3');
      await wait(`policy/${name}`, '--for=condition=Stalled');
    }
    await wait(`validatingwebhookconfiguration/rollcall-${GOOD}`, '--for=create');

    // 6. What the user sees.
    out();
    out('$ kubectl get policyservers,policies -o wide');
    out(indent(kubectl(cluster, ['get', 'policyservers,policies', '-o', 'wide'])));
    out(explanation);
    out('$ kubectl get validatingwebhookconfigurations -l app.kubernetes.io/managed-by=rollcall');
    out(
      indent(
        kubectl(cluster, [
          'get',
          'validatingwebhookconfigurations',
          '-l',
          'app.kubernetes.io/managed-by=rollcall',
        ]),
      ),
    );
    out(`  Only the Ready policy has a webhook. The Stalled ones block nothing.\n`);

    // 7. Admission for real: the apiserver calls the simulated policy server.
    await guard(untilWebhookActive(cluster));
    out(`$ kubectl run demo-pod --image=nginx -n ${DEMO_NAMESPACE}`);
    const denied = tryKubectl(cluster, ['run', 'demo-pod', '--image=nginx', '-n', DEMO_NAMESPACE]);
    out(indent(denied.output));
    if (denied.ok)
      throw new Error(
        `the pod was admitted, but ${GOOD} should have denied it; see ${join(logs, 'sim.log')}`,
      );
    out(
      `  Denied by ${GOOD}: the apiserver sent an AdmissionReview to the simulated policy server,`,
    );
    out(`  which answered with the policy's verdict and message.\n`);
    tryKubectl(cluster, ['delete', 'deployment', 'web', '-n', 'default', '--ignore-not-found']);
    out('$ kubectl create deployment web --image=nginx:latest -n default');
    const allowed = tryKubectl(cluster, [
      'create',
      'deployment',
      'web',
      '--image=nginx:latest',
      '-n',
      'default',
    ]);
    out(indent(allowed.output));
    if (!allowed.ok)
      throw new Error('creating the deployment failed, but no Ready policy targets deployments');
    out(
      `  Allowed: ${FAILING.join(' and ')} target deployments, but they never loaded, so rollcall`,
    );
    out(
      `  registered no webhook for them. A broken policy shows up as Stalled, it does not lock the cluster.\n`,
    );

    // 8. Where to look next.
    const [user, password] = credentials.split(':') as [string, string];
    out('Try it yourself:');
    out(`  export KUBECONFIG=${cluster.kubeconfig}`);
    out(
      `  alias kubectl='${cluster.binaries.kube} kubectl'   # the kubectl built with the cluster, or use your own`,
    );
    out(
      `  kubectl get policies -w                 # then edit one: kubectl edit policy ${FAILING[0]}`,
    );
    out(`  kubectl describe policy ${FAILING[1]}    # conditions and Events`);
    out('');
    out(`  status page:  http://127.0.0.1:${httpPort}/`);
    out(`  queue UI:     http://127.0.0.1:${httpPort}/queues`);
    out(`                (both ask for user ${user}, password ${password})`);
    out(`  metrics:      http://127.0.0.1:${httpPort}/metrics`);
    out(`  logs:         ${logs}/rollcall.log, ${logs}/sim.log`);
    if (httpPort !== 8080) out(`  (port 8080 was taken, so rollcall listens on ${httpPort})`);
    out('');

    if (values.once) {
      out('--once: stopping everything.');
    } else {
      out('rollcall is running. Press Ctrl-C to stop it and the local cluster.');
      await guard(new Promise<never>(() => {}));
    }
  } catch (err) {
    if (err instanceof Interrupted) {
      code = 130;
    } else {
      code = 1;
      io.stderr(`\nrollcall demo failed: ${err instanceof Error ? err.message : String(err)}\n`);
      io.stderr(`logs: ${join(dir, 'logs')}\n`);
    }
  } finally {
    for (const c of cleanups.reverse()) {
      progress(`stopping ${c.what}`);
      await c.run().catch((err: unknown) => progress(`stopping ${c.what} failed: ${String(err)}`));
    }
    progress('stopped everything the demo started');
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return code;
}

class Interrupted extends Error {}

const explanation = `
  The PolicyServer "default" runs 3 replicas; each one reports which policies it loaded.
  rollcall aggregates those reports like a Deployment aggregates pods:

  - ${GOOD}: READY 3/3, Ready. Every replica loaded it, so its webhook is registered.
  - deny-latest-tag, limit-replicas: READY 0/3, Stalled. Every replica failed to load them
    (a module download error, invalid settings); the MESSAGE column names the pod and the
    error. They will not converge without a change, and they have no webhook.
`;

const indent = (text: string) =>
  text
    .trimEnd()
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n') + '\n';

function tryKubectl(cluster: ClusterState, args: string[]): { ok: boolean; output: string } {
  try {
    return { ok: true, output: kubectl(cluster, args) };
  } catch (err) {
    // cluster.kubectl throws "kubectl ARGS failed: STDERR"; show only what kubectl said.
    return { ok: false, output: (err as Error).message.replace(/^kubectl .*? failed: /s, '') };
  }
}

/** `kubectl wait` (a watch) for one condition, within what is left of the deadline. */
function waitFor(cluster: ClusterState, deadline: number, args: string[]): Promise<void> {
  const seconds = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
  return new Promise((resolve, reject) => {
    const child = spawn(
      cluster.binaries.kube,
      ['kubectl', `--kubeconfig=${cluster.kubeconfig}`, 'wait', ...args, `--timeout=${seconds}s`],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) return resolve();
      let now = '';
      try {
        now = kubectl(cluster, ['get', 'policyservers,policies', '-o', 'wide']);
      } catch {
        // the table is a hint only
      }
      reject(new Error(`gave up waiting for ${args.join(' ')}: ${stderr.trim()}\n${now}`));
    });
  });
}

/**
 * The apiserver picks up a new webhook configuration from its own informer, a moment after
 * it exists. Probe with a server-side dry run (it runs admission, but persists nothing)
 * until the webhook answers, so the real request below is judged by it.
 */
async function untilWebhookActive(cluster: ClusterState): Promise<void> {
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

/** The port when it is free, else any free port. */
async function preferredPort(port: number, host: string): Promise<number> {
  const free = await new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
  return free ? port : freePort();
}

function startChild(name: string, logDir: string, args: string[]): Child {
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
async function stopChild(child: Child): Promise<void> {
  const p = child.process;
  if (p.exitCode !== null || p.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => p.once('exit', () => resolve()));
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}
