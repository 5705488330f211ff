export * from './http/normalize-path.js';
export * from './http/path-segments.js';
export * from './limiter/store.js';
export * from './rules/duration.js';
export * from './rules/match.js';
export * from './rules/schema.js';
