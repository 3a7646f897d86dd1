// Response headers of the operator UIs (status page and queue UI): no page of another site
// may frame them (a click on a framed queue action would carry the operator's credentials),
// and the pages load scripts, styles and data from their own origin only.
import type { MiddlewareHandler } from 'hono';
import { secureHeaders } from 'hono/secure-headers';

/**
 * What the pages may load. Inline styles are allowed (the status page's own `<style>`, Bull
 * Board's style attributes); inline scripts are not, and neither page has one. Bull Board's
 * Google Fonts stylesheet is refused on purpose: the page falls back to the browser's fonts
 * and an operator's visit is not announced to a third party.
 */
export const UI_CONTENT_SECURITY_POLICY = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'", "'unsafe-inline'"],
  imgSrc: ["'self'", 'data:'],
  fontSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  objectSrc: ["'none'"],
  baseUri: ["'self'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
};

/** The headers, set on every UI answer (refusals included). */
export function uiHeaders(): MiddlewareHandler {
  return secureHeaders({
    contentSecurityPolicy: UI_CONTENT_SECURITY_POLICY,
    xFrameOptions: 'DENY',
    // Same-origin requests keep their Referer and Origin (the write check reads Origin).
    referrerPolicy: 'same-origin',
    // Served over plain HTTP (a port-forward, or TLS ended in front): HSTS is not ours to set.
    strictTransportSecurity: false,
  });
}
