// The bundled Redis and its Sentinels refuse a client without the password, run as the
// manifests run them: each rendering's (deploy/ and its components, the chart and its modes)
// Redis and Sentinel containers, their args, env and start scripts as rendered, on the local
// redis-server, with the Secret's value where the kubelet puts it. Only where a process
// listens, keeps its files and finds its peers is local. The attack: a client that reaches
// Redis without the password (a pod the NetworkPolicy lets through, or any pod where the CNI
// does not enforce it) reads NOAUTH and writes nothing. The watcher's and workers' own wiring
// (REDIS_URL, REDIS_PASSWORD, REDIS_SENTINEL_PASSWORD, read by parseConfig as the roles do)
// logs in, and so do the probes and the replicas.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { parseAllDocuments } from 'yaml';
import { parseConfig } from '../../../control-plane/config.ts';
import { createRedisClient, type RedisClient } from '../../../lib/redis/client.ts';
import { freePort } from '../../../tooling/cluster/ports.ts';
import {
  ensureRedisSentinel,
  ensureRedisServer,
  stopChild,
} from '../../../tooling/cluster/redis.ts';
import { ensureSystemPackages } from '../../../tooling/cluster/system-packages.ts';
import { testCluster } from '../../support/kube.ts';
import {
  build,
  chartDir,
  helmRun,
  kubectlOk,
  kubectlRun,
  NAMESPACE,
  renderChart,
  type Manifest,
} from './manifests.ts';

type EnvVar = {
  name: string;
  value?: string;
  valueFrom?: {
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    fieldRef?: { fieldPath: string };
  };
};
type Container = {
  name: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  readinessProbe?: { exec?: { command: string[] } };
  volumeMounts?: { name: string; mountPath: string }[];
};
/** Secret name → key → value, as the kubelet reads them. */
type Secrets = Record<string, Record<string, string>>;
/** What one way of installing renders, the Secrets its pods read and Redis' password there. */
interface Rendering {
  name: string;
  objects: Manifest[];
  secrets: Secrets;
  password: string;
}

const ROLES = ['watcher', 'worker'] as const;
const dir = () => join(testCluster().dir, 'redis-auth');
const running: ChildProcess[] = [];
after(async () => {
  await Promise.all(running.map(stopChild));
});

/** The Secrets the chart renders itself (its generated password). */
function renderedSecrets(objects: Manifest[]): Secrets {
  const secrets: Secrets = {};
  for (const m of objects.filter((o) => o.kind === 'Secret'))
    secrets[m.metadata.name] = Object.fromEntries(
      Object.entries((m.data ?? {}) as Record<string, string>).map(([k, v]) => [
        k,
        Buffer.from(v, 'base64').toString('utf8'),
      ]),
    );
  return secrets;
}

function containerOf(objects: Manifest[], kind: string, name: string, container: string) {
  const w = objects.find((m) => m.kind === kind && m.metadata.name === name);
  assert.ok(w, `${kind}/${name} is rendered`);
  const spec = (w.spec as { template: { spec: { containers: Container[] } } }).template.spec;
  const c = spec.containers.find((x) => x.name === container);
  assert.ok(c, `${kind}/${name} has a container ${container}`);
  return c;
}

/** The kubelet's `$(VAR)` expansion in args and env values: `$$` is a `$`, unknown names stay. */
const expand = (text: string, env: Record<string, string>) =>
  text.replace(/\$\$|\$\(([A-Za-z_][-._A-Za-z0-9]*)\)/g, (whole, name?: string) =>
    name === undefined ? '$' : (env[name] ?? whole),
  );

/**
 * A container's environment as the kubelet builds it, in order. A required Secret key that is
 * missing keeps the container from starting (CreateContainerConfigError): it fails the test.
 */
