/**
 * Policy code from `spec.source: {url, sha256}`: an HTTP(S) download, bounded in time and
 * size, pinned by its SHA-256, parsed as YAML (JSON is YAML) into
 * `{validations, variables?, matchConditions?}`. It connects only where the PolicyServer's
 * `spec.sources` allows (data-plane/destination.ts), checked for every address and every
 * redirect before a socket is opened, and only to the addresses it checked. Every failure is
 * a `SourceError` whose message an operator can act on (the URL, what is not allowed and
 * why, the HTTP status, the pinned digest), and says nothing a refused destination could
 * have told.
 */
import { createHash } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIPv4, type LookupFunction } from 'node:net';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import {
  matchConditionSchema,
  validationSchema,
  variableSchema,
  type PolicyServerSources,
  type PolicySource,
} from '../api/v1alpha1.ts';
import {
  DEFAULT_SOURCE_ALLOWANCES,
  literalAddress,
  MAX_SOURCE_REDIRECTS,
  redirectTarget,
  refusedAddress,
  refusedScheme,
} from './destination.ts';
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
  /** What the PolicyServer allows (its spec.sources). Default: HTTPS to public addresses. */
  allowances?: PolicyServerSources;
  /** The PolicyServer the messages name (the Policy's spec.policyServer). */
  policyServer?: string;
  /** Resolves a host name to every address it has. Default: the system resolver. */
  resolve?: Resolve;
}

/** A host name's addresses, all of them (each is checked; the connection uses only these). */
export type Resolve = (hostname: string) => Promise<LookupAddress[]>;

const systemResolve: Resolve = (hostname) => lookup(hostname, { all: true, order: 'verbatim' });

export const SOURCE_TIMEOUT_MS = 30_000;
export const SOURCE_MAX_BYTES = 1024 * 1024;

/** Downloads and checks a source document; throws SourceError. */
export async function fetchSource(
  source: PolicySource,
  {
    timeoutMs = SOURCE_TIMEOUT_MS,
    maxBytes = SOURCE_MAX_BYTES,
    signal,
    allowances = DEFAULT_SOURCE_ALLOWANCES,
    policyServer = '(unnamed)',
    resolve = systemResolve,
  }: FetchSourceOptions = {},
): Promise<SourceDocument> {
  const { url } = source;
  const timeout = AbortSignal.timeout(timeoutMs);
  const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
  let bytes: Buffer;
  try {
    const res = await follow(url, { allowances, policyServer, resolve, signal: combined });
    if (res.statusCode === undefined || res.statusCode < 200 || res.statusCode > 299) {
      res.destroy();
      throw new SourceError(
        `spec.source: GET ${url} answered HTTP ${res.statusCode}${res.statusMessage ? ` ${res.statusMessage}` : ''}`,
      );
    }
    // Only the limit is named: what the server declared is its business, not the status's.
    const tooLarge = () =>
      new SourceError(`spec.source: ${url} is over the ${maxBytes}-byte limit`);
    if (Number(res.headers['content-length'] ?? NaN) > maxBytes) {
      res.destroy();
      throw tooLarge();
    }
    bytes = await readCapped(res, maxBytes, tooLarge);
  } catch (err) {
    if (err instanceof SourceError) throw err;
    if (timeout.aborted)
      throw new SourceError(`spec.source: GET ${url} did not finish within ${timeoutMs} ms`);
    if (signal?.aborted) throw new SourceError(`spec.source: GET ${url} was cancelled`);
    const detail = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new SourceError(`spec.source: GET ${url} failed: ${detail}`);
  }
  // The digest of what was served is not echoed: it would tell a Policy author the hash of
  // whatever the URL serves to this server, which they may not be able to read themselves.
  const digest = createHash('sha256').update(bytes).digest('hex');
  if (digest !== source.sha256.toLowerCase())
    throw new SourceError(`spec.source: ${url} does not match spec.source.sha256 ${source.sha256}`);
  return parseSourceDocument(bytes.toString('utf8'), url);
}

/** What each hop is checked against, and the download's deadline. */
interface Hop {
  allowances: PolicyServerSources;
  policyServer: string;
  resolve: Resolve;
  signal: AbortSignal;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * GETs `url`, following at most MAX_SOURCE_REDIRECTS redirects, each hop checked before any
 * socket is opened; resolves with the final response (its body not read yet).
 */
async function follow(url: string, hop: Hop): Promise<IncomingMessage> {
  let current = new URL(url);
  for (let redirects = 0; ; redirects++) {
    const where =
      redirects === 0 ? `spec.source ${url}` : `spec.source ${url}: redirected to ${current.href}`;
    const addresses = await checkedAddresses(current, hop, where, redirects > 0);
    const res = await get(current, addresses, hop.signal);
    const location = res.headers.location;
    if (!REDIRECTS.has(res.statusCode ?? 0) || location === undefined) return res;
    res.destroy();
    if (redirects === MAX_SOURCE_REDIRECTS)
      throw new SourceError(`spec.source ${url}: more than ${MAX_SOURCE_REDIRECTS} redirects`);
    const next = redirectTarget(current, location);
    if ('refused' in next) throw new SourceError(`spec.source ${url}: ${next.refused}`);
    current = next.url;
  }
}

/**
 * The addresses `url` may connect to: its IP, or every address its host name resolves to,
 * each allowed; throws SourceError naming the first that is not. A refusal decided by the
 * spec alone is permanent; one that DNS or a redirect decided may change.
 */
async function checkedAddresses(
  url: URL,
  { allowances, policyServer, resolve }: Hop,
  where: string,
  redirected: boolean,
): Promise<LookupAddress[]> {
  const scheme = refusedScheme(url, allowances, policyServer);
  if (scheme) throw new SourceError(`${where}: ${scheme}`, redirected);
  const literal = literalAddress(url);
  if (literal !== undefined) {
    const refused = refusedAddress(literal, allowances, policyServer);
    if (refused)
      throw new SourceError(`${where}: destination ${literal} is ${refused}`, redirected);
    return [{ address: literal, family: isIPv4(literal) ? 4 : 6 }];
  }
  const addresses = await resolve(url.hostname);
  for (const { address } of addresses) {
    const refused = refusedAddress(address, allowances, policyServer);
    if (refused)
      throw new SourceError(`${where}: ${url.hostname} resolves to ${address}, ${refused}`);
  }
  if (addresses.length === 0) throw new SourceError(`${where}: ${url.hostname} has no address`);
  return addresses;
}

/**
 * One GET that connects only to `addresses` (already checked): the socket's lookup answers
 * with them instead of asking DNS again, so a name that changes its answer meanwhile cannot
 * redirect the connection. TLS still verifies the certificate against the URL's host name.
 */
function get(url: URL, addresses: LookupAddress[], signal: AbortSignal): Promise<IncomingMessage> {
  const pinned: LookupFunction = (_hostname, options, callback) => {
    if (options.all) callback(null, addresses);
    else callback(null, addresses[0]!.address, addresses[0]!.family);
  };
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, {
      agent: false, // a pooled connection could outlive the check it was made under
      lookup: pinned,
      signal,
      headers: { 'user-agent': 'rollcall-policy-server', accept: '*/*' },
    });
    req.once('response', resolve).once('error', reject).end();
  });
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

async function readCapped(
  res: IncomingMessage,
  maxBytes: number,
  tooLarge: () => SourceError,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > maxBytes) break; // leaving the loop destroys the response
    chunks.push(chunk);
  }
  if (size > maxBytes) throw tooLarge();
  return Buffer.concat(chunks);
}
