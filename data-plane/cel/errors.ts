// Errors of the CEL engine, worded for an operator: the field path, what is wrong, and where.

/** A runtime error of a policy's expression (the caller answers per the policy's failurePolicy). */
export class EvaluationError extends Error {
  override readonly name = 'EvaluationError';
  /** The field of the expression that failed, e.g. `spec.validations[0].expression`. */
  readonly fieldPath: string;
  constructor(message: string, fieldPath: string, options?: ErrorOptions) {
    super(message, options);
    this.fieldPath = fieldPath;
  }
}

/** `line:column` (both from 1) of the character at `offset` in `source`. */
export function position(source: string, offset: number): string {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < source.length; i++) {
    if (source[i] === '\n') {
      line++;
      lineStart = i + 1;
    }
  }
  return `${line}:${offset - lineStart + 1}`;
}

interface CelError {
  code?: string;
  summary?: string;
  message: string;
  range?: { start: number };
}

/**
 * The library's error in cel-go's words where they differ (so messages read as in Kubernetes),
 * without the source excerpt the library appends.
 */
export function describeCelError(error: unknown): string {
  const e = error as CelError;
  const summary = e.summary ?? e.message.split('\n')[0] ?? String(error);
  const unknown = /^Unknown variable: (.*)$/.exec(summary);
  if (e.code === 'unknown_variable' && unknown) return `undeclared reference to '${unknown[1]}'`;
  if (summary.startsWith('No such key: ')) return `no such key: ${summary.slice(13)}`;
  return summary;
}

/** `<summary> at <line>:<col>` for a parse or type error of `source`. */
export function describeCompileError(error: unknown, source: string): string {
  const start = (error as CelError).range?.start;
  const where = typeof start === 'number' ? ` at ${position(source, start)}` : '';
  return `${describeCelError(error)}${where}`;
}