function podEnv(c: Container, secrets: Secrets, podName: string): Record<string, string> {
  const fields: Record<string, string> = {
    'metadata.namespace': NAMESPACE,
    'metadata.name': podName,
  };
  const env: Record<string, string> = {};
  for (const v of c.env ?? []) {
    const ref = v.valueFrom?.secretKeyRef;
    const field = v.valueFrom?.fieldRef?.fieldPath;
    if (ref) {
      const value = secrets[ref.name]?.[ref.key];
      if (value !== undefined) env[v.name] = value;
      else assert.ok(ref.optional, `${c.name}: Secret ${ref.name} has no key ${ref.key}`);
    } else if (field) {
      assert.ok(fields[field] !== undefined, `${c.name}: ${v.name} from ${field}`);
      env[v.name] = fields[field];
    } else env[v.name] = expand(v.value ?? '', env);
  }
  return env;
}

/** Every password reaches a container from a Secret it must have: none is written down. */
function assertPasswordsFromSecrets(c: Container) {
  for (const v of c.env ?? [])
    if (/PASSWORD|AUTH/.test(v.name)) {
      const ref = v.valueFrom?.secretKeyRef;
      assert.ok(ref && v.value === undefined, `${c.name}: ${v.name} comes from a Secret`);
      assert.notEqual(ref.optional, true, `${c.name}: without ${ref.name} it does not start`);
    }
}

/** The first line of Redis' reply to one command, over a plain socket: `+PONG`, `-NOAUTH ...`. */
function reply(port: number, ...args: string[]): Promise<string> {
  const request = `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let text = '';
    socket.setTimeout(3000, () => socket.destroy(new Error('no reply within 3 s')));
    socket.on('error', reject);
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk) => {
      text += chunk.toString();
      const end = text.indexOf('\r\n');
      if (end < 0) return;
      socket.destroy();
      resolve(text.slice(0, end));
    });
  });
}

/** Starts a Redis process and waits until it answers anything (NOAUTH is an answer). */
async function start(command: string, args: string[], port: number, name: string) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.push(child);
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) assert.fail(`${name} exited: ${output.slice(-2000)}`);
    if (await reply(port, 'PING').catch(() => undefined)) return;
    if (Date.now() > deadline) assert.fail(`${name} does not answer: ${output.slice(-2000)}`);
    await sleep(50);
  }
}

/** The attack: a client without the password can neither read, nor write, nor reconfigure. */
async function assertRefusesStrangers(port: number, what: string, commands: string[][]) {
  for (const command of [['PING'], ...commands])
    assert.match(
      await reply(port, ...command),
      /^-NOAUTH /,
      `${what} answers ${command.join(' ')} from a client without the password`,
    );
}

/** The container's exec readiness probe, as the kubelet runs it in the container, on `port`. */
async function assertProbeAnswers(c: Container, env: Record<string, string>, port: number) {
  const [cli, ...args] = c.readinessProbe?.exec?.command ?? [];
  assert.equal(cli, 'redis-cli', `${c.name}'s readiness probe`);
  const at = args.indexOf('-p');
  if (at >= 0) args.splice(at, 2);
  const redisCli = ensureSystemPackages(
    [{ command: 'redis-cli', debianPackage: 'redis-tools', neededBy: 'the probes' }],
    () => {},
  ).get('redis-cli')!;
  const out = spawnSync(redisCli, ['-p', String(port), ...args], { env, encoding: 'utf8' });
  assert.equal(out.stdout.trim(), 'PONG', `${c.name}'s probe: ${out.stdout} ${out.stderr}`);
}

/**
 * The watcher and the workers, configured from their env as the pods get it (REDIS_URL's
 * addresses made local), write to Redis; a write through the Sentinels lands on the primary.
 */
async function assertRolesWrite(r: Rendering, local: (url: string) => string, primary: number) {
  for (const role of ROLES) {
    const c = containerOf(r.objects, 'Deployment', `rollcall-${role}`, role);
    assertPasswordsFromSecrets(c);
    const env = podEnv(c, r.secrets, `rollcall-${role}-0`);
    const config = parseConfig([], { ...env, REDIS_URL: local(env.REDIS_URL ?? '') });
    const client: RedisClient = createRedisClient(config.redisUrl, {
      lazyConnect: true,
      maxRetriesPerRequest: 1,
    });
    client.on('error', () => {});
    try {
      await client.connect();
      assert.equal(await client.set(`auth-test:${role}`, r.name), 'OK', `${r.name}: ${role}`);
    } finally {
      client.disconnect();
    }
    const check = new Redis({ port: primary, password: r.password, lazyConnect: true });
    await check.connect();
    assert.equal(await check.get(`auth-test:${role}`), r.name);
    check.disconnect();
  }
}

