import { describeRoutes } from './routes.suite.js';
import { pgliteBackend } from './support/app.js';

describeRoutes('PGlite', pgliteBackend);
