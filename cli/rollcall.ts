#!/usr/bin/env node
/**
 * The `rollcall` command: a small dispatcher. Each subcommand is a function
 * `(argv, io) → exit code` in its own file; add one by adding a row to COMMANDS.
 */
import { readFile } from 'node:fs/promises';
import { text } from 'node:stream/consumers';
import { runDemo } from './demo.ts';
import { runInstallCrds, runSim, serveRoles } from './serve.ts';
import { runStatus, type StatusIo } from './status.ts';

interface Command {
  summary: string;
  run(argv: readonly string[], io: StatusIo): Promise<number>;
}

const COMMANDS: Record<string, Command> = {
  status: { summary: 'print the kstatus of objects in YAML/JSON files', run: runStatus },
  run: {
    summary: 'run watcher, workers and the HTTP server in one process',
    run: serveRoles(['watcher', 'worker']),
  },
  watcher: {
    summary: 'watch the cluster and enqueue keys (leader-elected)',
    run: serveRoles(['watcher']),
  },
  worker: { summary: 'process keys with the reconcile functions', run: serveRoles(['worker']) },
  sim: { summary: 'simulated policy servers for the local cluster (dev tooling)', run: runSim },
  'install-crds': { summary: "apply rollcall's CRDs to the cluster", run: runInstallCrds },
  demo: { summary: 'walk through rollcall on the local cluster', run: runDemo },
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
