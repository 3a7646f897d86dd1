{{/*
The start scripts of redis.mode sentinel: those of deploy/components/redis-sentinel, with the
group's name, size and timings from redis.sentinel (chart.test.ts keeps them equal to the
component's files with the default values). Argument: .Values.redis.sentinel.
*/}}

{{- define "rollcall.redisScript" -}}
#!/bin/sh
# Starts one Redis of the StatefulSet: as a replica of the primary the Sentinels name, or,
# when no Sentinel knows one yet (a fresh install), pod 0 as the primary and the others as
# its replicas. A pod that was the primary and restarts empty before the Sentinels noticed
# comes back as an empty primary: the watcher then finds its synced marker gone and rebuilds.
set -eu
domain="rollcall-redis-nodes.${POD_NAMESPACE}.svc"
me="$(hostname).${domain}"
primary=""
for i in {{ until (int .sentinels) | join " " }}; do
  addr="$(redis-cli -h "rollcall-redis-sentinel-${i}.rollcall-redis-sentinel.${POD_NAMESPACE}.svc" \
    -p 26379 --raw SENTINEL get-master-addr-by-name {{ .masterName }} 2>/dev/null | head -n 1 || true)"
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
{{ end }}

{{- define "rollcall.sentinelScript" -}}
#!/bin/sh
# Starts one Sentinel: it monitors the primary another Sentinel names, else rollcall-redis-0
# (a fresh install). Sentinel rewrites its config as it learns the group, so the file lives
# in the pod's emptyDir.
set -eu
me="$(hostname).rollcall-redis-sentinel.${POD_NAMESPACE}.svc"
primary=""
for i in {{ until (int .sentinels) | join " " }}; do
  peer="rollcall-redis-sentinel-${i}.rollcall-redis-sentinel.${POD_NAMESPACE}.svc"
  [ "${peer}" = "${me}" ] && continue
  addr="$(redis-cli -h "${peer}" -p 26379 --raw SENTINEL get-master-addr-by-name {{ .masterName }} \
    2>/dev/null | head -n 1 || true)"
  if [ -n "${addr}" ]; then primary="${addr}"; break; fi
done
[ -n "${primary}" ] || primary="rollcall-redis-0.rollcall-redis-nodes.${POD_NAMESPACE}.svc"
# A primary silent for {{ divf .downAfterMilliseconds 1000 }} s is down once {{ .quorum }} of the {{ .sentinels }} Sentinels agree; docs/reliability.md has
# what that costs in status latency. The password (REDISCLI_AUTH, which redis-cli above used
# too): clients and the other Sentinels need it (requirepass), and Redis asks for it (auth-pass).
cat > /data/sentinel.conf <<CONF
port 26379
dir /data
requirepass ${REDISCLI_AUTH}
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip ${me}
sentinel monitor {{ .masterName }} ${primary} 6379 {{ .quorum }}
sentinel auth-pass {{ .masterName }} ${REDISCLI_AUTH}
sentinel down-after-milliseconds {{ .masterName }} {{ .downAfterMilliseconds }}
sentinel failover-timeout {{ .masterName }} {{ .failoverTimeout }}
sentinel parallel-syncs {{ .masterName }} {{ .parallelSyncs }}
CONF
exec redis-sentinel /data/sentinel.conf
{{ end }}
