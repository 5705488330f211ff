/**
 * Turns AJV errors into one message that names the field, in Fastify's `body/limit/capacity …`
 * style. AJV runs with `allErrors: false` (a hostile body cannot make it collect thousands of
 * errors), so there is one failing keyword, preceded by the failures of each branch of an `anyOf`.
 */
import type { FastifySchemaValidationError, SchemaErrorDataVar } from 'fastify/types/schema.js';

interface AjvError extends FastifySchemaValidationError {
  /** present when AJV runs with `verbose: true` (the body validator does) */
  parentSchema?: { description?: string };
}

function describe(error: AjvError, dataVar: string): string {
  const at = `${dataVar}${error.instancePath}`;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'additionalProperties':
      return `${at} must not have additional property '${String(params.additionalProperty)}'`;
    case 'required':
      return `${at} must have required property '${String(params.missingProperty)}'`;
    case 'enum':
      return `${at} must be one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'anyOf': {
      const description = error.parentSchema?.description;
      return description ? `${at} must be ${description}` : `${at} must match one of the allowed forms`;
    }
    case 'pattern':
      return `${at} must match pattern ${JSON.stringify(params.pattern)}`;
    default:
      return `${at} ${error.message ?? 'is invalid'}`;
  }
}

/** Fastify's `schemaErrorFormatter`: the `anyOf` summary wins over the branch errors before it. */
export function formatSchemaErrors(
  errors: FastifySchemaValidationError[],
  dataVar: SchemaErrorDataVar,
): Error {
  const chosen = (errors.find((e) => e.keyword === 'anyOf') ?? errors[0]) as AjvError | undefined;
  return new Error(chosen ? describe(chosen, dataVar) : `${dataVar} is invalid`);
}
