/**
 * What the demo prints: children's JSON log lines turned into one short line each behind the service
 * name, and colour only on a terminal (never when piped, or with NO_COLOR), so tests and logs read
 * plain text.
 */

const useColour = process.stdout.isTTY === true && !process.env.NO_COLOR;

const CODES = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  cyan: [36, 39],
};
export type Style = keyof typeof CODES;

export function style(name: Style, text: string): string {
  if (!useColour) return text;
  const [on, off] = CODES[name];
  return `\u001b[${on}m${text}\u001b[${off}m`;
}

/** pino's numeric levels */
const LEVELS: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
const SKIPPED_KEYS = new Set(['level', 'time', 'pid', 'hostname', 'msg']);
const NAME_WIDTH = 9;

/** `gateway   │ WARN  message key=value …`; a line that is not a JSON log is shown as it is. */
export function formatChildLine(name: string, line: string): string {
  const prefix = style('dim', `${name.padEnd(NAME_WIDTH)}│`);
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `${prefix} ${line}`;
  }
  if (typeof entry !== 'object' || entry === null || typeof entry.level !== 'number')
    return `${prefix} ${line}`;
  const level = LEVELS[entry.level] ?? String(entry.level);
  const levelText = level.padEnd(5);
  const coloured =
    entry.level >= 50 ? style('red', levelText) : entry.level >= 40 ? style('yellow', levelText) : levelText;
  const extras = flatten(entry)
    .filter(([key]) => !SKIPPED_KEYS.has(key))
    .map(([key, value]) => `${key}=${value}`)
    .join(' ');
  return `${prefix} ${coloured} ${String(entry.msg ?? '')}${extras ? ` ${style('dim', extras)}` : ''}`;
}

/** One level of nesting as `a.b`; deeper objects as JSON; stacks left out (the message carries the point). */
function flatten(entry: Record<string, unknown>): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [key, value] of Object.entries(entry)) {
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      for (const [inner, v] of Object.entries(value as Record<string, unknown>)) {
        if (inner === 'stack') continue;
        out.push([`${key}.${inner}`, typeof v === 'object' ? JSON.stringify(v) : String(v)]);
      }
    } else {
      out.push([key, typeof value === 'string' ? value : JSON.stringify(value)]);
    }
  }
  return out;
}
