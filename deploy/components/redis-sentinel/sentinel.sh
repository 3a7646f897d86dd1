#!/bin/sh
# Starts one Sentinel: it monitors the primary another Sentinel names, else rollcall-redis-0
# (a fresh install). Sentinel rewrites its config as it learns the group, so the file lives
# in the pod's emptyDir.
set -eu
me="$(hostname).rollcall-redis-sentinel.${POD_NAMESPACE}.svc"
primary=""
for i in 0 1 2; do
  peer="rollcall-redis-sentinel-${i}.rollcall-redis-sentinel.${POD_NAMESPACE}.svc"
  [ "${peer}" = "${me}" ] && continue
  addr="$(redis-cli -h "${peer}" -p 26379 --raw SENTINEL get-master-addr-by-name rollcall \
    2>/dev/null | head -n 1 || true)"
  if [ -n "${addr}" ]; then primary="${addr}"; break; fi
done
[ -n "${primary}" ] || primary="rollcall-redis-0.rollcall-redis-nodes.${POD_NAMESPACE}.svc"
# A primary silent for 5 s is down once 2 of the 3 Sentinels agree; docs/reliability.md has
# what that costs in status latency. The password (REDISCLI_AUTH, which redis-cli above used
# too): clients and the other Sentinels need it (requirepass), and Redis asks for it (auth-pass).
cat > /data/sentinel.conf <<CONF
port 26379
dir /data
requirepass ${REDISCLI_AUTH}
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip ${me}
sentinel monitor rollcall ${primary} 6379 2
sentinel auth-pass rollcall ${REDISCLI_AUTH}
sentinel down-after-milliseconds rollcall 5000
sentinel failover-timeout rollcall 60000
sentinel parallel-syncs rollcall 1
CONF
exec redis-sentinel /data/sentinel.conf
