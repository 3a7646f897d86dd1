// Regular expressions. CEL specifies RE2; the CEL library uses JS RegExp. Syntax that JS reads
// differently from RE2 is refused (at load time when the pattern is a literal), and the policy
// server runs V8 with --enable-experimental-regexp-engine-on-excessive-backtracks, so a
// catastrophic pattern falls back to a linear-time engine instead of stalling the process.
import { setFlagsFromString } from 'node:v8';
import type { Environment } from '@marcbachmann/cel-js';
import { BACKTRACKING_MATCH_UNITS, charge, chargeResult, surcharge } from './meter.ts';

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

/** Whether V8's linear-time engine takes `source` (hasLinearEngine first). */
function linear(source: string): boolean {
  try {
    new RegExp(source, 'l');
    return true;
  } catch {
    return false;
  }
}

/** Backtracking paths at most of a pattern accepted by smallAnchored. */
const MAX_PATHS = 4096;

/**
 * Whether `pattern` is anchored at the start and every match attempt is short: no `*`, `+` or
 * `{n,}`, no top-level alternation, and at most MAX_PATHS ways to try it (the product of each
 * quantifier's choices). V8's linear engine refuses counts above 16 (`[a-z0-9-]{0,62}`, the
 * usual DNS label), and so cannot take over from backtracking for them; anchored and short,
 * backtracking costs a constant per call instead.
 */
function smallAnchored(pattern: string): boolean {
  if (!pattern.startsWith('^')) return false;
  let paths = 1;
  let depth = 0;
  for (let i = 1; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\') i++;
    else if (c === '[') {
      for (i++; i < pattern.length && pattern[i] !== ']'; i++) if (pattern[i] === '\\') i++;
    } else if (c === '(') {
      depth++;
      if (pattern[i + 1] === '?') i++;
    } else if (c === ')') depth--;
    else if (c === '*' || c === '+' || (c === '|' && depth === 0)) return false;
    else if (c === '?') paths *= 2;
    else if (c === '{') {
      const count = /^\{(\d+)(?:,(\d*))?\}/.exec(pattern.slice(i));
      if (!count) continue;
      if (count[2] === '') return false;
      paths *= Number(count[2] ?? count[1]) + 1;
      i += count[0].length - 1;
    }
    if (paths > MAX_PATHS) return false;
  }
  return true;
}

/**
 * Why matching `pattern` may cost more than a small constant per input character; undefined
 * when it cannot. Accepted, without a repeated ambiguous group: what V8's linear-time engine
 * accepts (so it takes over from backtracking), or accepts with its counts lowered to 16 when
 * the pattern is anchored and short (smallAnchored). Without that engine (an older V8), only
 * patterns without backreferences and lookarounds.
 */
export function superlinearRegex(pattern: string): string | undefined {
  const unsupported = unsupportedRegex(pattern);
  if (unsupported) return unsupported;
  const what = `regular expression ${JSON.stringify(pattern)}`;
  if (repeatsAmbiguousGroup(pattern))
    return `${what} repeats a group that holds a quantifier or an alternation (catastrophic backtracking)`;
  if (hasLinearEngine()) {
    // Lowered counts: the linear engine then says whether anything else stops it.
    const lowered = () =>
      pattern.replace(/\{\d+(,\d*)?\}/g, (count) =>
        count.replace(/\d+/g, (n) => String(Math.min(Number(n), 16))),
      );
    if (!linear(pattern) && !(smallAnchored(pattern) && linear(lowered())))
      return `${what} is refused by V8's linear-time engine (a backreference, a lookahead, or a repetition count above 16 in a pattern not anchored and short)`;
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

/** Cost units per match attempt of `pattern` beyond reading the text, by pattern (bounded). */
const matchUnits = new Map<string, number>();

/**
 * What one match of `pattern` may cost beyond reading the text: a pattern V8's linear-time
 * engine does not take from the start may backtrack 50,000 times before V8 switches to it (a
 * backreference or a lookaround never switches: only the thread's deadline stops those).
 */
function backtrackingUnits(pattern: unknown): number {
  if (typeof pattern !== 'string') return 0;
  let units = matchUnits.get(pattern);
  if (units === undefined) {
    units = superlinearRegex(pattern) === undefined ? 0 : BACKTRACKING_MATCH_UNITS;
    if (matchUnits.size >= CACHE_LIMIT) matchUnits.clear();
    matchUnits.set(pattern, units);
  }
  return units;
}

function find(text: string, pattern: string): string {
  const re = compiled(pattern);
  charge(backtrackingUnits(pattern));
  return re.exec(text)?.[0] ?? '';
}

function findAll(text: string, pattern: string, limit = -1n): string[] {
  if (limit === 0n) return [];
  const re = compiled(pattern);
  const attempt = backtrackingUnits(pattern);
  charge(attempt);
  const out: string[] = [];
  // Each match is charged as it is found: an empty pattern matches at every character.
  for (const match of text.matchAll(re)) {
    chargeResult(1);
    charge(attempt);
    out.push(match[0]);
    if (limit > 0n && BigInt(out.length) >= limit) break;
  }
  return out;
}

// The CEL library's `matches` compiles and runs its pattern on each call.
surcharge('matches', (operands) => backtrackingUnits(operands[1]));

/** Registers Kubernetes' regex library (find, findAll) on `env`. */
export function registerRegex(env: Environment): void {
  env
    .registerFunction('string.find(string): string', find)
    .registerFunction('string.findAll(string): list<string>', (s: string, p: string) =>
      findAll(s, p),
    )
    .registerFunction('string.findAll(string, int): list<string>', findAll);
}
