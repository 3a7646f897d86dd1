// When a certificate is renewed: once two thirds of its life have passed (the last third
// is the margin for a renewal that fails and must be retried).
export interface Lifetime {
  notBefore: Date;
  notAfter: Date;
}

export function renewalTime({ notBefore, notAfter }: Lifetime): Date {
  const start = notBefore.getTime();
  return new Date(start + Math.floor(((notAfter.getTime() - start) * 2) / 3));
}

export function isDueForRenewal(lifetime: Lifetime, now: Date): boolean {
  return now.getTime() >= renewalTime(lifetime).getTime();
}
