export * from './limiter/store.js';
export * from './rules/duration.js';
export * from './rules/schema.js';
export * from './http/normalize-path.js';
export * from './http/path-segments.js';
