#!/usr/bin/env bash
# Real servers in torpor, hot and hibernated: nginx (master + 2 workers), PostgreSQL 15
# (postmaster + 5 background processes) and Redis, from Debian's packages (the `servers` root
# of scripts/build-rootfs.sh), driven by their real clients on the host (curl, psql,
# redis-cli).
#
#   scripts/bench-servers.sh [ROUNDS] > docs/results/servers.md
#   TORPOR_PLATFORM=trap scripts/bench-servers.sh [ROUNDS] > docs/results/trap/servers.md
#
# For each server: the time from `torpor run -d` to the first answer; the holder's PSS hot
# (after a warm-up) and hibernated; per process, the swap bytes of the last deflate (torpor
# stats); and, over ROUNDS rounds (default 5), the client's round trip when hot and for the
# first request after a hibernation (the request wakes the sandbox), as medians and their
# ratio. Client round trips include the client's own start (the same in both columns).
# Needs root, /dev/kvm (or TORPOR_PLATFORM=trap), the servers root, curl, psql (postgresql-client) and redis-cli
# (redis-tools). Prints markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
torpor=target/release/torpor
cargo build --release -q -p torpor
root=$(scripts/build-rootfs.sh servers)
state=$(mktemp -d /tmp/torpor-bench-servers.XXXXXX)
export TORPOR_STATE_DIR=$state
conf=$(mktemp -d /tmp/torpor-bench-nginx.XXXXXX)
trap 'for id in ngx pg rd; do $torpor delete --force $id >/dev/null 2>&1 || true; done; rm -rf "$state" "$conf"' EXIT

cat > "$conf/nginx.conf" <<'EOF'
worker_processes 2;
daemon off;
master_process on;
pid /tmp/nginx.pid;
error_log stderr notice;
events { worker_connections 64; }
http {
  access_log off;
  server {
    listen 8080;
    root /var/www/html;
    index index.nginx-debian.html;
    location /hello { return 200 "hello from nginx\n"; }
  }
}
EOF

now_us() { echo $(( $(date +%s%N) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2)}'; }
stat_field() { $torpor stats "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)[sys.argv[1]])" "$2"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

# timed CMD...: runs CMD quietly, prints its wall time in µs; fails if CMD fails.
timed() {
    local t0 t1
    t0=$(now_us)
    "$@" >/dev/null
    t1=$(now_us)
    echo $((t1 - t0))
}

ngx_port=18180 pg_port=15532 rd_port=16479
req_ngx() { curl -sf --max-time 30 "http://127.0.0.1:$ngx_port/hello"; }
req_pg() { PGCONNECT_TIMEOUT=30 psql -X -tA -h 127.0.0.1 -p $pg_port -U postgres -c "select count(*) from t"; }
req_rd() { redis-cli -p $rd_port get key; }
req_pg_ready() { PGCONNECT_TIMEOUT=2 psql -X -tA -h 127.0.0.1 -p $pg_port -U postgres -c "select 1"; }
warm_pg() { PGCONNECT_TIMEOUT=30 psql -X -q -h 127.0.0.1 -p $pg_port -U postgres -c "create table if not exists t(i int, s text); insert into t select g, md5(g::text) from generate_series(1,50000) g;"; }
warm_rd() { redis-cli -p $rd_port set key value >/dev/null; redis-benchmark -p $rd_port -q -n 5000 -t set,get >/dev/null; }
warm_ngx() { for _ in $(seq 50); do req_ngx >/dev/null; done; }

start() { # start ID REQ -- torpor run args...
    local id=$1 req=$2
    shift 3
    local t0 t1
    t0=$(now_us)
    $torpor run -d --name "$id" "$@" >/dev/null
    until $req >/dev/null 2>&1; do sleep 0.02; done
    t1=$(now_us)
    echo $(((t1 - t0) / 1000))
}

pg_script="/usr/lib/postgresql/15/bin/initdb -D /var/lib/postgresql/data -A trust >/dev/null && exec /usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/data -c listen_addresses=* -c unix_socket_directories=/tmp"

echo "# Real servers in torpor, hot and hibernated"
echo
echo "\`scripts/bench-servers.sh $rounds\`, $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r); platform ${TORPOR_PLATFORM:-auto}${TORPOR_COW_FORK:+, TORPOR_COW_FORK=$TORPOR_COW_FORK}; wake mode auto"
echo "(the first wake records the working set, later ones prefetch it). Round trips are the host"
echo "client's whole run (its start included), medians of $rounds."
echo
declare -A per_process
echo "| server | processes | ready after | PSS hot | PSS hibernated | swap written | hot round trip | first round trip after hibernate | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in ngx pg rd; do
    case $s in
        ngx) name="nginx (master + 2 workers)"; ready=$(start ngx req_ngx -- -p $ngx_port:8080 -v "$conf:/etc/torpor:ro" "$root" -- /usr/sbin/nginx -c /etc/torpor/nginx.conf); warm_ngx ;;
        pg) name="PostgreSQL 15"; ready=$(start pg req_pg_ready -- -u postgres -p $pg_port:5432 "$root" -- /bin/sh -c "$pg_script") ;;
        rd) name="Redis 7"; ready=$(start rd req_rd -- -p $rd_port:6379 "$root" -- /usr/bin/redis-server --port 6379 --save "" --appendonly no); warm_rd ;;
    esac
    if [ $s = pg ]; then warm_pg; fi
    req=req_$s
    sleep 1
    pss_hot=$(stat_field $s pss_bytes)
    hot=$(for _ in $(seq "$rounds"); do timed $req; done | median)
    cold=()
    for _ in $(seq "$rounds"); do
        $torpor hibernate $s >/dev/null
        sleep 0.5
        pss_hib=$(stat_field $s pss_bytes)
        cold+=("$(timed $req)")
    done
    cold_med=$(printf '%s\n' "${cold[@]}" | median)
    $torpor hibernate $s >/dev/null
    # A report per memory; processes forked copy-on-write (trap) share their parent's and
    # are listed in its `sharing`.
    procs=$($torpor stats $s | python3 -c "import json,sys; print(sum(1 + len(p.get('sharing', [])) for p in json.load(sys.stdin)['processes']))")
    swap=$(stat_field $s swap_bytes)
    ratio=$(awk -v a="$cold_med" -v b="$hot" 'BEGIN {printf "%.2f", a / b}')
    echo "| $name | $procs | ${ready} ms | $(mib "$pss_hot") MiB | $(mib "$pss_hib") MiB | $(mib "$swap") MiB | $((hot / 1000)).$(((hot % 1000) / 100)) ms | $((cold_med / 1000)).$(((cold_med % 1000) / 100)) ms | $ratio |"
    per_process[$s]=$($torpor stats $s | python3 -c "
import json,sys
d=json.load(sys.stdin)
print(', '.join('pid %d%s: %.1f MiB swap, %.1f MiB REAP' % (p['pid'], ''.join(' +%d' % q for q in p.get('sharing', [])), p['swap_bytes']/1048576, p['reap_bytes']/1048576) for p in d['processes']))")
    $torpor delete --force $s >/dev/null
done
echo
echo "Per process, last deflate (\`torpor stats ID\`, field \`processes\`):"
echo
for s in ngx pg rd; do echo "- $s: ${per_process[$s]}"; done
