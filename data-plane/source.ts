/**
 * Policy code from `spec.source: {url, sha256}`: an HTTP(S) download, bounded in time and
 * size, pinned by its SHA-256, parsed as YAML (JSON is YAML) into
 * `{validations, variables?, matchConditions?}`. Every failure is a `SourceError` whose
 * message an operator can act on (the URL, the HTTP status, both digests).
 */
import { createHash } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import {
  matchConditionSchema,
  validationSchema,
  variableSchema,
  type PolicySource,
} from '../api/v1alpha1.ts';
import { zodMessage } from './lifecycle.ts';

export class SourceError extends Error {
  override name = 'SourceError';
  /**
   * True when trying again later may succeed (the download failed, or served other bytes
   * than the pinned digest); false when the pinned document itself is unusable.
   */
  readonly transient: boolean;
  constructor(message: string, transient = true) {
    super(message);
    this.transient = transient;
  }
}

/** The document a source URL serves. Unknown fields are refused: a typo must not pass silently. */
export const sourceDocumentSchema = z.strictObject({
  validations: z.array(validationSchema).min(1).max(64),
  variables: z.array(variableSchema).max(64).optional(),
  matchConditions: z.array(matchConditionSchema).max(64).optional(),
});
export type SourceDocument = z.output<typeof sourceDocumentSchema>;

export interface FetchSourceOptions {
  /** The whole download (connect, headers, body) must finish within this. Default 30 s. */
  timeoutMs?: number;
  /** Largest document accepted. Default 1 MiB. */
  maxBytes?: number;
  /** Aborts the download (the policy was deleted or changed meanwhile). */
  signal?: AbortSignal;
}

export const SOURCE_TIMEOUT_MS = 30_000;
export const SOURCE_MAX_BYTES = 1024 * 1024;

/** Downloads and checks a source document; throws SourceError. */
export async function fetchSource(
  source: PolicySource,
  { timeoutMs = SOURCE_TIMEOUT_MS, maxBytes = SOURCE_MAX_BYTES, signal }: FetchSourceOptions = {},
): Promise<SourceDocument> {
  const { url } = source;
  const timeout = AbortSignal.timeout(timeoutMs);
  const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
  let bytes: Buffer;
  try {
    const res = await fetch(url, { signal: combined, redirect: 'follow' });
    if (!res.ok) {
      await res.body?.cancel().catch(() => {});
      throw new SourceError(
        `spec.source: GET ${url} answered HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`,
      );
    }
    const declared = Number(res.headers.get('content-length') ?? NaN);
    if (declared > maxBytes) {
      await res.body?.cancel().catch(() => {});
      throw new SourceError(
        `spec.source: ${url} is ${declared} bytes, over the ${maxBytes}-byte limit`,
      );
    }
    bytes = await readCapped(res, maxBytes, url);
  } catch (err) {
    if (err instanceof SourceError) throw err;
    if (timeout.aborted)
      throw new SourceError(`spec.source: GET ${url} did not finish within ${timeoutMs} ms`);
    if (signal?.aborted) throw new SourceError(`spec.source: GET ${url} was cancelled`);
    const cause = (err as Error & { cause?: { message?: string; code?: string } }).cause;
    const detail = cause?.code ?? cause?.message ?? (err as Error).message;
    throw new SourceError(`spec.source: GET ${url} failed: ${detail}`);
  }
  const digest = createHash('sha256').update(bytes).digest('hex');
  if (digest !== source.sha256.toLowerCase())
    throw new SourceError(
      `spec.source: ${url} has sha256 ${digest}, but spec.source.sha256 is ${source.sha256}`,
    );
  return parseSourceDocument(bytes.toString('utf8'), url);
}

/** Parses a downloaded document (YAML or JSON); throws SourceError. */
export function parseSourceDocument(text: string, url: string): SourceDocument {
  let raw: unknown;
  try {
    raw = parseYaml(text, { maxAliasCount: 100 });
  } catch (err) {
    throw new SourceError(
      `spec.source: ${url} is neither YAML nor JSON: ${(err as Error).message}`,
      false,
    );
  }
  const parsed = sourceDocumentSchema.safeParse(raw);
  if (!parsed.success)
    throw new SourceError(
      `spec.source: ${url} is not a policy document ({validations, variables?, matchConditions?}): ${zodMessage(parsed.error, '')}`,
      false,
    );
  return parsed.data;
}

async function readCapped(res: Response, maxBytes: number, url: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  if (!res.body) return Buffer.alloc(0);
  for await (const chunk of res.body) {
    size += chunk.byteLength;
    if (size > maxBytes) break; // leaving the loop cancels the download
    chunks.push(Buffer.from(chunk));
  }
  if (size > maxBytes)
    throw new SourceError(`spec.source: ${url} is over the ${maxBytes}-byte limit`);
  return Buffer.concat(chunks);
}
