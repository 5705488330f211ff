/**
 * The identity hook (an onRequest hook between admission and the limit hook): when the rule set reads
 * a verified identity (a `jwt` client, `match.claims`, `match.authenticated`) and the request carries
 * `Authorization: Bearer <token>`, the token is verified and its claims put in the request's context,
 * where the decision core reads them as one more fact (docs/rules.md, "Verified identity").
 *
 * A token verified before costs one cache lookup and the hook stays synchronous; a new one waits for
 * one signature check (or, with a JWKS, at most one shared key fetch per cool-down). A token that does
 * not verify leaves the request unauthenticated — keyed by its IP, matching no claim — and is never
 * answered 401 here: the gateway limits, the upstream authenticates.
 */
import { bearerToken, type DecisionCore, type TokenVerifier } from '@sluice/shared';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { GatewayMetrics } from '../telemetry/metrics.js';

export interface IdentityHookOptions {
  core: DecisionCore;
  /** undefined without JWT configuration: every request is unauthenticated */
  verifier: TokenVerifier | undefined;
  metrics: GatewayMetrics;
}

export function identityHook({ core, verifier, metrics }: IdentityHookOptions) {
  const verified = metrics.tokenVerifications.labels('ok');
  return (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const context = request.sluice;
    if (context === null || verifier === undefined || core.rules?.usesIdentity !== true) {
      done();
      return;
    }
    const token = bearerToken(context.joinedHeader('authorization'));
    if (token === undefined) {
      done();
      return;
    }
    const cached = verifier.cached(token);
    if (cached !== undefined) {
      context.verified = cached;
      done();
      return;
    }
    verifier.verify(token).then((outcome) => {
      if (outcome.ok) {
        verified.inc();
        context.verified = outcome.claims;
      } else {
        metrics.tokenVerifications.labels(outcome.reason).inc();
        // the token itself is never logged: it is a credential
        request.log.debug({ reason: outcome.reason }, 'bearer token not verified: keyed as unauthenticated');
      }
      done();
    });
  };
}
