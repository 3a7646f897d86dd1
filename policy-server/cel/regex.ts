// Regular expressions. CEL specifies RE2; the CEL library uses JS RegExp. Syntax that JS reads
// differently from RE2 is refused (at load time when the pattern is a literal), and the policy
// server runs V8 with --enable-experimental-regexp-engine-on-excessive-backtracks, so a
// catastrophic pattern falls back to a linear-time engine instead of stalling the process.
import type { Environment } from '@marcbachmann/cel-js';

/** RE2 syntax that JS either rejects or silently reads as something else. */
const UNSUPPORTED_SYNTAX: readonly [RegExp, string][] = [
  [/\(\?[imsU-]+[):]/, 'inline flags such as (?i)'],
  [/\(\?P</, 'named groups written (?P<name>...)'],
  [/\\[AzQEC]/, 'the escapes \\A, \\z, \\Q...\\E and \\C'],
  [/\\[pP][A-Za-z]/, 'one-letter Unicode classes such as \\pL'],
  [/\[\[:/, 'POSIX classes such as [[:alpha:]]'],
];

/** Why JS cannot run `pattern` as RE2 would; undefined when it can. */
export function unsupportedRegex(pattern: string): string | undefined {
  for (const [syntax, what] of UNSUPPORTED_SYNTAX) {
    if (syntax.test(pattern)) {
      return `regular expression ${JSON.stringify(pattern)} uses ${what}, which rollcall's JavaScript regular expressions do not support`;
    }
  }
  try {
    new RegExp(pattern);
  } catch (error) {
    return `invalid regular expression ${JSON.stringify(pattern)}: ${(error as Error).message}`;
  }
  return undefined;
}

const cache = new Map<string, RegExp>();
const CACHE_LIMIT = 500;

/** A global RegExp for `pattern`, compiled once (the cache is bounded). */
function compiled(pattern: string): RegExp {
  let re = cache.get(pattern);
  if (!re) {
    const problem = unsupportedRegex(pattern);
    if (problem) throw new Error(problem);
    re = new RegExp(pattern, 'g');
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(pattern, re);
  }
  re.lastIndex = 0;
  return re;
}

function find(text: string, pattern: string): string {
  const re = compiled(pattern);
  return re.exec(text)?.[0] ?? '';
}

function findAll(text: string, pattern: string, limit = -1n): string[] {
  if (limit === 0n) return [];
  const out: string[] = [];
  for (const match of text.matchAll(compiled(pattern))) {
    out.push(match[0]);
    if (limit > 0n && BigInt(out.length) >= limit) break;
  }
  return out;
}

/** Registers Kubernetes' regex library (find, findAll) on `env`. */
export function registerRegex(env: Environment): void {
  env
    .registerFunction('string.find(string): string', find)
    .registerFunction('string.findAll(string): list<string>', (s: string, p: string) =>
      findAll(s, p),
    )
    .registerFunction('string.findAll(string, int): list<string>', findAll);
}
