// The Dockerfile as data: its instructions, and the environment its runtime stage sets. The
// Dockerfile test checks the instructions; the bench starts rollcall with the runtime's
// environment, so that its processes run as the image's do.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Instruction {
  op: string;
  args: string;
  stage: number;
}

/** Dockerfile instructions: comments dropped, continuation lines joined, each tagged with its stage. */
export function parseDockerfile(text: string): Instruction[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  let stage = -1;
  return lines.map((line) => {
    const [, op = '', args = ''] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    if (op.toUpperCase() === 'FROM') stage++;
    return { op: op.toUpperCase(), args, stage };
  });
}

/** The instructions of the last stage: the image that runs. */
export function runtimeStage(instructions: readonly Instruction[]): Instruction[] {
  const last = Math.max(...instructions.map((i) => i.stage));
  return instructions.filter((i) => i.stage === last);
}

/** What the runtime stage's `ENV key=value ...` lines set; a value with quotes, an escape or `$` is refused. */
export function runtimeEnv(instructions: readonly Instruction[]): Record<string, string> {
  return Object.fromEntries(
    runtimeStage(instructions)
      .filter((i) => i.op === 'ENV')
      .flatMap((i) => i.args.split(/\s+/))
      .map((pair) => {
        const at = pair.indexOf('=');
        if (at < 1) throw new Error(`Dockerfile: ENV ${pair}: expected key=value`);
        // Quotes would be kept as part of the value: refused rather than misread.
        if (/["'\\$]/.test(pair))
          throw new Error(`Dockerfile: ENV ${pair}: quotes, escapes and $ are not read here`);
        return [pair.slice(0, at), pair.slice(at + 1)];
      }),
  );
}

/** The repository's Dockerfile, parsed. */
export function readDockerfile(root: string): Instruction[] {
  return parseDockerfile(readFileSync(join(root, 'Dockerfile'), 'utf8'));
}
