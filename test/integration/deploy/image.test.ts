// rollcall's image, built and run. tooling/image/build.ts builds it with podman from the Dockerfile on
// a local base made from Debian's packages (or reuses the build when the checkout has not
// changed since: CI's build step runs just before), and tooling/image/chroot-run.ts runs its
// entrypoint without a container runtime: as uid 1000 in its own pid and mount namespaces,
// the root read-only and only /tmp writable, as deploy/ runs it. The watcher, the worker and
// a policy server from the image then reconcile a Policy on the local cluster and Redis: the
// policy server's pod is kwok's (its image is not the one the node agent runs), its process is
// the image's, and it publishes its report on that pod as it would in a real cluster.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, type V1ValidatingWebhookConfiguration } from '@kubernetes/client-node';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { freePort } from '../../../tooling/cluster/ports.ts';
import { createCa, issueServingCertificate } from '../../../lib/certs/index.ts';
import { ensureImage, megabytes, type BuiltImage } from '../../../tooling/image/build.ts';
import {
  mountImage,
  runFromImage,
  startFromImage,
  type ImageProcess,
  type MountedImage,
  type StartOptions,
} from '../../../tooling/image/chroot-run.ts';
import { contextFiles } from '../../../tooling/image/docker-context.ts';
import { podman } from '../../../tooling/image/podman.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { testCluster, testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import { waitForStatus } from '../../support/poll.ts';
import { redisUrl } from '../../support/redis.ts';
import { deleteRollcallObjects, ensureNamespace, logDir, testDb } from '../../support/rollcall.ts';
import {
  admissionReview,
  apply,
  callReplica,
  isCurrent,
  isTrue,
  serverPods,
  until,
  waitPolicy,
  WEBHOOKS_PATH,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = uniqueName('rollcall-image').slice(0, 40);
const log = (line: string) => console.log(`# ${line}`);

/** GET over HTTPS from a replica, verified as the apiserver would (its CA, the Service's name). */
function httpsGet(port: number, path: string, ca: string, servername: string) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, ca, servername, agent: false, timeout: 5000 },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += String(c)));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe("rollcall's image", () => {
  let built: BuiltImage;
  let image: MountedImage;
  const processes: ImageProcess[] = [];

  /** Starts `rollcall <args>` from the image, its output in the test logs as <name>.log. */
  const startRole = (name: string, args: string[], options: Omit<StartOptions, 'output'>) => {
    mkdirSync(logDir, { recursive: true });
    const output = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' });
    const started = startFromImage(image, args, { ...options, output });
    processes.push(started);
    return started;
  };

  before(async () => {
    built = await ensureImage({}, log);
    image = mountImage(built.ref);
    const base = Number(podman(['image', 'inspect', '--format', '{{.Size}}', built.base]));
    const nodeModules = spawnSync('du', ['-sb', join(image.root, 'app', 'node_modules')], {
      encoding: 'utf8',
    }).stdout.split('\t')[0];
    log(
      `image ${built.ref}: ${megabytes(built.size)} (its base ${megabytes(base)}), node_modules ${megabytes(Number(nodeModules))}; base ${built.baseSeconds.toFixed(0)} s, build ${built.buildSeconds.toFixed(0)} s`,
    );
  });

  after(async () => {
    await Promise.all(processes.map((p) => p.stop()));
    await deleteRollcallObjects(kc);
    await kc
      .makeApiClient(CoreV1Api)
      .deleteNamespace({ name: namespace })
      .catch(() => {});
    image?.unmount();
  });

  test('holds the build context and its production dependencies only: no cluster/, bench/, test/ or demo', () => {
    const app = join(image.root, 'app');
    for (const absent of ['cluster', 'bench', 'test', 'tooling/demo/demo.ts', '.rollcall', '.git'])
      assert.ok(!existsSync(join(app, absent)), `${absent} is not in the image`);
    const listed = spawnSync(
      'find',
      ['.', '-path', './node_modules', '-prune', '-o', '-type', 'f', '-print'],
      {
        cwd: app,
        encoding: 'utf8',
      },
    );
    const files = listed.stdout
      .trim()
      .split('\n')
      .map((f) => f.slice(2))
      .sort();
    assert.deepEqual(files, contextFiles(repoRoot), "/app is the checkout's build context");
    assert.ok(!existsSync(join(app, 'node_modules', 'prettier')), 'no devDependencies');
  });

  test('runs as uid 1000 in its own pid namespace, on a read-only root where only /tmp is writable', async () => {
    const probe = `
      const fs = require('node:fs');
      const write = (p) => { try { fs.writeFileSync(p, 'x'); return 'ok'; } catch (e) { return e.code; } };
      console.log(JSON.stringify({ uid: process.getuid(), gid: process.getgid(), pid: process.pid,
        cwd: process.cwd(), node: process.version, app: write('/app/x'), etc: write('/etc/x'),
        root: write('/x'), tmp: write('/tmp/x'), given: fs.readFileSync('/tmp/given', 'utf8'),
        malloc: [process.env.MALLOC_TRIM_THRESHOLD_, process.env.MALLOC_ARENA_MAX] }));`;
    const { code, output } = await runFromImage(image, ['-e', probe], {
      entrypoint: ['node'],
      files: { given: 'from the test' },
    });
    assert.equal(code, 0, output);
    const seen = JSON.parse(output) as Record<string, unknown>;
    assert.deepEqual(
      { ...seen, node: String(seen.node).split('.')[0] },
      {
        uid: 1000,
        gid: 1000,
        pid: 1,
        cwd: '/app',
        node: 'v24',
        app: 'EROFS',
        etc: 'EROFS',
        root: 'EROFS',
        tmp: 'ok',
        given: 'from the test',
        malloc: ['131072', '2'],
      },
    );
    const demo = await runFromImage(image, ['demo']);
    assert.equal(demo.code, 2);
    assert.match(demo.output, /runs from a checkout of the repository/);
  });

  test('its roles start from the compile cache the build filled: no TypeScript is stripped or compiled at start', async () => {
    const load = `
      for (const m of ['control-plane/roles.ts', 'cli/serve.ts', 'data-plane/main.ts'])
        await import('/app/' + m);
      console.log('rss ' + process.memoryUsage().rss);`;
    const run = (env: Record<string, string>) =>
      runFromImage(image, ['--input-type=module', '-e', load], { entrypoint: ['node'], env });
    const cached = await run({ NODE_DEBUG_NATIVE: 'COMPILE_CACHE' });
    assert.equal(cached.code, 0, cached.output);
    // The -e module itself is the only one the cache cannot hold.
    const lines = cached.output
      .split('\n')
      .filter((l) => l.includes('file:///app/') && !l.includes('[eval'));
    assert.ok(
      lines.some((l) =>
        /retrieving transpile cache for StrippedTypeScript .*\.\.\.success/.test(l),
      ),
      cached.output.slice(0, 2000),
    );
    assert.deepEqual(
      lines.filter((l) => /no transpile cache|not initialized|rejected|denied|failed/.test(l)),
      [],
      'every module of the roles is read from the cache: its JavaScript and its V8 code',
    );
    const uncached = await run({ NODE_DISABLE_COMPILE_CACHE: '1' });
    const mib = (out: string) => (Number(/^rss (\d+)$/m.exec(out)?.[1]) / 2 ** 20).toFixed(0);
    log(
      `importing the roles: ${mib(cached.output)} MiB from the compile cache, ${mib(uncached.output)} MiB without`,
    );
  });

  test('watcher, worker and policy-server from the image are ready and reconcile a Policy', async () => {
    await ensureNamespace(kc, namespace);
    await installCrds(kc, { info: () => {} });
    const files = { kubeconfig: readFileSync(testCluster().kubeconfig, 'utf8') };
    const env = {
      KUBECONFIG: '/tmp/kubeconfig',
      REDIS_URL: `${redisUrl()}/${testDb()}`,
      ROLLCALL_NAMESPACE: namespace,
      LOG_LEVEL: 'debug',
    };
    const [watcherPort, workerPort, serverPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    startRole(`${namespace}-watcher`, ['watcher'], {
      files,
      env: { ...env, PORT: String(watcherPort), POD_NAME: `${namespace}-watcher` },
    });
    startRole(`${namespace}-worker`, ['worker'], {
      files,
      env: { ...env, PORT: String(workerPort) },
    });
    for (const [role, port] of [
      ['watcher', watcherPort],
      ['worker', workerPort],
    ] as const) {
      const ready = await waitForStatus(
        `http://127.0.0.1:${port}/readyz`,
        200,
        60_000,
        `the ${role}'s /readyz (log: ${logDir}/${namespace}-${role}.log)`,
      );
      log(`${role} from the image: /readyz ${ready.status} ${ready.body.trim()}`);
    }

    // A PolicyServer of the built image with its own CA. kwok plays its pod; the image's
    // `rollcall policy-server` is the process behind it.
    const ps = 'image';
    const servername = `policy-server-${ps}.${namespace}.svc`;
    const now = new Date();
    const ca = await createCa({ commonName: 'image test CA', validityMs: 3_600_000, now });
    const serving = await issueServingCertificate({
      ca,
      dnsNames: [servername],
      validityMs: 3_600_000,
      now,
    });
    await apply({
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'PolicyServer',
      metadata: { name: ps },
      spec: { image: built.ref, replicas: 1, caBundle: Buffer.from(ca.certPem).toString('base64') },
    });
    const [pod] = await until(
      `the Ready pod of PolicyServer ${ps}`,
      async () => {
        const pods = (await serverPods(kc, namespace, ps)).filter((p) => p.ready && !p.deleting);
        return pods.length === 1 ? pods : undefined;
      },
      { timeoutMs: 60_000, everyMs: 250 },
    );
    startRole(
      `${namespace}-policy-server`,
      ['policy-server', '--address=127.0.0.1', '--tls-dir=/tmp'],
      {
        files: { ...files, 'tls.crt': serving.certPem, 'tls.key': serving.keyPem },
        env: {
          KUBECONFIG: '/tmp/kubeconfig',
          PORT: String(serverPort),
          POD_NAME: pod!.name,
          POD_NAMESPACE: namespace,
          POLICY_SERVER: ps,
          LOG_LEVEL: 'debug',
        },
      },
    );

    // The webhook would send the apiserver to a pod that no process serves: it matches a
    // namespace that does not exist, so that no request is ever sent to it.
    const policy = `${namespace}-owner`;
    await apply({
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'Policy',
      metadata: { name: policy },
      spec: {
        policyServer: ps,
        rules: [
          {
            operations: ['CREATE'],
            apiGroups: [''],
            apiVersions: ['v1'],
            resources: ['configmaps'],
          },
        ],
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': `${namespace}-none` } },
        validations: [
          {
            expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels",
            message: 'configmaps need an owner label',
          },
        ],
      },
    });
    const readyz = await until(
      "the policy server's /readyz 200",
      async () => {
        const r = await httpsGet(serverPort, '/readyz', ca.certPem, servername);
        return r.status === 200 ? r : undefined;
      },
      { timeoutMs: 60_000, everyMs: 250 },
    );
    log(`policy-server from the image: /readyz ${readyz.status} ${readyz.body.trim()}`);

    const ready = await waitPolicy(kc, policy, (p) => isCurrent(p) && isTrue(p, 'Ready'), {
      timeoutMs: 60_000,
    });
    assert.equal(ready.status?.ready, '1/1');
    assert.equal(ready.status?.servedGeneration, 1);
    const hook = await watchUntil<V1ValidatingWebhookConfiguration>(
      kc,
      WEBHOOKS_PATH,
      (w) => w.metadata?.annotations?.['rollcall.dev/served-generation'] === '1',
      { fieldSelector: `metadata.name=rollcall-${policy}`, timeoutMs: 30_000 },
    );
    assert.equal(hook.webhooks?.[0]?.clientConfig.service?.path, `/validate/${policy}/1`);

    // The image's policy server evaluates the CEL it loaded.
    const configMap = (labels: Record<string, string>) => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'judged', labels },
    });
    const tls = { ca: ca.certPem, servername };
    const judge = (labels: Record<string, string>) =>
      callReplica(
        serverPort,
        `/validate/${policy}/1`,
        admissionReview(configMap(labels), { resource: 'configmaps', namespace }),
        tls,
      );
    const denied = await judge({});
    assert.equal(denied.allowed, false);
    assert.equal(denied.message, 'configmaps need an owner label');
    assert.equal((await judge({ owner: 'image-test' })).allowed, true);
  });
});