const workDir = (...parts: string[]) => {
  const d = join(dir(), ...parts.map((p) => p.replace(/[^a-z0-9-]+/gi, '-')));
  rmSync(d, { recursive: true, force: true });
  mkdirSync(d, { recursive: true });
  return d;
};

/** One Redis (deploy/'s redis.yaml, the chart's redis.mode bundled), with or without persistence. */
async function runBundled(r: Rendering) {
  const c = containerOf(r.objects, 'StatefulSet', 'rollcall-redis', 'redis');
  assertPasswordsFromSecrets(c);
  assert.equal(c.command, undefined, "the image's entrypoint runs the args");
  const env = podEnv(c, r.secrets, 'rollcall-redis-0');
  const [server, ...args] = (c.args ?? []).map((a) => expand(a, env));
  assert.equal(server, 'redis-server');
  const port = await freePort();
  // The rendered flags as they are, but where it keeps files (its volume) and listens.
  replaceAfter(args, '--dir', ['/data'], [workDir(r.name)]);
  const local = ['--port', String(port), '--bind', '127.0.0.1'];
  await start(await ensureRedisServer(), [...args, ...local], port, `${r.name} Redis`);
  await assertRefusesStrangers(port, `${r.name} Redis`, [
    ['LPUSH', 'rollcall:reconcile:wait', 'forged'],
    ['CONFIG', 'SET', 'requirepass', ''],
  ]);
  await assertProbeAnswers(c, env, port);
  await assertRolesWrite(
    r,
    (url) => {
      assert.equal(url, 'redis://rollcall-redis:6379');
      return `redis://127.0.0.1:${port}`;
    },
    port,
  );
}

/**
 * Runs a start script of redis.mode sentinel as the pod would, with stand-ins for what only
 * the cluster has: the pod's hostname, the Sentinels' DNS names (`redis-cli` answers `primary`,
 * or nothing: a fresh install) and the server it execs, which records its arguments. Returns
 * those arguments and the REDISCLI_AUTH the script's redis-cli saw.
 */
