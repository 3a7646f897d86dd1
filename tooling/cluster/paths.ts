import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file lives in <root>/tooling/cluster). */
export const repoRoot = resolve(fileURLToPath(new URL('../..', import.meta.url)));

/**
 * Runtime state of the local cluster: certificates, data, logs, kubeconfig. Gitignored.
 * Absolute, because tools like openssl run with other working directories.
 */
export const localDir = resolve(
  process.env.ROLLCALL_LOCAL_DIR ?? join(repoRoot, '.rollcall', 'local'),
);

export const kubeconfigPath = join(localDir, 'kubeconfig');

/**
 * Built binaries live outside the checkout so that every clone on the machine (CI clones
 * into a fresh folder) reuses them; each build sits in a folder named by its inputs.
 */
export const cacheDir =
  process.env.ROLLCALL_CACHE_DIR ??
  join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'rollcall');
