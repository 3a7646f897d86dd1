// Running the rollcall CLI for the authoring commands' tests: as a child process (exit codes,
// start-up, what a user sees) or in process through `main` (output details, faster).
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';
import { main } from '../../../cli/rollcall.ts';
import type { StatusIo } from '../../../cli/status.ts';

export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const entry = join(repoRoot, 'cli/rollcall.ts');

export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** `node cli/rollcall.ts ...args` in the repository root. */
export function cli(args: readonly string[], stdin = ''): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [entry, ...args], { cwd: repoRoot });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(stdin);
  });
}

/** The same through `main`, in this process. */
export async function inProcess(args: readonly string[], stdin = ''): Promise<Ran> {
  let stdout = '';
  let stderr = '';
  const io: StatusIo = {
    readFile: async (path) => readFileSync(path, 'utf8'),
    readStdin: async () => stdin,
    stdout: (s) => void (stdout += s),
    stderr: (s) => void (stderr += s),
    now: () => new Date('2026-01-01T00:00:00Z'),
  };
  const code = await main(args, io);
  return { code, stdout, stderr };
}

/** A temporary directory with `files` (relative path → text), removed after the file's tests. */
export function scratch(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'rollcall-authoring-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

/** A Policy document with `spec` fields over a ConfigMap rule. */
export function policyYaml(name: string, spec: string): string {
  return `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: ${name} }
spec:
  policyServer: default
  rules: [{ operations: [CREATE, UPDATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps] }]
${spec
  .trim()
  .split('\n')
  .map((line) => `  ${line}`)
  .join('\n')}
`;
}
