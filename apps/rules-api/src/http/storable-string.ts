/**
 * What a string must not hold to be stored and compared by Postgres: shared by the body parser and
 * the cursor decoder, so both refuse the same strings with a 400 instead of failing in the database.
 */

/** A UTF-16 surrogate without its other half (`String#isWellFormed` is ES2024, beyond our lib). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Why `value` cannot be stored, or `undefined` when it can. U+0000: Postgres text and JSON cannot
 * hold it (the write fails). A lone surrogate (`"\ud800"`) is not Unicode: Postgres refuses it in
 * JSON, and in text it would silently become U+FFFD.
 */
export function whyNotStorable(value: string): string | undefined {
  if (value.includes('\u0000')) return 'must not contain the NUL character (U+0000)';
  if (LONE_SURROGATE.test(value)) return 'must not contain a lone surrogate (an unpaired \\ud800-\\udfff)';
  return undefined;
}
