/**
 * Declarations of environment variables: each says once what it means, what it takes, its default
 * and how it is checked. `readEnv` (read-env.ts) reads a whole table of them; docs tests read the
 * same table, so the documentation cannot forget a variable.
 *
 * Every problem is worded the same way, after `NAME: `: what the value must be, then the value seen
 * in `(got "…")`, except for secrets (passwords, tokens), whose values are never echoed.
 */

/** A parsed value, or what is wrong with the raw one (the text that follows `NAME: `). */
export type Parsed<T> = { value: T } | { problem: string };

export interface EnvVar<T> {
  /** one line saying what the variable does */
  readonly description: string;
  /** what values it takes, e.g. `integer 0–65535` or `one of local, open, closed` */
  readonly accepts: string;
  /** the default as a reader sees it: `8080`, `unset`, `required` */
  readonly defaultText: string;
  /** unset (or empty) is a problem */
  readonly required: boolean;
  /** shown in the "is required" problem, e.g. `http://rules-api:8081` */
  readonly example: string | undefined;
  /** the value is never echoed in a problem (it may hold a password or a token) */
  readonly secret: boolean;
  /** the value when the variable is unset or empty */
  readonly fallback: T;
  /** checks a trimmed, non-empty value */
  parse(raw: string): Parsed<T>;
}

export type AnyEnvVar = EnvVar<unknown>;

/** `(got "abc")`: the value a problem is about, quoted, cut short if long. */
export function got(raw: string): string {
  const shown = raw.length > 80 ? `${raw.slice(0, 80)}…` : raw;
  return `(got ${JSON.stringify(shown)})`;
}

interface Common {
  description: string;
  /** never echo the value in a problem */
  secret?: boolean;
  /** overrides the default `accepts` text */
  accepts?: string;
}

/** A whole number from `min` to `max` (digits only: no sign, no fraction, no exponent). */
export function envInteger(options: Common & { default: number; min: number; max: number }): EnvVar<number> {
  const { min, max } = options;
  const mustBe = `must be an integer from ${min} to ${max}`;
  return {
    description: options.description,
    accepts: options.accepts ?? `integer ${min}–${max}`,
    defaultText: String(options.default),
    required: false,
    example: undefined,
    secret: options.secret ?? false,
    fallback: options.default,
    parse(raw) {
      if (!/^[0-9]+$/.test(raw)) return { problem: `${mustBe} ${got(raw)}` };
      const n = Number(raw);
      if (n < min || n > max) return { problem: `${mustBe} ${got(raw)}` };
      return { value: n };
    },
  };
}

/** `true`/`false` (any case), or `1`/`0`. */
export function envBoolean(options: Common & { default: boolean }): EnvVar<boolean> {
  return {
    description: options.description,
    accepts: options.accepts ?? 'true or false',
    defaultText: String(options.default),
    required: false,
    example: undefined,
    secret: options.secret ?? false,
    fallback: options.default,
    parse(raw) {
      const lower = raw.toLowerCase();
      if (lower === 'true' || lower === '1') return { value: true };
      if (lower === 'false' || lower === '0') return { value: false };
      return { problem: `must be true or false ${got(raw)}` };
    },
  };
}

/** One of a fixed list of words, spelt exactly. */
export function envOneOf<const V extends string>(
  options: Common & { values: readonly V[]; default: NoInfer<V> },
): EnvVar<V> {
  const list = options.values.join(', ');
  return {
    description: options.description,
    accepts: options.accepts ?? `one of ${list}`,
    defaultText: options.default,
    required: false,
    example: undefined,
    secret: options.secret ?? false,
    fallback: options.default,
    parse(raw) {
      return (options.values as readonly string[]).includes(raw)
        ? { value: raw as V }
        : { problem: `must be one of ${list} ${got(raw)}` };
    },
  };
}

type TextOptions = Common & {
  /** the value must match this whole */
  pattern?: RegExp;
  /** what the value must be when it does not match `pattern`, e.g. `printable ASCII without spaces` */
  mustBe?: string;
};

