#!/usr/bin/env node
/**
 * The `rollcall` command: a small dispatcher. Each subcommand is a function
 * `(argv, io) → exit code` in its own file; add one by adding a row to COMMANDS.
 */
import { readFile } from 'node:fs/promises';
import { text } from 'node:stream/consumers';
import type { Role } from '../control-plane/roles.ts';
import type { StatusIo } from './status.ts';

interface Command {
  summary: string;
  run(argv: readonly string[], io: StatusIo): Promise<number>;
}

// Every command loads its module on use: a policy-server process must not pay for BullMQ,
// Bull Board and the reconcile functions, nor any role for the demo's cluster tooling or YAML.
const serve = () => import('./serve.ts');
const roles =
  (names: readonly Role[]): Command['run'] =>
  async (argv, io) =>
    (await serve()).serveRoles(names)(argv, io);

/**
 * An authoring command (eval, test, lint, convert): exit 1 means denied or differs, so a bug
 * that throws must not exit 1 as Node does; it exits 2, saying it is a bug.
 */
const authoring =
  (name: string, load: () => Promise<Command['run']>): Command['run'] =>
  async (argv, io) => {
    try {
      const run = await load();
      return await run(argv, io);
    } catch (err) {
      io.stderr(
        `rollcall ${name}: unexpected error (a bug in rollcall): ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      return 2;
    }
  };

const COMMANDS: Record<string, Command> = {
  status: {
    summary: 'print the kstatus of objects in YAML/JSON files',
    run: async (argv, io) => (await import('./status.ts')).runStatus(argv, io),
  },
  eval: {
    summary: 'evaluate one Policy on one object or AdmissionReview, offline (as the server would)',
    run: authoring('eval', async () => (await import('./authoring/eval-command.ts')).runEval),
  },
  test: {
    summary: 'run the policy test suites (rollcall-test.yaml) under the given paths, offline',
    run: authoring('test', async () => (await import('./authoring/test-command.ts')).runTest),
  },
  lint: {
    summary: 'load Policies as a replica would and report every problem and warning',
    run: authoring('lint', async () => (await import('./authoring/lint-command.ts')).runLint),
  },
  convert: {
    summary: 'convert a Policy to a ValidatingAdmissionPolicy and its binding, or back',
    run: authoring(
      'convert',
      async () => (await import('./authoring/convert-command.ts')).runConvert,
    ),
  },
  run: {
    summary: 'run watcher, workers and the HTTP server in one process',
    run: roles(['watcher', 'worker']),
  },
  watcher: {
    summary: 'watch the cluster and enqueue keys (leader-elected)',
    run: roles(['watcher']),
  },
  worker: { summary: 'process keys with the reconcile functions', run: roles(['worker']) },
  sim: {
    summary: 'simulated policy servers for the local cluster (dev tooling)',
    run: async (argv, io) => (await serve()).runSim(argv, io),
  },
  'install-crds': {
    summary: "apply rollcall's CRDs to the cluster",
    run: async (argv, io) => (await serve()).runInstallCrds(argv, io),
  },
  demo: {
    summary: 'walk through rollcall on the local cluster',
    run: async (argv, io) => {
      const demo = await import('../tooling/demo/demo.ts').catch((err: unknown) => {
        // The image leaves out the cluster tooling the demo drives (.dockerignore).
        if ((err as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') return undefined;
        throw err;
      });
      if (demo) return demo.runDemo(argv, io);
      io.stderr(
        'rollcall demo runs from a checkout of the repository (npm run demo), not from the image\n',
      );
      return 2;
    },
  },
  'policy-server': {
    summary:
      'serve the CEL admission policies of one PolicyServer (rollcall’s policy-server image)',
    run: async (argv, io) => (await import('../data-plane/main.ts')).run(argv, io),
  },
};

export function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((name) => name.length));
  const lines = Object.entries(COMMANDS).map(
    ([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`,
  );
  return `Usage: rollcall <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun "rollcall <command> --help" for a command's options.\n`;
}

export async function main(argv: readonly string[], io: StatusIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    (name === undefined ? io.stderr : io.stdout)(usage());
    return name === undefined ? 2 : 0;
  }
  const command = COMMANDS[name];
  if (command === undefined) {
    io.stderr(`rollcall: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  return command.run(rest, io);
}

export const processIo: StatusIo = {
  readFile: (path) => readFile(path, 'utf8'),
  readStdin: () => text(process.stdin),
  stdout: (s) => void process.stdout.write(s),
  stderr: (s) => void process.stderr.write(s),
  now: () => new Date(),
};

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2), processIo);
}
