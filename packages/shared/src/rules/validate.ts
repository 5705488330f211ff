/**
 * Validating untrusted values outside Fastify (the gateway's snapshots, the rules-file CLI): the
 * compiled schemas, then `checkRule`, with errors named by field as the rules API names them.
 */
import Compile from 'typebox/compile';
import type { RuleFieldError } from '../format/fields.js';
import { checkRule } from './check.js';
import { type Rule, type RuleInput, RuleInputSchema, RuleSchema } from './schema.js';

/** Schema errors come several per field (a union reports each branch); the last one sums them up. */
function lastPerField(errors: RuleFieldError[]): RuleFieldError[] {
  const byField = new Map<string, RuleFieldError>();
  for (const e of errors) {
    byField.delete(e.field);
    byField.set(e.field, e);
  }
  return [...byField.values()];
}

const inputValidator = Compile(RuleInputSchema);
const ruleValidator = Compile(RuleSchema);

function pointerToField(instancePath: string): string {
  return instancePath.replace(/^\//, '').replaceAll('/', '.') || '(body)';
}

/** Validates an untrusted value as a rule input (schema, then `checkRule`). Used outside Fastify. */
export function validateRuleInput(
  value: unknown,
): { ok: true; value: RuleInput } | { ok: false; errors: RuleFieldError[] } {
  if (!inputValidator.Check(value)) {
    const errors = inputValidator.Errors(value).map((e) => {
      const params = e.params as { additionalProperties?: string[]; requiredProperties?: string[] };
      const extra = params.additionalProperties?.[0] ?? params.requiredProperties?.[0];
      const base = pointerToField(e.instancePath);
      const field = extra ? (base === '(body)' ? extra : `${base}.${extra}`) : base;
      let message = e.message;
      if (extra && !params.requiredProperties) {
        message = base === 'match.headers' ? 'is not a valid header name' : 'is not a known field';
      }
      return { field, message };
    });
    return { ok: false, errors: lastPerField(errors) };
  }
  const errors = checkRule(value);
  return errors.length > 0 ? { ok: false, errors } : { ok: true, value };
}

/** True when a value has the full shape of a stored rule, either form (the gateway checks snapshots with it). */
export function isRule(value: unknown): value is Rule {
  return ruleValidator.Check(value);
}
