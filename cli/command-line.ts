/**
 * A subcommand's command line, read the same way by every offline command (status, eval, test,
 * lint, convert): `-h`/`--help` prints the usage on standard output (exit 0); an option parseArgs
 * refuses, or a problem the command's own `read` throws, prints `rollcall <name>: <message>`, a
 * blank line and the usage on standard error (exit 2).
 */
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import type { StatusIo } from './status.ts';

const HELP = { help: { type: 'boolean', short: 'h' } } as const;

/** What parseArgs returns for a command's options (help included). */
export type ParsedLine<O extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ options: O & typeof HELP; strict: true; allowPositionals: true }>
>;

export interface CommandSpec<O extends ParseArgsOptionsConfig> {
  /** The subcommand, as the messages name it (`rollcall <name>: ...`). */
  name: string;
  usage: string;
  /** The command's options; `-h`/`--help` is added. */
  options: O;
  /** Whether it takes positional arguments (default true). */
  positionals?: boolean;
}

/**
 * Parses `argv`: `{ args }`, what `read` makes of the parsed line, or `{ exit }` when the command
 * is done already (its help or a usage error printed).
 */
export function readCommandLine<const O extends ParseArgsOptionsConfig, T>(
  argv: readonly string[],
  io: Pick<StatusIo, 'stdout' | 'stderr'>,
  command: CommandSpec<O>,
  read: (line: ParsedLine<O>) => T,
): { args: T } | { exit: number } {
  try {
    const line = parseArgs({
      args: [...argv],
      options: { ...command.options, ...HELP },
      strict: true,
      allowPositionals: command.positionals ?? true,
    });
    if ((line.values as { help?: boolean }).help) {
      io.stdout(command.usage);
      return { exit: 0 };
    }
    return { args: read(line as ParsedLine<O>) };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    io.stderr(`rollcall ${command.name}: ${message}\n\n${command.usage}`);
    return { exit: 2 };
  }
}

/** `-o`'s value when it is one of `formats`; throws `-o must be a or b, not "c"` otherwise. */
export function outputFormat<const F extends string>(value: string, formats: readonly F[]): F {
  if ((formats as readonly string[]).includes(value)) return value as F;
  throw new Error(`-o must be ${formats.join(' or ')}, not "${value}"`);
}

/** Options that each take one string, by name. */
export const stringOptions = <const N extends string>(...names: N[]) =>
  Object.fromEntries(names.map((name) => [name, { type: 'string' }])) as {
    [K in N]: { type: 'string' };
  };

/**
 * The command line of a command that takes `-o` (one of `formats`, default the first) and one or
 * more operands (`operand` names them in the message when there is none).
 */
export function readOutputAndOperands<const F extends string>(
  argv: readonly string[],
  io: Pick<StatusIo, 'stdout' | 'stderr'>,
  name: string,
  usage: string,
  formats: readonly [F, ...F[]],
  operand: string,
): { args: { output: F; operands: string[] } } | { exit: number } {
  const options = {
    output: { type: 'string', short: 'o', default: formats[0] as string },
  } as const;
  return readCommandLine(argv, io, { name, usage, options }, ({ values, positionals }) => {
    const output = outputFormat(values.output, formats);
    if (positionals.length === 0) throw new Error(`give at least one ${operand}`);
    return { output, operands: positionals };
  });
}
