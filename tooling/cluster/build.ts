// Builds the local control plane from the Go module proxy: one multi-call `kube` binary
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) from the module
// in tooling/cluster/go, and kwok from its own module. Outputs are cached by their inputs.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { cacheDir, repoRoot } from './paths.ts';

export const kubernetesVersion = 'v1.37.2';
export const kwokVersion = 'v0.8.0';
/** Helm, for the chart's tests (charts/rollcall); from its module like kwok. */
export const helmVersion = 'v3.22.0';

const goModuleDir = join(import.meta.dirname, 'go');

export interface Binaries {
  /** The multi-call binary: `kube <component> [flags]`. */
  kube: string;
  kwok: string;
  /** Where kwok's published stage definitions live (inside its module). */
  kwokStageDir: string;
}

type Log = (line: string) => void;

export function goVersion(): string {
  const go = spawnSync('go', ['env', 'GOVERSION'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    throw new Error(
      'Go is required to build the local cluster but `go` was not found on PATH. ' +
        'Install Go 1.26 or newer (https://go.dev/doc/install) and run this again.',
    );
  }
  return go.stdout.trim();
}

function inputsKey(go: string): string {
  const hash = createHash('sha256').update(go).update(kwokVersion);
  for (const file of ['go.mod', 'go.sum', 'main.go']) {
    hash.update(readFileSync(join(goModuleDir, file)));
  }
  return `${kubernetesVersion}-kwok-${kwokVersion}-${hash.digest('hex').slice(0, 12)}`;
}

/** Returns the cached binaries, building them first when the inputs changed. */
export async function ensureBinaries(log: Log = console.error): Promise<Binaries> {
  const go = goVersion();
  const outDir = join(cacheDir, 'bin', inputsKey(go));
  const kube = join(outDir, 'kube');
  const kwok = join(outDir, 'kwok');
  mkdirSync(outDir, { recursive: true });

  if (!existsSync(kube)) {
    log(
      `building kube ${kubernetesVersion} (etcd, apiserver, controller manager, scheduler, kubectl) with ${go}`,
    );
    log('a cold build takes 10-20 minutes on 2 cores; later runs reuse the cache');
    const [major, minor] = kubernetesVersion.slice(1).split('.');
    const x = (v: string) => `-X k8s.io/component-base/version.${v}`;
    const ldflags = [
      '-s -w',
      `${x('gitVersion')}=${kubernetesVersion}`,
      `${x('gitMajor')}=${major}`,
      `${x('gitMinor')}=${minor}`,
      `${x('gitTreeState')}=clean`,
      `-X k8s.io/client-go/pkg/version.gitVersion=${kubernetesVersion}`,
    ].join(' ');
    await goBuild(
      ['build', '-trimpath', '-ldflags', ldflags, '-o', `${kube}.partial`, '.'],
      goModuleDir,
      'kube',
      log,
    );
    renameSync(`${kube}.partial`, kube);
  }

  if (!existsSync(kwok)) {
    log(`building kwok ${kwokVersion}`);
    const gobin = join(outDir, 'gobin');
    await goBuild(
      ['install', '-trimpath', '-ldflags', '-s -w', `sigs.k8s.io/kwok/cmd/kwok@${kwokVersion}`],
      repoRoot,
      'kwok',
      log,
      {
        GOBIN: gobin,
      },
    );
    renameSync(join(gobin, 'kwok'), kwok);
    rmSync(gobin, { recursive: true, force: true });
  }

  return { kube, kwok, kwokStageDir: join(kwokModuleDir(), 'kustomize', 'stage') };
}

/** Returns the cached helm binary, building it first (a few minutes cold on 2 cores). */
export async function ensureHelm(log: Log = console.error): Promise<string> {
  const go = goVersion();
  // The Kubernetes version `helm template` and `helm lint` assume without a cluster: Helm's own
  // Makefile sets it from its client-go (v0.37 for helm 3.22); here, the local cluster's.
  const [major, minor] = kubernetesVersion.slice(1).split('.');
  const ldflags = [
    '-s -w',
    `-X helm.sh/helm/v3/internal/version.version=${helmVersion}`,
    ...['pkg/lint/rules', 'pkg/chartutil'].flatMap((pkg) => [
      `-X helm.sh/helm/v3/${pkg}.k8sVersionMajor=${major}`,
      `-X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${minor}`,
    ]),
  ].join(' ');
  const key = createHash('sha256').update(go).update(ldflags).digest('hex').slice(0, 12);
  const outDir = join(cacheDir, 'bin', `helm-${helmVersion}-${key}`);
  const helm = join(outDir, 'helm');
  if (existsSync(helm)) return helm;
  log(`building helm ${helmVersion} with ${go}`);
  const gobin = join(outDir, 'gobin');
  await goBuild(
    ['install', '-trimpath', '-ldflags', ldflags, `helm.sh/helm/v3/cmd/helm@${helmVersion}`],
    repoRoot,
    'helm',
    log,
    { GOBIN: gobin },
  );
  renameSync(join(gobin, 'helm'), helm);
  rmSync(gobin, { recursive: true, force: true });
  return helm;
}

function kwokModuleDir(): string {
  const out = spawnSync('go', ['mod', 'download', '-json', `sigs.k8s.io/kwok@${kwokVersion}`], {
    encoding: 'utf8',
    cwd: repoRoot,
  });
  if (out.status !== 0)
    throw new Error(`go mod download sigs.k8s.io/kwok@${kwokVersion} failed:\n${out.stderr}`);
  return (JSON.parse(out.stdout) as { Dir: string }).Dir;
}

/** Runs a go build, printing how many packages are done every 15 s so a long build shows life. */
export function goBuild(
  args: string[],
  cwd: string,
  what: string,
  log: Log,
  env: Record<string, string> = {},
): Promise<void> {
  return new Promise((resolveBuild, reject) => {
    const started = Date.now();
    const child = spawn('go', [args[0]!, '-v', ...args.slice(1)], {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let packages = 0;
    let tail = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      packages += chunk.split('\n').filter((l) => l && !l.startsWith('go: downloading')).length;
      tail = (tail + chunk).slice(-4000);
    });
    const timer = setInterval(() => {
      log(`  ${what}: ${packages} packages built, ${Math.round((Date.now() - started) / 1000)} s`);
    }, 15_000);
    child.on('error', (err) => {
      clearInterval(timer);
      reject(err);
    });
    child.on('exit', (code) => {
      clearInterval(timer);
      if (code === 0) {
        log(`  ${what}: done in ${Math.round((Date.now() - started) / 1000)} s`);
        resolveBuild();
      } else reject(new Error(`building ${what} failed (go exited ${code}):\n${tail}`));
    });
  });
}

// `npm run helm -- <args>`: the cached helm, built first when missing
// (e.g. `npm run helm -- lint charts/rollcall`).
if (import.meta.main) {
  const helm = await ensureHelm();
  const run = spawnSync(helm, process.argv.slice(2), { stdio: 'inherit' });
  process.exitCode = run.status ?? 1;
}
