/**
 * The limit hook (the second onRequest hook): the request's context is the facts, the decision core
 * decides, and the `Decision` becomes the answer — RateLimit headers and on to the proxy, a 429, or
 * a 503. It runs before Fastify reads any body, so a denied request's body is never read or forwarded.
 * What depends only on the rule (the 429 bodies around their number) is built once per rule.
 */
import type { IncomingMessage } from 'node:http';
import {
  type Decision,
  type DecisionCore,
  type LimitedDecision,
  type RulePlan,
  rateLimitHeader,
  retryAfterSeconds,
} from '@sluice/shared';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { GatewayMetrics } from '../telemetry/metrics.js';
import {
  closeIfBodyPending,
  PROBLEM_JSON_TYPE,
  type QuotaExceededParts,
  quotaExceededBody,
  quotaExceededParts,
} from './answers.js';
import { errorBody, GatewayError } from './errors.js';
import type { RequestContext } from './request-context.js';

const JSON_TYPE = 'application/json; charset=utf-8';

/** The HTTP answers of one rule, built on its first denial or failure and kept with its plan. */
interface RuleAnswers {
  /** the 429 body's constant parts (answers.ts) */
  readonly quotaExceeded: QuotaExceededParts;
  /** the 503 body up to its `requestId` */
  readonly unavailableBodyPrefix: string;
}

export interface LimitHookOptions {
  core: DecisionCore;
  metrics: GatewayMetrics;
}

export function limitHook({ core, metrics }: LimitHookOptions) {
  const answersByRule = new WeakMap<RulePlan, RuleAnswers>();
  const answersOf = (rule: RulePlan): RuleAnswers => {
    let answers = answersByRule.get(rule);
    if (answers === undefined) {
      answers = ruleAnswers(rule);
      answersByRule.set(rule, answers);
    }
    return answers;
  };

  function answer(
    decision: Decision,
    context: RequestContext,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ) {
    const raw = reply.request.raw;
    switch (decision.kind) {
      case 'not-ready':
        metrics.badRequests.labels('SLUICE_RULES_NOT_LOADED').inc();
        closeIfBodyPending(raw, reply);
        reply
          .code(503)
          .header('retry-after', '1')
          .send(
            errorBody('SLUICE_RULES_NOT_LOADED', 'the gateway has not loaded its rules yet', {
              requestId: reply.request.id,
            }),
          );
        return;
      case 'no-rule':
      case 'unlimited':
      case 'preview':
        proceed(raw, reply, done);
        return;
      case 'open':
        // admitted without a decision: the policy is known, no numbers are
        context.limited = true;
        // a shadow rule's dry run changes nothing a client can see (SPEC §4, draft-11)
        context.shadow = decision.rule.shadow;
        if (!decision.rule.shadow) reply.header('ratelimit-policy', decision.rule.policyHeader);
        proceed(raw, reply, done);
        return;
      case 'unavailable':
        context.limited = true;
        reply.header('ratelimit-policy', decision.rule.policyHeader);
        closeIfBodyPending(raw, reply);
        reply
          .code(503)
          .header('retry-after', String(retryAfterSeconds(decision)))
          .type(JSON_TYPE)
          .send(`${answersOf(decision.rule).unavailableBodyPrefix}${JSON.stringify(reply.request.id)}}`);
        return;
      case 'limited':
        answerLimited(decision, context, reply, done);
        return;
    }
  }

  function answerLimited(
    decision: LimitedDecision,
    context: RequestContext,
    reply: FastifyReply,
    done: HookHandlerDoneFunction,
  ): void {
    const rule = decision.rule;
    const raw = reply.request.raw;
    context.limited = true;
    // a shadow rule's dry run changes nothing a client can see (SPEC §4, draft-11)
    context.shadow = rule.shadow;
    if (!rule.shadow) {
      reply.header('ratelimit-policy', rule.policyHeader);
      reply.header('ratelimit', rateLimitHeader(rule.limits, decision));
    }
    if (!decision.refused) {
      const exchange = decision.exchange;
      if (exchange !== undefined) context.hold(exchange, reply.raw);
      proceed(raw, reply, done);
      return;
    }
    const retryAfterSec = retryAfterSeconds(decision);
    closeIfBodyPending(raw, reply);
    reply
      .code(429)
      .header('retry-after', String(retryAfterSec))
      .type(PROBLEM_JSON_TYPE)
      .send(quotaExceededBody(answersOf(rule).quotaExceeded, decision, retryAfterSec, reply.request.id));
  }

  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const context = request.sluice;
    // the admission hook runs first and gives every request it lets through a context
    if (context === null) {
      done(new GatewayError('SLUICE_INTERNAL', 'request reached the limit hook without a context'));
      return;
    }
    const decision = core.decide(context);
    if (decision instanceof Promise) {
      // one reaction, no promise chained behind it: an answer that throws is logged here
      decision.then(
        (decided) => {
          try {
            answer(decided, context, reply, done);
          } catch (error) {
            request.log.error({ err: error }, 'limit hook failed after its decision');
          }
        },
        (error: unknown) => done(error as Error),
      );
      return;
    }
    answer(decision, context, reply, done);
  };
}

function ruleAnswers(rule: RulePlan): RuleAnswers {
  const name = rule.name;
  return {
    quotaExceeded: quotaExceededParts(rule),
    unavailableBodyPrefix: `${JSON.stringify(
      errorBody('SLUICE_STORE_UNAVAILABLE', `the rate limit store is unavailable (rule "${name}")`),
    ).slice(0, -1)},"requestId":`,
  };
}

/**
 * On to the proxy. A client that asked `Expect: 100-continue` is told to send its body only now,
 * once admitted (the server re-emits such requests without answering them, see app.ts).
 */
function proceed(raw: IncomingMessage, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  if (raw.headers.expect !== undefined && raw.headers.expect.toLowerCase() === '100-continue') {
    reply.raw.writeContinue();
  }
  done();
}
