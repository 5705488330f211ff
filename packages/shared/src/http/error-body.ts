/**
 * The one shape of every error body both apps answer with: `{ statusCode, error, message, code }`,
 * `error` being the HTTP reason phrase of `statusCode` and `code` the stable name clients and log
 * searches use.
 */
import { STATUS_CODES } from 'node:http';

export interface ErrorBody {
  statusCode: number;
  /** the HTTP reason phrase, e.g. `Too Many Requests` */
  error: string;
  message: string;
  code: string;
}

export function errorBody(statusCode: number, code: string, message: string): ErrorBody {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code };
}
