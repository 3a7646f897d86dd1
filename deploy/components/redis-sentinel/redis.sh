#!/bin/sh
# Starts one Redis of the StatefulSet: as a replica of the primary the Sentinels name, or,
# when no Sentinel knows one yet (a fresh install), pod 0 as the primary and the others as
# its replicas. A pod that was the primary and restarts empty before the Sentinels noticed
# comes back as an empty primary: the watcher then finds its synced marker gone and rebuilds.
set -eu
domain="rollcall-redis-nodes.${POD_NAMESPACE}.svc"
me="$(hostname).${domain}"
primary=""
for i in 0 1 2; do
  addr="$(redis-cli -h "rollcall-redis-sentinel-${i}.rollcall-redis-sentinel.${POD_NAMESPACE}.svc" \
    -p 26379 --raw SENTINEL get-master-addr-by-name rollcall 2>/dev/null | head -n 1 || true)"
  if [ -n "${addr}" ]; then primary="${addr}"; break; fi
done
[ -n "${primary}" ] || primary="rollcall-redis-0.${domain}"
# The password (REDISCLI_AUTH, which redis-cli above used too): clients need it, and a replica
# gives it to its primary. noeviction: BullMQ must never lose a key to memory pressure. Nothing
# on disk: replicas are the redundancy. Replicas announce their DNS name, which the Sentinels
# hand out.
set -- redis-server --requirepass "${REDISCLI_AUTH}" --masterauth "${REDISCLI_AUTH}" \
  --maxmemory-policy noeviction --save '' --appendonly no --dir /data \
  --replica-announce-ip "${me}"
if [ "${primary}" != "${me}" ]; then set -- "$@" --replicaof "${primary}" 6379; fi
echo "starting as $([ "${primary}" = "${me}" ] && echo primary || echo "replica of ${primary}")"
exec "$@"
