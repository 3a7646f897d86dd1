// Regular expressions. CEL specifies RE2; the CEL library uses JS RegExp. Syntax that JS reads
// differently from RE2 is refused (at load time when the pattern is a literal), and the policy
// server runs V8 with --enable-experimental-regexp-engine-on-excessive-backtracks, so a
// catastrophic pattern falls back to a linear-time engine instead of stalling the process.
import { setFlagsFromString } from 'node:v8';
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

/** Whether V8 takes the `l` flag (its linear-time engine): undefined until first asked. */
let linearEngine: boolean | undefined;
function hasLinearEngine(): boolean {
  if (linearEngine === undefined) {
    try {
      // Only makes V8 recognize the `l` flag; nothing else changes (policies run without it).
      setFlagsFromString('--enable-experimental-regexp-engine');
      new RegExp('', 'l');
      linearEngine = true;
    } catch {
      linearEngine = false;
    }
  }
  return linearEngine;
}

/**
 * Whether a repeated group holds a quantifier or an alternation (`(a+)+`, `(a|aa)*`): the
 * shapes that backtrack catastrophically. V8 falls back to its linear engine only after
 * 50,000 backtracks of one match, too many to run per element of a list.
 */
function repeatsAmbiguousGroup(pattern: string): boolean {
  const groups: boolean[] = []; // per open group: holds a quantifier or an alternation
  let closed = false; // the previous token closed a group that holds one
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    const repeats = c === '*' || c === '+' || (c === '{' && /^\{\d+,\d*\}/.test(pattern.slice(i)));
    if (repeats && closed) return true;
    closed = false;
    if (c === '\\') i++;
    else if (c === '[') {
      for (i++; i < pattern.length && pattern[i] !== ']'; i++) if (pattern[i] === '\\') i++;
    } else if (c === '(') {
      groups.push(false);
      if (pattern[i + 1] === '?') i++; // (?: (?= (?<name> are not quantifiers
    } else if (c === ')') closed = groups.pop() ?? false;
    else if (repeats || c === '?' || c === '|') {
      if (groups.length > 0) groups[groups.length - 1] = true;
    }
    if (c === ')' && closed && groups.length > 0) groups[groups.length - 1] = true;
  }
  return false;
}

/**
 * Why matching `pattern` may cost more than a small constant per input character; undefined
 * when it cannot. Accepted: what V8's linear-time engine accepts (so the backtracking engine's
 * fallback can take over), without a repeated ambiguous group. Without that engine (an older
 * V8), only patterns without backreferences and lookarounds.
 */
export function superlinearRegex(pattern: string): string | undefined {
  const unsupported = unsupportedRegex(pattern);
  if (unsupported) return unsupported;
  const what = `regular expression ${JSON.stringify(pattern)}`;
  if (repeatsAmbiguousGroup(pattern))
    return `${what} repeats a group that holds a quantifier or an alternation (catastrophic backtracking)`;
  if (hasLinearEngine()) {
    try {
      new RegExp(pattern, 'l');
    } catch {
      return `${what} is refused by V8's linear-time engine (a backreference, a lookahead, or a repetition count above 16)`;
    }
  } else if (/\\[1-9]|\\k<|\(\?<?[=!]/.test(pattern)) {
    return `${what} has a backreference or a lookaround`;
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
