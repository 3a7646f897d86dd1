// What the local tooling needs from the machine besides npm packages (npm test, the local
// cluster, Redis, the image build): Debian's package is installed on first use when running as
// root; otherwise one line says what to install.
import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

export interface SystemNeed {
  /** The executable looked up on PATH (and in /usr/bin, /usr/sbin, /usr/local/bin). */
  command: string;
  /** The Debian package that provides it. */
  debianPackage: string;
  /** What needs it, for the message. */
  neededBy: string;
}

/** What starting the local cluster needs (Go is checked by its build, Redis by startRedis). */
export const localClusterNeeds: readonly SystemNeed[] = [
  { command: 'openssl', debianPackage: 'openssl', neededBy: 'the local cluster certificates' },
];

/** Thrown when something is missing and cannot be installed here; the message is one line. */
export class MissingSystemPackageError extends Error {
  override name = 'MissingSystemPackageError';
}

/** The absolute path of `command`, or undefined when it is not installed. */
export function findCommand(command: string): string | undefined {
  const dirs = [
    ...(process.env.PATH ?? '').split(delimiter),
    '/usr/bin',
    '/usr/sbin',
    '/usr/local/bin',
  ];
  for (const dir of dirs.filter(Boolean)) {
    const candidate = join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

/**
 * Returns each need's command path, installing the missing ones with apt-get when running as
 * root. Without root (or without apt-get) it throws a MissingSystemPackageError naming them all.
 */
export function ensureSystemPackages(
  needs: readonly SystemNeed[],
  log: (line: string) => void,
  { root = process.getuid?.() === 0 }: { root?: boolean } = {},
): Map<string, string> {
  const missing = needs.filter((need) => !findCommand(need.command));
  if (missing.length > 0) {
    const packages = [...new Set(missing.map((need) => need.debianPackage))];
    const what = missing.map((need) => `${need.command} (${need.neededBy})`).join(', ');
    if (!root || !findCommand('apt-get')) {
      throw new MissingSystemPackageError(
        `missing ${what}: install it first (Debian/Ubuntu: sudo apt-get install -y ${packages.join(' ')})`,
      );
    }
    log(`missing ${what}: installing Debian packages ${packages.join(' ')}`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    for (const args of [
      ['update', '-q'],
      ['install', '-y', '-q', '--no-install-recommends', ...packages],
    ]) {
      const result = spawnSync('apt-get', args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      if (result.status !== 0) {
        const output = `${result.stderr?.toString() ?? ''}`
          .trim()
          .split('\n')
          .slice(-3)
          .join(' / ');
        throw new MissingSystemPackageError(
          `apt-get ${args[0]} failed (exit ${result.status ?? result.signal}) while installing ${packages.join(' ')}: ${output}`,
        );
      }
    }
  }
  const paths = new Map<string, string>();
  for (const need of needs) {
    const path = findCommand(need.command);
    if (!path)
      throw new MissingSystemPackageError(
        `apt-get installed ${need.debianPackage} but ${need.command} is not on PATH`,
      );
    paths.set(need.command, path);
  }
  return paths;
}
