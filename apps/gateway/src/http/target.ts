/**
 * The request-target and Host as the gateway reads them (docs/gateway.md): normalised once, BEFORE
 * routing, so routing, rule matching and forwarding all see the same path and host.
 *
 * Fastify routes on `req.url` before any hook runs, so normalising in a hook would be too late:
 * `/orders/../admin` would already be routed to the `/orders` upstream. `rewriteTarget` runs as
 * Fastify's `rewriteUrl`: it hands the router `<normalised path>?<original query>`, which Fastify
 * keeps as `req.url` (the raw target stays in `req.originalUrl`). A target or Host that cannot be
 * read safely is routed to REFUSED_TARGET_URL, a URL no normalised target can be; the admission hook
 * answers it 400, never proxied, and reads the reason again (a refusal is rare: it costs nothing to
 * the requests that pass).
 */
import type { IncomingMessage } from 'node:http';
import {
  type NormalizedHost,
  normalizeHost,
  normalizePath,
  type RequestHost,
  requestHostOf,
} from '@sluice/shared';
import type { FastifyInstance } from 'fastify';

/** Where a refused target or host is routed: NUL is never left in a normalised path. */
export const REFUSED_TARGET_URL = '/%00';

/** Most Host values whose reading is remembered (a gateway sees a handful; a flood of others only churns it). */
const READ_HOSTS_MAX = 1_024;
const readHosts = new Map<string, NormalizedHost>();

/**
 * `normalizeHost`, remembered per value: every request's Host is read before routing and again by the
 * admission hook (and by the router's host constraint), and a gateway sees the same few values.
 */
function readHost(value: string | undefined): NormalizedHost {
  if (value === undefined) return normalizeHost(value);
  let host = readHosts.get(value);
  if (host === undefined) {
    host = normalizeHost(value);
    if (readHosts.size >= READ_HOSTS_MAX) readHosts.clear();
    readHosts.set(value, host);
  }
  return host;
}

/** Fastify `rewriteUrl`: the normalised target, or REFUSED_TARGET_URL. */
export function rewriteTarget(req: IncomingMessage): string {
  const target = normalizePath(req.url ?? '');
  if (!target.ok || !requestHost(req).ok) return REFUSED_TARGET_URL;
  return target.query === '' ? target.path : `${target.path}?${target.query}`;
}

/**
 * Node keeps the first of several Host headers in `req.headers` and drops the rest, so only the raw
 * header list shows a second one: an upstream or a cache in front of us might read the other.
 */
export function requestHost(req: IncomingMessage): RequestHost {
  const raw = req.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host' && ++seen > 1) break;
  }
  // Node's own check for a missing Host is off so that this answer, like every other, carries a code
  // (see app.ts); explain reads its Host lines with the same requestHostOf
  const http11 = req.httpVersionMajor === 1 && req.httpVersionMinor >= 1;
  return requestHostOf(seen, req.headers.host, http11, readHost);
}

/**
 * The normalised host of a request `rewriteTarget` let through (lower case, no port, no trailing
 * dot), or undefined when it names none.
 */
export function hostOf(req: IncomingMessage): string | undefined {
  const host = readHost(req.headers.host);
  return host.ok && host.host !== '' ? host.host : undefined;
}

/** The router's host constraint: an UPSTREAMS entry naming a host is registered under it. */
export const HOST_CONSTRAINT = 'sluiceHost';
type ConstraintStrategy = Parameters<FastifyInstance['addConstraintStrategy']>[0];
type RouteHandler = NonNullable<ReturnType<ReturnType<ConstraintStrategy['storage']>['get']>>;
export const hostConstraintStrategy: ConstraintStrategy = {
  name: HOST_CONSTRAINT,
  // a request for a host no entry names falls back to the entries that name none
  mustMatchWhenDerived: false,
  storage() {
    const hosts = new Map<string, RouteHandler>();
    return {
      get: (host: string) => hosts.get(host) ?? null,
      set: (host: string, handler: RouteHandler) => {
        hosts.set(host, handler);
      },
    };
  },
  deriveConstraint: (req: IncomingMessage) => hostOf(req) ?? '',
};
