// node bench/admission-cpu.ts [--rate=N] [--seconds=N] [--rounds=N] [--warmup=N]
// [--against=DIR] [--cpu-prof]: the policy server's CPU per admission request, alone (no
// cluster). A process runs the policy server's HTTPS listener, evaluation pool and metrics as
// `rollcall policy-server` wires them, serving the admission bench's six-expression policy
// from memory; this process sends it AdmissionReviews as the apiserver would (the defaulted
// Pod of a dry-run create) over keep-alive HTTPS at a fixed rate, open loop, and reads the
// server's CPU time from /proc around each round. CPU time holds up on a shared machine
// better than latency, but contention still inflates it (cache misses, costlier wake-ups), so
// `--against=DIR` runs a second server from another checkout of rollcall (e.g. main), the two
// taking turns round by round, and compares them pair by pair: the median of the per-pair
// ratios is the figure to read. `--cpu-prof` writes the servers' V8 profiles (main and
// evaluation threads) to .rollcall/bench-admission-cpu/profiles.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { request, type Agent } from 'node:https';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { policySpecSchema } from '../api/v1alpha1.ts';
import { createCa, issueServingCertificate } from '../lib/certs/index.ts';
import type { PoolJob } from '../data-plane/pool.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { openLoop, pooledAgent, summarize, type RawRun, type Target } from './admission-load.ts';
import { admissionReview, benchPod, rollcallPolicy } from './admission-policies.ts';

const args = process.argv.slice(2);
const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1];
const dir = join(repoRoot, '.rollcall', 'bench-admission-cpu');
const policy = 'adm-six';
const generation = 1;

if (args[0] === '--serve') await serve(args[1]!, args[2]!);
else await measure();

/**
 * The server side, from the checkout at `tree`: what `rollcall policy-server` runs per request,
 * minus the cluster (the policy and the request's Namespace come from memory).
 */
async function serve(tree: string, tlsDir: string): Promise<void> {
  setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
  // A checkout from before the layout of lib/ and data-plane/ keeps these under their old names.
  const before: Record<string, string> = {
    'data-plane/': 'policy-server/',
    'lib/logger.ts': 'roles/logger.ts',
  };
  const inTree = (path: string) => {
    if (existsSync(join(tree, path))) return join(tree, path);
    const [prefix, old] = Object.entries(before).find(([p]) => path.startsWith(p)) ?? ['', ''];
    return join(tree, old + path.slice(prefix.length));
  };
  const from = (path: string) => import(pathToFileURL(inTree(path)).href);
  const { startHttpsServer } = (await from(
    'data-plane/https-server.ts',
  )) as typeof import('../data-plane/https-server.ts');
  const { PolicyServerMetrics } = (await from(
    'data-plane/metrics.ts',
  )) as typeof import('../data-plane/metrics.ts');
  const { EvaluationPool } = (await from(
    'data-plane/pool.ts',
  )) as typeof import('../data-plane/pool.ts');
  const { createLogger } = (await from('lib/logger.ts')) as typeof import('../lib/logger.ts');
  // As main.ts wires it, in a checkout that has it (older ones evaluate every request in the pool).
  const inline = existsSync(inTree('data-plane/inline.ts'))
    ? new (
        (await from('data-plane/inline.ts')) as typeof import('../data-plane/inline.ts')
      ).InlineEvaluator({
        onClassified: (key, bound) =>
          process.stderr.write(
            `${basename(tree)}: ${key} ${bound.bounded ? 'bounded: inline' : `not bounded (${bound.reason}): pool`}\n`,
          ),
      })
    : undefined;
  const spec = policySpecSchema.parse(rollcallPolicy(policy, 'adm', 'adm-rollcall').spec);
  const code = { validations: spec.validations };
  const namespace = namespaceObject('adm-rollcall');
  const metrics = new PolicyServerMetrics();
  const pool = new EvaluationPool();
  metrics.watchPool(() => pool.stats());
  const https = await startHttpsServer({
    port: 0,
    address: '127.0.0.1',
    logger: createLogger('info'),
    metrics,
    readiness: () => ({ ready: pool.warm(), detail: '' }),
    admission: {
      target: (name, gen) =>
        name === policy && gen === generation
          ? { kind: 'loaded', key: `uid/${generation}`, spec, code }
          : { kind: 'unknown' },
      namespace: (name) => (name === namespace.metadata.name ? namespace : null),
      evaluate: (job, ms) => pool.evaluate(job, ms),
      ...(inline && { inline: (job: PoolJob) => inline.evaluate(job) }),
    },
  });
  https.setCertificate({
    cert: readFileSync(join(tlsDir, 'tls.crt')),
    key: readFileSync(join(tlsDir, 'tls.key')),
  });
  process.stdout.write(`${https.port}\n`);
  process.once('SIGTERM', () => {
    void https
      .close(100)
      .then(() => pool.close())
      .then(() => process.exit(0));
  });
}