function runScript(r: Rendering, c: Container, pod: string, primary = '') {
  const d = workDir(r.name, pod);
  const scripts = r.objects.find(
    (m) => m.kind === 'ConfigMap' && m.metadata.name.startsWith('rollcall-redis-scripts'),
  )?.data as Record<string, string>;
  const [sh, path] = c.command ?? [];
  assert.equal(sh, 'sh');
  assert.ok(
    c.volumeMounts?.some((v) => v.mountPath === '/data'),
    'an emptyDir on /data',
  );
  const script = join(d, 'script.sh');
  writeFileSync(script, scripts[path!.replace(/^\/scripts\//, '')]!.replaceAll('/data', d));
  const bin = join(d, 'bin');
  mkdirSync(bin);
  const stubs = {
    hostname: `echo ${pod}`,
    'redis-cli': `printf %s "$REDISCLI_AUTH" > ${d}/cli-auth; [ -z "${primary}" ] || echo ${primary}`,
    'redis-server': `printf '%s\\0' "$@" > ${d}/args`,
    'redis-sentinel': `printf '%s\\0' "$@" > ${d}/args`,
  };
  for (const [name, body] of Object.entries(stubs)) {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  }
  const env = podEnv(c, r.secrets, pod);
  const out = spawnSync('sh', [script], {
    env: { ...env, PATH: `${bin}:/usr/bin:/bin` },
    encoding: 'utf8',
  });
  assert.equal(out.status, 0, `${pod}: ${out.stderr}`);
  const args = readFileSync(join(d, 'args'), 'utf8').split('\0').slice(0, -1);
  return { args, env, dir: d, cliAuth: readFileSync(join(d, 'cli-auth'), 'utf8') };
}

/** Replaces the value after `flag` (asserting what it was). */
function replaceAfter(args: string[], flag: string, was: string[], now: string[]) {
  const at = args.indexOf(flag);
  assert.deepEqual(args.slice(at + 1, at + 1 + was.length), was, flag);
  args.splice(at + 1, was.length, ...now);
}

/** redis.mode sentinel: a primary, a replica and a Sentinel, from the start scripts. */
async function runSentinel(r: Rendering) {
  const [server, sentinel] = [await ensureRedisServer(), await ensureRedisSentinel()];
  const redis = containerOf(r.objects, 'StatefulSet', 'rollcall-redis', 'redis');
  assertPasswordsFromSecrets(redis);
  const ports = { primary: await freePort(), replica: await freePort() };
  const local = (port: number, d: string) => [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    d,
  ];

  const first = runScript(r, redis, 'rollcall-redis-0');
  await start(
    server,
    [...first.args, ...local(ports.primary, first.dir)],
    ports.primary,
    'primary',
  );
  await assertRefusesStrangers(ports.primary, `${r.name} primary`, [
    ['LPUSH', 'rollcall:reconcile:wait', 'forged'],
    ['REPLICAOF', '127.0.0.1', '1'],
  ]);
  await assertProbeAnswers(redis, first.env, ports.primary);
  assert.equal(first.cliAuth, r.password, 'redis.sh asks the Sentinels with the password');

  // The replica finds the primary (as a Sentinel names it) and logs in there with masterauth.
  const second = runScript(r, redis, 'rollcall-redis-1', '127.0.0.1');
  replaceAfter(
    second.args,
    '--replicaof',
    ['127.0.0.1', '6379'],
    ['127.0.0.1', String(ports.primary)],
  );
  // Announced by a name only the cluster resolves: the Sentinel here needs an address.
  replaceAfter(
    second.args,
    '--replica-announce-ip',
    [`rollcall-redis-1.rollcall-redis-nodes.${NAMESPACE}.svc`],
    ['127.0.0.1'],
  );
  await start(
    server,
    [...second.args, ...local(ports.replica, second.dir)],
    ports.replica,
    'replica',
  );
  await assertRefusesStrangers(ports.replica, `${r.name} replica`, [['GET', 'x']]);
  const replica = new Redis({ port: ports.replica, password: r.password, lazyConnect: true });
  await replica.connect();
  await waitUntil('the replica to sync with the primary', async () =>
    /master_link_status:up/.test(await replica.info('replication')),
  );
  replica.disconnect();

  const s = containerOf(r.objects, 'StatefulSet', 'rollcall-redis-sentinel', 'sentinel');
  assertPasswordsFromSecrets(s);
  const ran = runScript(r, s, 'rollcall-redis-sentinel-0');
  const conf = ran.args[0]!;
  const sentinelPort = await freePort();
  const text = readFileSync(conf, 'utf8');
  const monitor = `sentinel monitor rollcall rollcall-redis-0.rollcall-redis-nodes.${NAMESPACE}.svc 6379 2`;
  assert.ok(text.includes(monitor), text);
  writeFileSync(
    conf,
    text
      .replace(/^port 26379$/m, `port ${sentinelPort}\nbind 127.0.0.1`)
      .replace(monitor, `sentinel monitor rollcall 127.0.0.1 ${ports.primary} 2`),
  );
  await start(sentinel, [conf], sentinelPort, 'Sentinel');
  await assertRefusesStrangers(sentinelPort, `${r.name} Sentinel`, [
    ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'rollcall'],
    ['SENTINEL', 'SET', 'rollcall', 'down-after-milliseconds', '1'],
    ['SENTINEL', 'REMOVE', 'rollcall'],
  ]);
  assert.equal(ran.cliAuth, r.password, 'sentinel.sh asks the other Sentinels with the password');
  await assertProbeAnswers(s, ran.env, sentinelPort);
  // The Sentinel reads the primary's INFO (auth-pass) and so learns of the replica.
  const asSentinel = new Redis({ port: sentinelPort, password: r.password, lazyConnect: true });
  await asSentinel.connect();
  await waitUntil('the Sentinel to see the replica through the primary', async () => {
    const replicas = (await asSentinel.call('SENTINEL', 'REPLICAS', 'rollcall')) as unknown[];
    return replicas.length === 1;
  });
  asSentinel.disconnect();

  await assertRolesWrite(
    r,
    (url) => {
      const sentinels = [0, 1, 2].map(
        (i) => `rollcall-redis-sentinel-${i}.rollcall-redis-sentinel:26379`,
      );
      assert.equal(url, `redis+sentinel://${sentinels.join(',')}/rollcall`);
      return `redis+sentinel://127.0.0.1:${sentinelPort}/rollcall`;
    },
    ports.primary,
  );
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

const here = import.meta.dirname;
/** The chart's rendering, with the Secret of the password it generates. */
const chart = async (name: string, values: string[]): Promise<Rendering> => {
  const objects = await renderChart(values);
  const secrets = renderedSecrets(objects);
  return { name, objects, secrets, password: secrets['rollcall-redis']?.password ?? '' };
};
/** deploy/'s, with the Secret the operator creates as docs/install.md says. */
const kustomize = (name: string, path?: string): Rendering => {
  const password = randomBytes(32).toString('hex');
  const objects = build(path && join(here, path));
  return { name, objects, secrets: { 'rollcall-redis': { password } }, password };
};

describe('Redis refuses a client without the password', { timeout: 180_000 }, () => {
  test('deploy/ (one Redis), and with components/redis-persistence', async () => {
    await runBundled(kustomize('deploy'));
    await runBundled(kustomize('deploy-persistence', 'overlay'));
  });

  test('deploy/ with components/redis-sentinel: the Redis pods, the replicas and the Sentinels', async () => {
    await runSentinel(kustomize('deploy-sentinel', 'overlay-sentinel'));
  });

  test("the chart's redis.mode bundled, with persistence, and sentinel, with the password it generates", async () => {
    const bundled = await chart('chart', []);
    assert.match(
      bundled.password,
      /^[A-Za-z0-9]{32}$/,
      'a random password of 32 letters and digits',
    );
    assert.notEqual(
      bundled.password,
      (await chart('chart-again', [])).password,
      'new at each install',
    );
    await runBundled(bundled);
    await runBundled(
      await chart('chart-persistence', ['--set', 'redis.bundled.persistence.enabled=true']),
    );
    await runSentinel(await chart('chart-sentinel', ['--set', 'redis.mode=sentinel']));
  });

  test('the chart takes redis.auth.existingSecret instead, and renders no Secret of its own', async () => {
    const objects = await renderChart([
      '--set',
      'redis.auth.existingSecret=my-redis',
      '--set',
      'redis.auth.existingSecretKey=pw',
    ]);
    assert.ok(!objects.some((m) => m.kind === 'Secret' && m.metadata.name === 'rollcall-redis'));
    const password = 'chosen-by-you';
    await runBundled({
      name: 'chart-existing',
      objects,
      secrets: { 'my-redis': { pw: password } },
      password,
    });
  });
});

describe("the chart's generated password", () => {
  // Its own namespace: a Secret rollcall-redis that Helm does not own would make chart.test.ts'
  // helm install fail.
  const namespace = 'rollcall-redis-auth';
  after(() => kubectlRun(['delete', 'namespace', namespace, '--ignore-not-found', '--wait=false']));

  test('is kept on upgrades: the chart looks up the installed Secret', async () => {
    kubectlOk(['create', 'namespace', namespace]);
    const installed = randomBytes(16).toString('hex');
    kubectlOk([
      '-n',
      namespace,
      'create',
      'secret',
      'generic',
      'rollcall-redis',
      `--from-literal=password=${installed}`,
    ]);
    const out = await helmRun([
      'template',
      'rollcall',
      chartDir,
      '--namespace',
      namespace,
      '--kubeconfig',
      testCluster().kubeconfig,
      '--dry-run=server',
    ]);
    assert.equal(out.status, 0, out.stderr);
    const objects = parseAllDocuments(out.stdout)
      .map((d) => d.toJS() as Manifest | null)
      .filter((m) => m !== null);
    assert.deepEqual(renderedSecrets(objects)['rollcall-redis'], { password: installed });
  });
});
