// Podman as the image tools run it on these machines: root, the vfs storage driver (no
// overlay mounts needed) and chroot isolation for RUN steps (the OCI runtime is refused
// cgroup and rlimit setup here, so `podman run` cannot start containers). The Debian
// packages are installed on first use when running as root, as npm test does for Redis.
import { spawn, spawnSync } from 'node:child_process';
import { ensureSystemPackages, type SystemNeed } from '../cluster/system-packages.ts';

export type Log = (line: string) => void;

/** Every podman call names the same storage driver: mixing drivers on one store fails. */
export const STORAGE = ['--storage-driver', 'vfs'] as const;

export const imageToolNeeds: readonly SystemNeed[] = [
  { command: 'podman', debianPackage: 'podman', neededBy: 'building and mounting the image' },
  { command: 'mmdebstrap', debianPackage: 'mmdebstrap', neededBy: 'the local base image' },
  { command: 'unshare', debianPackage: 'util-linux', neededBy: 'running roles from the image' },
];

/** Installs what is missing (root + apt-get) or throws a one-line MissingSystemPackageError. */
export function ensureImageTools(log: Log): void {
  ensureSystemPackages(imageToolNeeds, log);
}

/** `podman <args>` with the shared storage flags; returns stdout, throws with stderr. */
export function podman(args: readonly string[]): string {
  const out = spawnSync('podman', [...STORAGE, ...args], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (out.error) throw out.error;
  if (out.status !== 0)
    throw new Error(`podman ${args.join(' ')} failed (exit ${out.status}):\n${out.stderr.trim()}`);
  return out.stdout.trim();
}

export function imageExists(ref: string): boolean {
  return spawnSync('podman', [...STORAGE, 'image', 'exists', ref]).status === 0;
}

/** A long podman command (build, import) with its output streamed to `log`, line by line. */
export function podmanStreaming(args: readonly string[], log: Log): Promise<void> {
  return streaming('podman', [...STORAGE, ...args], log);
}

/** A long command with its output streamed to `log`; a failure carries the output's tail. */
export function streaming(command: string, args: readonly string[], log: Log): Promise<void> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    const forward = (chunk: Buffer) => {
      tail = (tail + chunk.toString()).slice(-4000);
      for (const line of chunk.toString().split('\n')) if (line.trim()) log(`  ${line}`);
    };
    child.stdout.on('data', forward);
    child.stderr.on('data', forward);
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolveRun()
        : reject(new Error(`${command} ${args.join(' ')} exited with ${code}:\n${tail}`)),
    );
  });
}
