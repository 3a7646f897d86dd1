/**
 * Reading the YAML files authors write: multi-document, `kind: List` expanded, each object
 * with where it came from, so a problem can point at `file:line:column`. Every failure is an
 * `InputError` naming the file and document (the commands exit 2 on it).
 */
import { isScalar, LineCounter, parseAllDocuments, type Document, type Scalar } from 'yaml';

/** Input a command cannot use: a missing or unparsable file, an object without a kind. */
export class InputError extends Error {
  override name = 'InputError';
}

/** A file reader (StatusIo's), injected so tests and commands share one path. */
export type ReadFile = (path: string) => Promise<string>;

/** One object of a YAML stream, with its origin. */
export interface SourceObject {
  value: Record<string, unknown>;
  file: string;
  /** 1-based document number in the file. */
  document: number;
  /** Locates a field of this object in the file (see locate). */
  locate(path: readonly (string | number)[], inValue?: TextPosition): TextPosition | undefined;
}

/** A 1-based line and column. */
export interface TextPosition {
  line: number;
  col: number;
}

export const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** A YAML error as `file:line:col: what` (the library's own excerpt left out). */
export function yamlErrorMessage(error: unknown, file: string): string {
  const { message, linePos } = error as {
    message: string;
    linePos?: { line: number; col: number }[];
  };
  const what = (message.split('\n')[0] ?? message).replace(/ at line \d+, column \d+:?$/, '');
  const at = linePos?.[0];
  return at ? `${file}:${at.line}:${at.col}: ${what}` : `${file}: ${what}`;
}

/** The text of `file`. Throws InputError, saying so of a missing file or a directory. */
export async function readText(readFile: ReadFile, file: string): Promise<string> {
  try {
    return await readFile(file);
  } catch (error) {
    const code = (error as { code?: string }).code;
    throw new InputError(
      code === 'ENOENT'
        ? `${file}: no such file`
        : code === 'EISDIR'
          ? `${file}: is a directory`
          : `${file}: ${(error as Error).message}`,
    );
  }
}

/** Every object in `file`, in order; Lists are expanded. Throws InputError. */
export async function readObjects(readFile: ReadFile, file: string): Promise<SourceObject[]> {
  return objectsIn(await readText(readFile, file), file);
}

/** Every object in the YAML text `text` of `file`. Throws InputError. */
export function objectsIn(text: string, file: string): SourceObject[] {
  const lineCounter = new LineCounter();
  const parsed = parseAllDocuments(text, { lineCounter });
  const documents = Array.isArray(parsed) ? parsed : [];
  const objects: SourceObject[] = [];
  documents.forEach((doc, index) => {
    const where = `${file}: document ${index + 1}`;
    const [error] = doc.errors;
    if (error) throw new InputError(yamlErrorMessage(error, file));
    const value: unknown = doc.toJS({ maxAliasCount: 100 });
    if (value === null || value === undefined) return; // an empty document between `---`s
    if (!isRecord(value)) throw new InputError(`${where}: not an object`);
    const make = (v: Record<string, unknown>, prefix: (string | number)[]): SourceObject => ({
      value: v,
      file,
      document: index + 1,
      locate: (path, inValue) => locate(doc, lineCounter, text, [...prefix, ...path], inValue),
    });
    if (typeof value.kind === 'string' && value.kind.endsWith('List') && 'items' in value) {
      if (!Array.isArray(value.items)) throw new InputError(`${where}: items must be a list`);
      value.items.forEach((item, i) => {
        if (!isRecord(item)) throw new InputError(`${where}, item ${i + 1}: not an object`);
        objects.push(make(item, ['items', i]));
      });
    } else {
      objects.push(make(value, []));
    }
  });
  return objects;
}

/**
 * Where the value at `path` starts in the file; with `inValue` (a line and column inside a
 * string value, as CEL errors give them), where that character is when the scalar's text maps
 * onto its value (plain, quoted without escapes, literal block), else where the value starts.
 */
function locate(
  doc: Document,
  lineCounter: LineCounter,
  text: string,
  path: readonly (string | number)[],
  inValue?: TextPosition,
): TextPosition | undefined {
  // Climb to the nearest node that exists (a missing field: its parent).
  for (let depth = path.length; depth >= 0; depth--) {
    const node = doc.getIn(path.slice(0, depth), true) as { range?: [number, number, number] };
    if (!node?.range) continue;
    const start = node.range[0];
    if (depth === path.length && inValue && isScalar(node)) {
      const offset = offsetInScalar(node, text, inValue);
      if (offset !== undefined) return lineCounter.linePos(offset);
    }
    return lineCounter.linePos(start);
  }
  return undefined;
}

function offsetInScalar(node: Scalar, text: string, at: TextPosition): number | undefined {
  const [start, end] = node.range ?? [0, 0];
  const value = String(node.value);
  const lines = value.split('\n');
  if (at.line < 1 || at.line > lines.length) return undefined;
  switch (node.type) {
    case 'PLAIN':
      return at.line === 1 && text.slice(start, end) === value ? start + at.col - 1 : undefined;
    case 'QUOTE_DOUBLE':
    case 'QUOTE_SINGLE':
      return at.line === 1 && text.slice(start + 1, end - 1) === value ? start + at.col : undefined;
    case 'BLOCK_LITERAL': {
      // `|` header, then the lines of the value, each indented alike.
      const body = text.indexOf('\n', start) + 1;
      if (body === 0) return undefined;
      let lineStart = body;
      for (let i = 1; i < at.line; i++) lineStart = text.indexOf('\n', lineStart) + 1;
      const firstLine = text.slice(body, text.indexOf('\n', body));
      const indent = firstLine.length - firstLine.trimStart().length;
      return lineStart + indent + at.col - 1;
    }
    default:
      return undefined;
  }
}

/** `spec.validations[0].expression` → ['spec', 'validations', 0, 'expression']. */
export function parseFieldPath(fieldPath: string): (string | number)[] {
  const out: (string | number)[] = [];
  for (const part of fieldPath.matchAll(/([^.[\]]+)|\[(\d+)\]/g))
    out.push(part[2] !== undefined ? Number(part[2]) : (part[1] ?? ''));
  return out;
}