/** Free text, optionally checked against a pattern. Without `default` or `required`, unset is `undefined`. */
export function envText(options: TextOptions & { default: string }): EnvVar<string>;
export function envText(options: TextOptions & { required: true; example: string }): EnvVar<string>;
export function envText(options: TextOptions & { defaultText?: string }): EnvVar<string | undefined>;
export function envText(
  options: TextOptions & { default?: string; required?: boolean; example?: string; defaultText?: string },
): EnvVar<string | undefined> {
  return custom<string | undefined>({
    ...options,
    accepts: options.accepts ?? (options.mustBe ? options.mustBe : 'text'),
    defaultText: options.defaultText,
    parse(raw) {
      if (options.pattern && !options.pattern.test(raw)) {
        const mustBe = `must be ${options.mustBe ?? `text matching ${options.pattern}`}`;
        return { problem: options.secret ? mustBe : `${mustBe} ${got(raw)}` };
      }
      return { value: raw };
    },
  });
}

type UrlOptions = Common & {
  /** accepted schemes, with their colon: `['redis:', 'rediss:']` */
  protocols: readonly string[];
  /** a URL of the expected shape, shown in problems */
  example: string;
  /** a further check; returns the problem (after `NAME: `) or undefined */
  check?: (url: URL) => string | undefined;
};

/**
 * A URL with one of `protocols`. The value is the URL as given (trimmed). A secret URL is never
 * echoed; its problems show at most the scheme.
 */
export function envUrl(options: UrlOptions & { required: true }): EnvVar<string>;
export function envUrl(options: UrlOptions): EnvVar<string | undefined>;
export function envUrl(options: UrlOptions & { required?: boolean }): EnvVar<string | undefined> {
  const schemes = options.protocols.map((p) => `${p}//`);
  const startWith =
    schemes.length === 1 ? schemes[0] : `${schemes.slice(0, -1).join(', ')} or ${schemes.at(-1)}`;
  return custom<string | undefined>({
    ...options,
    accepts: options.accepts ?? `URL starting with ${startWith}`,
    parse(raw) {
      let url: URL;
      try {
        url = new URL(raw);
      } catch {
        const mustBe = `must be a URL like ${options.example}`;
        return { problem: options.secret ? mustBe : `${mustBe} ${got(raw)}` };
      }
      if (!options.protocols.includes(url.protocol)) {
        const mustBe = `must start with ${startWith}`;
        const seen = options.secret ? `(got scheme ${JSON.stringify(url.protocol)})` : got(raw);
        return { problem: `${mustBe} ${seen}` };
      }
      const problem = options.check?.(url);
      return problem === undefined ? { value: raw } : { problem };
    },
  });
}

/**
 * Any other variable: `parse` words its own problems (use `got(raw)` to show the value, unless secret).
 * Without `default` or `required`, unset is `undefined`.
 */
export function envCustom<T>(
  options: Common & {
    accepts: string;
    parse: (raw: string) => Parsed<T>;
    default: T;
    defaultText?: string;
  },
): EnvVar<T>;
export function envCustom<T>(
  options: Common & { accepts: string; parse: (raw: string) => Parsed<T>; required: true; example: string },
): EnvVar<T>;
export function envCustom<T>(
  options: Common & { accepts: string; parse: (raw: string) => Parsed<T>; defaultText?: string },
): EnvVar<T | undefined>;
export function envCustom<T>(
  options: Common & {
    accepts: string;
    parse: (raw: string) => Parsed<T>;
    default?: T;
    required?: boolean;
    example?: string;
    defaultText?: string;
  },
): EnvVar<T | undefined> {
  return custom<T | undefined>(options);
}

function custom<T>(
  options: Common & {
    accepts: string;
    parse: (raw: string) => Parsed<T>;
    default?: T;
    required?: boolean;
    example?: string;
    defaultText?: string | undefined;
  },
): EnvVar<T> {
  const required = options.required ?? false;
  return {
    description: options.description,
    accepts: options.accepts,
    defaultText:
      options.defaultText ??
      (required ? 'required' : options.default === undefined ? 'unset' : String(options.default)),
    required,
    example: options.example,
    secret: options.secret ?? false,
    fallback: options.default as T,
    parse: options.parse,
  };
}

/** pino's levels, quietest last. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** `LOG_LEVEL`, the same in both processes. */
export const LOG_LEVEL_VAR: EnvVar<LogLevel> = envOneOf({
  description: 'how much the process logs (JSON lines on stdout)',
  values: LOG_LEVELS,
  default: 'info',
});
