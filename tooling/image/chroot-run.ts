// Runs a command from the built image without a container runtime (none can start containers
// on these machines): the image's root filesystem from `podman image mount`, entered with
// `unshare` (its own mount and pid namespaces; the host's network, so loopback reaches the
// local cluster and Redis) and `chroot --userspec` as the image's USER. As the manifests run
// it: the root read-only, /tmp a 64 MiB tmpfs and the only writable place, a minimal /dev, and
// the image's ENTRYPOINT, WORKDIR and ENV (none of the host's environment).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { z } from 'zod';
import { podman } from './podman.ts';

const ImageConfig = z.object({
  Env: z.array(z.string()).default([]),
  Entrypoint: z.array(z.string()).default([]),
  WorkingDir: z.string().default('/'),
  User: z.string().default('0:0'),
});

export interface MountedImage {
  ref: string;
  /** The image's root filesystem on the host (podman's vfs layer directory). */
  root: string;
  config: z.infer<typeof ImageConfig>;
  unmount(): void;
}

export function mountImage(ref: string): MountedImage {
  if (process.getuid?.() !== 0)
    throw new Error(
      "running a role from the image needs root (podman's store, mount and pid namespaces, chroot)",
    );
  const config = ImageConfig.parse(
    JSON.parse(podman(['image', 'inspect', '--format', '{{json .Config}}', ref])),
  );
  const root = podman(['image', 'mount', ref]);
  return { ref, root, config, unmount: () => void podman(['image', 'unmount', ref]) };
}

// Runs as pid 1 of the new pid namespace, in the new mount namespace (unshare makes its mounts
// private: they vanish with it). $1 = image root, $2 = files to put in /tmp, $3 = user:group,
// $4 = working directory, then the command.
const ENTER = `set -e
root=$1; files=$2; user=$3; workdir=$4; shift 4
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755,size=64k tmpfs "$root/dev"
for d in null zero full random urandom; do
  touch "$root/dev/$d"; mount --bind "/dev/$d" "$root/dev/$d"
done
cp -a "$files"/. "$root/tmp/"
chmod 1777 "$root/tmp"
find "$root/tmp" -mindepth 1 -exec chown "$user" {} +
exec chroot --userspec="$user" "$root" /usr/bin/env -u PWD --chdir="$workdir" "$@"`;

export interface ImageProcess {
  child: ChildProcess;
  /** SIGTERM to the command (pid 1 of its namespace) and wait for the namespace to end. */
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Added to the image's ENV. */
  env?: Record<string, string>;
  /** Written to the container's /tmp before the command starts (a kubeconfig, TLS files). */
  files?: Record<string, string>;
  /** Instead of the image's ENTRYPOINT. */
  entrypoint?: readonly string[];
  /** Receives the command's stdout and stderr. */
  output: NodeJS.WritableStream;
}

/** Starts the image's entrypoint (or `entrypoint`) with `args`. */
export function startFromImage(
  image: MountedImage,
  args: readonly string[],
  { env = {}, files = {}, entrypoint = image.config.Entrypoint, output }: StartOptions,
): ImageProcess {
  const staging = mkdtempSync(join(tmpdir(), 'rollcall-image-files-'));
  for (const [name, content] of Object.entries(files))
    writeFileSync(join(staging, name), content, { mode: 0o600 });
  const imageEnv = Object.fromEntries(
    image.config.Env.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
  const child = spawn(
    'unshare',
    [
      '--mount',
      '--pid',
      '--fork',
      '--kill-child=SIGKILL',
      '--',
      '/bin/sh',
      '-c',
      ENTER,
      'enter',
      image.root,
      staging,
      image.config.User,
      image.config.WorkingDir,
      ...entrypoint,
      ...args,
    ],
    {
      env: { ...imageEnv, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  child.stdout?.pipe(output, { end: false });
  child.stderr?.pipe(output, { end: false });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => rmSync(staging, { recursive: true, force: true }));
  return {
    child,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // unshare waits for its child (the command, pid 1 inside): signal the command itself so
      // it shuts down as it would in a pod, and unshare exits with it.
      const pid1 = firstChild(child.pid);
      if (pid1 !== undefined) process.kill(pid1, 'SIGTERM');
      else child.kill('SIGKILL');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Runs a command from the image to its end; resolves with its exit code and output. */
export async function runFromImage(
  image: MountedImage,
  args: readonly string[],
  options: Omit<StartOptions, 'output'> = {},
): Promise<{ code: number | null; output: string }> {
  let output = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      output += chunk.toString();
      done();
    },
  });
  const { child } = startFromImage(image, args, { ...options, output: sink });
  // 'close': the exit code and all of the output.
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  return { code, output };
}

function firstChild(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
    return children === '' ? undefined : Number(children.split(' ')[0]);
  } catch {
    return undefined;
  }
}
