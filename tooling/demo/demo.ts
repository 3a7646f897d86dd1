// `rollcall demo` (npm run demo): rollcall doing its main job with real policy servers on the
// embedded local cluster. The steps (tooling/demo/steps.ts) start the cluster, Redis and
// rollcall, apply a PolicyServer of rollcall's own image with 3 replicas and four CEL
// policies (one good, three that really fail), wait until they converged, and show what
// kubectl shows and a request denied by the Ready policy; then a policy adopted over
// ConfigMaps that already exist (Audit and its Report, Warn, Deny). Then it stays up until
// Ctrl-C (or stops at once with --once). Every process it started is stopped on the way out.
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { localDir } from '../cluster/paths.ts';
import { startChild, stopChild, type Child, type Demo } from './context.ts';
import { DEMO_STEPS } from './steps.ts';
import type { StatusIo } from '../../cli/status.ts';

const help = `usage: rollcall demo [--once] [--dir DIR]

Runs rollcall on the embedded local cluster with real policy servers: builds (or reuses)
the cluster binaries, starts the cluster, Redis and rollcall, applies a PolicyServer with 3
replicas and four CEL policies (one that loads, three that fail: a CEL typo, a source URL
that answers 404, a digest mismatch), waits until they converged and shows the result,
including a request denied by the Ready policy. Then it adopts a policy over ConfigMaps
that already exist: in Audit (its OpenReports Report and VIOLATIONS), then Warn, then Deny.

  --once     print everything, then stop and clean up (for CI)
  --dir DIR  the local cluster's directory (default ${relative(process.cwd(), localDir) || localDir})
`;

class Interrupted extends Error {}

export async function runDemo(argv: readonly string[], io: StatusIo): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        once: { type: 'boolean' },
        dir: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    io.stderr(`rollcall demo: ${(err as Error).message}\n\n${help}`);
    return 2;
  }
  if (values.help) {
    io.stdout(help);
    return 0;
  }
  const dir = values.dir ?? localDir;
  const progress = (line: string) => io.stderr(`[demo] ${line}\n`);

  // Cleanups run in reverse order of the starts; Ctrl-C during a step jumps straight to them.
  const cleanups: { what: string; run: () => Promise<void> }[] = [];
  let interrupt: (signal: string) => void = () => {};
  const interrupted = new Promise<never>(
    (_, reject) => (interrupt = (signal) => reject(new Interrupted(signal))),
  );
  interrupted.catch(() => {});
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    if (++signals > 1) {
      io.stderr('[demo] second interrupt: exiting without cleaning up\n');
      process.exit(130);
    }
    progress(`${signal}: stopping (press Ctrl-C again to exit at once)`);
    interrupt(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const children: Child[] = [];
  const logs = join(dir, 'logs');

  const demo: Demo = {
    io,
    dir,
    logs,
    once: values.once === true,
    out: (line = '') => io.stdout(`${line}\n`),
    progress,
    guard: (p) => Promise.race([p, interrupted, ...children.map((c) => c.died)]),
    onExit: (what, run) => cleanups.push({ what, run }),
    startRollcall: (name, args) => {
      const child = startChild(name, logs, args);
      children.push(child);
      cleanups.push({ what: name, run: () => stopChild(child) });
      return child;
    },
    state: {},
  };

  let code = 0;
  let step = '';
  try {
    for (const s of DEMO_STEPS) {
      step = s.name;
      await s.run(demo);
    }
    if (demo.once) {
      demo.out('--once: stopping everything.');
    } else {
      demo.out('rollcall is running. Press Ctrl-C to stop it and the local cluster.');
      await demo.guard(new Promise<never>(() => {}));
    }
  } catch (err) {
    if (err instanceof Interrupted) {
      code = 130;
    } else {
      code = 1;
      const message = err instanceof Error ? err.message : String(err);
      io.stderr(`\nrollcall demo failed at "${step}": ${message}\n`);
      io.stderr(`logs: ${logs}\n`);
    }
  } finally {
    for (const c of cleanups.reverse()) {
      progress(`stopping ${c.what}`);
      await c.run().catch((err: unknown) => progress(`stopping ${c.what} failed: ${String(err)}`));
    }
    progress('stopped everything the demo started');
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return code;
}