interface Server {
  label: string;
  child: ChildProcess;
  target: Target;
  agent: Agent;
  runs: RawRun[];
  /** CPU ms per answered request, user and kernel, one entry per round. */
  rounds: { user: number; system: number }[];
}

async function startServer(label: string, tree: string, ca: string, profile: boolean) {
  const profiles = join(dir, 'profiles', label);
  const execArgv = profile ? ['--cpu-prof', `--cpu-prof-dir=${profiles}`] : [];
  const child = spawn(
    process.execPath,
    [...execArgv, import.meta.filename, '--serve', tree, join(dir, 'tls')],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`server ${label} exited with code ${code}`)));
    child.stdout.once('data', (d: Buffer) => resolve(Number(String(d).trim())));
  });
  const target: Target = { host: 'localhost', port, tls: { ca } };
  const server: Server = { label, child, target, agent: pooledAgent(target), runs: [], rounds: [] };
  return server;
}

async function measure(): Promise<void> {
  const rate = Number(flag('rate') ?? 200);
  const seconds = Number(flag('seconds') ?? 5);
  const roundCount = Number(flag('rounds') ?? 12);
  const warmupSeconds = Number(flag('warmup') ?? 10);
  const against = flag('against');
  const profile = args.includes('--cpu-prof');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'tls'), { recursive: true });
  const now = new Date();
  const validityMs = 24 * 3600_000;
  const ca = await createCa({ commonName: 'bench-ca', validityMs, now });
  const serving = await issueServingCertificate({ ca, dnsNames: ['localhost'], validityMs, now });
  writeFileSync(join(dir, 'tls', 'tls.crt'), serving.certPem);
  writeFileSync(join(dir, 'tls', 'tls.key'), serving.keyPem);

  const servers = [await startServer('this', repoRoot, ca.certPem, profile)];
  if (against) servers.push(await startServer(basename(against), against, ca.certPem, profile));
  let seq = 0;
  const path = `/validate/${policy}/${generation}`;
  const load = (server: Server, count: number) =>
    openLoop(server.target, server.agent, {
      rate,
      count,
      timeoutMs: 10_000,
      okStatus: 200,
      request: () => ({
        path,
        body: JSON.stringify(apiserverReview(`uid-${++seq}`, `cpu-${seq}`)),
      }),
    });

  // Every request must be an allowed one that the policy evaluated, or the figure means nothing.
  for (const server of servers) {
    const answer = await post(server, path, JSON.stringify(apiserverReview('probe', 'probe')));
    if (answer !== '{"uid":"probe","allowed":true}')
      throw new Error(`server ${server.label} answered the probe with ${answer}`);
  }
  // Warm-up: connections, and the JIT, which at 200/s is still optimizing after a few seconds.
  for (const server of servers) await load(server, rate * warmupSeconds);
  for (let i = 0; i < roundCount; i++) {
    for (const server of i % 2 ? [...servers].reverse() : servers) {
      const before = cpuTimes(server.child.pid!);
      const run = await load(server, rate * seconds);
      const after = cpuTimes(server.child.pid!);
      const n = run.latencies.length;
      server.rounds.push({
        user: (after.user - before.user) / n,
        system: (after.system - before.system) / n,
      });
      server.runs.push(run);
    }
  }
  const fmt = (n: number) => n.toFixed(2);
  /** The q-quantile of `values` (nearest rank). */
  const quantile = (values: number[], q: number) =>
    [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * q))]!;
  console.log(
    `policy server alone, ${rate} requests/s, ${roundCount} rounds of ${seconds} s` +
      ` (load average ${loadavg()[0]!.toFixed(1)} at the end)`,
  );
  for (const server of servers) {
    server.agent.destroy();
    server.child.kill('SIGTERM');
    await new Promise((r) => server.child.once('exit', r));
    const { latency: l, ok, sent, errors } = summarize(rate, server.runs);
    const total = server.rounds.map((r) => r.user + r.system);
    console.log(
      `${server.label.padEnd(8)} CPU ms per request: median ${fmt(quantile(total, 0.5))},` +
        ` lower quartile ${fmt(quantile(total, 0.25))}` +
        ` (kernel ${fmt(
          quantile(
            server.rounds.map((r) => r.system),
            0.5,
          ),
        )}; rounds ${total.map(fmt).join(' ')});` +
        ` latency p50 ${fmt(l.p50)} p99 ${fmt(l.p99)} ms; ok ${ok}/${sent}` +
        (Object.keys(errors).length ? `, errors ${JSON.stringify(errors)}` : ''),
    );
  }
  if (servers.length === 2) {
    // Each round of one server ran right before or after the other's: compare them in pairs.
    const [a, b] = servers.map((server) => server.rounds.map((r) => r.user + r.system));
    const ratios = a!.map((cpu, i) => cpu / b![i]!);
    console.log(
      `${servers[0]!.label} / ${servers[1]!.label}, CPU per request round by round: median` +
        ` ${fmt(quantile(ratios, 0.5))} (quartiles ${fmt(quantile(ratios, 0.25))}–${fmt(quantile(ratios, 0.75))})`,
    );
  }
  if (profile) console.log(`profiles in ${join(dir, 'profiles')}`);
}

