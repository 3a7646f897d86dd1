// rollcall's logger: pino JSON lines with credentials censored, for every role. Its own module
// (pino only) so that a role that needs nothing else, like the policy server, starts fast.
import { pino, type DestinationStream, type Logger } from 'pino';

/** Paths pino censors in every log line, whatever object a line carries. */
const redactedPaths = [
  'token',
  '*.token',
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'uiCredentials',
  '*.uiCredentials',
  'credentials',
  '*.credentials',
  // A Redis URL may carry a password (redis://:secret@host).
  'redisUrl',
  '*.redisUrl',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = { level, redact: { paths: redactedPaths, censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}
