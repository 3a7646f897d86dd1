// Conversions Kubernetes' CEL has and the CEL library lacks: string() and int() of timestamps,
// string() of durations, in cel-go's formats (RFC 3339 with trimmed fractions, "3723.5s").
import type { Environment } from '@marcbachmann/cel-js';
import type { Duration } from '@marcbachmann/cel-js/evaluator';

/** RFC 3339 as cel-go prints it: UTC, fractional seconds without trailing zeros. */
export function timestampString(t: Date): string {
  return t
    .toISOString()
    .replace(/\.(\d*?)0*Z$/, (_m, digits: string) => (digits ? `.${digits}Z` : 'Z'));
}

/** A duration as cel-go prints it: seconds with a trimmed fraction, e.g. "3723s", "1.5s". */
export function durationString(d: Duration): string {
  const negative = d.seconds < 0n || d.nanos < 0;
  const seconds = d.seconds < 0n ? -d.seconds : d.seconds;
  const nanos = Math.abs(d.nanos);
  const fraction = nanos === 0 ? '' : `.${String(nanos).padStart(9, '0').replace(/0+$/, '')}`;
  return `${negative ? '-' : ''}${seconds}${fraction}s`;
}

/** Registers the conversions on `env`. */
export function registerConversions(env: Environment): void {
  env
    .registerFunction('string(google.protobuf.Timestamp): string', timestampString)
    .registerFunction('string(google.protobuf.Duration): string', durationString)
    .registerFunction('int(google.protobuf.Timestamp): int', (t: Date) =>
      BigInt(Math.floor(t.getTime() / 1000)),
    );
}
