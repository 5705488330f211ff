export * from './limiter/store.js';
export * from './rules/duration.js';
export * from './rules/schema.js';