/** User and system CPU ms of a process (all its threads), from /proc (USER_HZ 100). */
function cpuTimes(pid: number): { user: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(fields[11]) * 10, system: Number(fields[12]) * 10 };
}

/** Object metadata the apiserver adds on create: uid, timestamp, one managedFields entry. */
function createdMetadata(fieldsV1: Record<string, unknown>) {
  const time = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  return {
    uid: randomUUID(),
    creationTimestamp: time,
    managedFields: [
      {
        manager: 'kubernetes-client-javascript',
        operation: 'Update',
        apiVersion: 'v1',
        time,
        fieldsType: 'FieldsV1',
        fieldsV1,
      },
    ],
  };
}

/** POSTs `body` to `server` and gives the AdmissionReview response of its answer, as JSON. */
function post(server: Server, path: string, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const { host, port } = server.target;
    const req = request({ host, port, path, method: 'POST', agent: server.agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        try {
          resolve(JSON.stringify((JSON.parse(text) as { response: unknown }).response));
        } catch {
          resolve(`${res.statusCode} ${text}`);
        }
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A Namespace as the policy server's watch holds it. */
function namespaceObject(name: string) {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name,
      resourceVersion: '4242',
      labels: { 'kubernetes.io/metadata.name': name },
      ...createdMetadata({
        'f:metadata': { 'f:labels': { '.': {}, 'f:kubernetes.io/metadata.name': {} } },
      }),
    },
    spec: { finalizers: ['kubernetes'] },
    status: { phase: 'Active' },
  };
}

/**
 * What the apiserver sends for a dry-run create of the bench Pod: the Pod as admission leaves
 * it (defaults, managedFields, uid, status; captured from the local cluster's answer to the
 * dry-run create), about 2.3 kB, where the bench's direct subject sends the bare Pod.
 */
function apiserverReview(uid: string, name: string) {
  const namespace = 'adm-rollcall';
  const review = admissionReview(uid, namespace, benchPod(name));
  const pod = review.request.object;
  const fields = (names: string[]) => Object.fromEntries(names.map((n) => [`f:${n}`, {}]));
  const quantities = { '.': {}, ...fields(['cpu', 'memory']) };
  const object = {
    ...pod,
    metadata: {
      ...pod.metadata,
      generation: 1,
      ...createdMetadata({
        'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } },
        'f:spec': {
          'f:containers': {
            'k:{"name":"app"}': {
              '.': {},
              ...fields(['image', 'imagePullPolicy', 'name']),
              'f:resources': { '.': {}, 'f:limits': quantities, 'f:requests': quantities },
              ...fields(['terminationMessagePath', 'terminationMessagePolicy']),
            },
          },
          ...fields(['dnsPolicy', 'enableServiceLinks', 'restartPolicy', 'schedulerName']),
          'f:securityContext': { '.': {}, ...fields(['runAsNonRoot', 'runAsUser']) },
          ...fields(['terminationGracePeriodSeconds']),
        },
      }),
    },
    spec: {
      ...pod.spec,
      containers: pod.spec.containers.map((c) => ({
        ...c,
        imagePullPolicy: 'IfNotPresent',
        resources: { limits: c.resources.limits, requests: c.resources.limits },
        terminationMessagePath: '/dev/termination-log',
        terminationMessagePolicy: 'File',
      })),
      dnsPolicy: 'ClusterFirst',
      enableServiceLinks: true,
      preemptionPolicy: 'PreemptLowerPriority',
      priority: 0,
      restartPolicy: 'Always',
      schedulerName: 'default-scheduler',
      terminationGracePeriodSeconds: 30,
      tolerations: ['not-ready', 'unreachable'].map((condition) => ({
        key: `node.kubernetes.io/${condition}`,
        operator: 'Exists',
        effect: 'NoExecute',
        tolerationSeconds: 300,
      })),
    },
    status: { phase: 'Pending', qosClass: 'Guaranteed' },
  };
  return { ...review, request: { ...review.request, object, oldObject: null } };
}
