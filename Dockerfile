# One Dockerfile, one target per process (docker-compose.yml builds each with `target:`):
#   rules-api  node dist/server.js     the rules API (runs migrations/ at start)
#   gateway    node dist/server.js     the rate-limiting proxy
#   demo       node dist/upstream.js   the demo upstream
#   cli        node dist/rules.js      the rules-file workflow (`apply`, `export`)
# e.g. `docker build --target gateway -t sluice-gateway .`
# Only classic-builder features are used, so docker-compose v1 builds it too.
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
# the pnpm major CI and the README use (pnpm 10); pinned so image builds are reproducible
ARG PNPM_VERSION=10.34.9
ENV CI=true
RUN npm install --global pnpm@${PNPM_VERSION}
WORKDIR /repo
# Dependencies come from the lockfile alone, so editing sources does not fetch them again.
COPY pnpm-lock.yaml pnpm-workspace.yaml .npmrc ./
RUN pnpm fetch
COPY . .
RUN pnpm install --offline --frozen-lockfile && pnpm build
# One self-contained directory per app: its dist/ and production node_modules, with the workspace
# packages it uses copied in (not linked). --legacy: the workspace does not inject workspace packages.
RUN for app in rules-api gateway demo cli; do \
      pnpm --filter "@sluice/$app" --prod deploy --legacy "/out/$app" \
      && rm -rf "/out/$app/src" "/out/$app/test" || exit 1; \
    done \
 && cp -R migrations /out/rules-api/migrations \
 && cp apps/demo/demo-rules.yaml /out/cli/demo-rules.yaml

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
# Files stay owned by root: the processes (user node) can read them, not change them.
# Slim images have no curl: healthchecks use `node -e "fetch(…)"`.

FROM runtime AS rules-api
COPY --from=build /out/rules-api /app
# DATA_DIR only matters without DATABASE_URL (embedded PGlite, single replica)
ENV PORT=8081 MIGRATIONS_DIR=/app/migrations DATA_DIR=/data
RUN mkdir /data && chown node:node /data
USER node
EXPOSE 8081
CMD ["node", "dist/server.js"]

FROM runtime AS gateway
COPY --from=build /out/gateway /app
ENV PORT=8080 ADMIN_PORT=9090
USER node
EXPOSE 8080 9090
CMD ["node", "dist/server.js"]

FROM runtime AS demo
COPY --from=build /out/demo /app
ENV PORT=3000
USER node
EXPOSE 3000
CMD ["node", "dist/upstream.js"]

FROM runtime AS cli
COPY --from=build /out/cli /app
USER node
ENTRYPOINT ["node", "dist/rules.js"]
CMD ["--help"]
