/**
 * `rollcall status -f <file|-> [-o json|table]`: the kstatus of every object in one or
 * more YAML/JSON files (multi-document, `kind: List` expanded).
 *
 * Exit codes: 0 when every object is Current, 1 when any is not, 2 when the input
 * cannot be read (the message names the document, e.g. "document 3 of app.yaml: ...").
 */
import { parseAllDocuments } from 'yaml';
import { computeStatus } from '../lib/kstatus/compute.ts';
import { isObject } from '../lib/kstatus/fields.ts';
import type { KStatusResult } from '../lib/kstatus/types.ts';
import { outputFormat, readCommandLine } from './command-line.ts';

/** The process boundary, injected so tests need no subprocess. */
export interface StatusIo {
  readFile(path: string): Promise<string>;
  readStdin(): Promise<string>;
  stdout(text: string): void;
  stderr(text: string): void;
  now(): Date;
}

export interface ObjectStatus {
  apiVersion: string;
  kind: string;
  namespace: string;
  name: string;
  status: KStatusResult['status'];
  message: string;
  conditions: { type: string; status: string; reason: string; message: string }[];
}

export const STATUS_USAGE = `Usage: rollcall status -f <file|-> [-f <file> ...] [-o table|json]

Prints the kstatus (Current, InProgress, Failed, Terminating, Unknown) of every object
in the given YAML or JSON documents; "-" reads standard input.

Exit codes: 0 all Current, 1 some not Current, 2 unreadable input.
`;

class InputError extends Error {}

export async function runStatus(argv: readonly string[], io: StatusIo): Promise<number> {
  const line = readCommandLine(
    argv,
    io,
    {
      name: 'status',
      usage: STATUS_USAGE,
      options: {
        filename: { type: 'string', short: 'f', multiple: true },
        output: { type: 'string', short: 'o', default: 'table' },
      },
      positionals: false,
    },
    ({ values }) => {
      const files = values.filename ?? [];
      if (files.length === 0) throw new InputError('-f <file|-> is required');
      return { files, output: outputFormat(values.output, ['table', 'json']) };
    },
  );
  if ('exit' in line) return line.exit;
  const { files, output } = line.args;

  const results: ObjectStatus[] = [];
  try {
    for (const file of files) {
      const label = file === '-' ? 'stdin' : file;
      let text: string;
      try {
        text = file === '-' ? await io.readStdin() : await io.readFile(file);
      } catch (error) {
        throw new InputError(`${label}: ${errorMessage(error)}`);
      }
      const now = io.now();
      for (const object of objectsIn(text, label)) results.push(statusOf(object, now));
    }
  } catch (error) {
    if (!(error instanceof InputError)) throw error;
    io.stderr(`rollcall status: ${error.message}\n`);
    return 2;
  }

  io.stdout(output === 'json' ? `${JSON.stringify(results, null, 2)}\n` : table(results));
  return results.every((r) => r.status === 'Current') ? 0 : 1;
}

interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}

/** Every object in a file, in order; Lists are expanded. Throws InputError naming the document. */
function objectsIn(text: string, label: string): KubeObject[] {
  const documents = parseAllDocuments(text);
  if (!Array.isArray(documents)) return []; // an empty stream
  const objects: KubeObject[] = [];
  documents.forEach((doc, index) => {
    const where = `document ${index + 1} of ${label}`;
    const [error] = doc.errors;
    if (error) throw new InputError(`${where}: ${error.message.split('\n')[0]}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) return; // an empty document between `---`s
    const object = asKubeObject(value, where);
    if (object.kind.endsWith('List') && 'items' in (value as object)) {
      const items = (value as { items: unknown }).items;
      if (!Array.isArray(items)) throw new InputError(`${where}: items must be a list`);
      items.forEach((item, i) => objects.push(asKubeObject(item, `${where}, item ${i + 1}`)));
    } else {
      objects.push(object);
    }
  });
  return objects;
}

function asKubeObject(value: unknown, where: string): KubeObject {
  if (!isObject(value)) throw new InputError(`${where}: not a Kubernetes object`);
  const { apiVersion, kind, metadata } = value;
  if (typeof apiVersion !== 'string' || apiVersion === '')
    throw new InputError(`${where}: apiVersion is missing`);
  if (typeof kind !== 'string' || kind === '') throw new InputError(`${where}: kind is missing`);
  if (kind.endsWith('List') && 'items' in value) return value as unknown as KubeObject;
  if (!isObject(metadata) || typeof metadata['name'] !== 'string' || metadata['name'] === '') {
    throw new InputError(`${where}: metadata.name is missing`);
  }
  return value as unknown as KubeObject;
}

function statusOf(object: KubeObject, now: Date): ObjectStatus {
  const result = computeStatus(object, { now });
  return {
    apiVersion: object.apiVersion,
    kind: object.kind,
    namespace: typeof object.metadata.namespace === 'string' ? object.metadata.namespace : '',
    name: object.metadata.name,
    status: result.status,
    message: result.message,
    conditions: result.conditions.map(({ type, status, reason, message }) => ({
      type,
      status,
      reason,
      message,
    })),
  };
}

function table(results: readonly ObjectStatus[]): string {
  const rows = [
    ['NAMESPACE', 'KIND', 'NAME', 'STATUS', 'MESSAGE'],
    ...results.map((r) => [r.namespace, r.kind, r.name, r.status, r.message.replace(/\s+/g, ' ')]),
  ];
  const widths = [0, 1, 2, 3].map((col) => Math.max(...rows.map((row) => row[col]?.length ?? 0)));
  return rows
    .map((row) =>
      row
        .map((cell, col) => (col < 4 ? cell.padEnd(widths[col] ?? 0) : cell))
        .join('   ')
        .trimEnd(),
    )
    .join('\n')
    .concat('\n');
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
