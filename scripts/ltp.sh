#!/usr/bin/env bash
# Runs the Linux Test Project's syscall tests (testcases/kernel/syscalls, built from LTP's
# source with its own make) natively and in torpor, on each platform, and writes the
# per-test comparison to docs/results/ltp.md.
#
#   scripts/ltp.sh [--build-only|--run-only|--report-only] [--platforms "kvm trap"] LTP_SRC [TEST...]
#
# LTP_SRC is a checkout of LTP's public repository (it is not in Debian). TESTs are names
# of runtest/syscalls (open02, setresuid03...) or @SET for a set below (@permissions, the
# default; @all: every test of runtest/syscalls). Only the directories those tests live in
# are built (LTP's `make autotools`, `configure`, the library, then each directory's
# `make install` into $OUT/install). Each test then runs:
#   natively  in a private mount, PID and UTS namespace: an overlay of the Debian base root
#             (scripts/build-rootfs.sh base) with /proc, /dev, a tmpfs /tmp and /dev/shm,
#             LTP's install bound at /opt/ltp, chroot, with a container's capabilities
#             (Docker's default set, the one torpor gives its root);
#   torpor    `torpor run --platform P` of the same root, LTP's install as a read-only
#             volume at /opt/ltp;
# as root, with the same environment (LTPROOT, PATH, TMPDIR=/tmp, LTP_TIMEOUT_MUL) and an
# outer time limit. Logs go to $OUT/{native,kvm,trap}/TEST.log (OUT defaults to
# target/ltp); the report is regenerated from every log present, between the GENERATED
# markers of docs/results/ltp.md (the rest of that file, the reasons written by hand, is
# kept). Needs root, a release build of torpor and, for the build, autoconf, automake, make
# and gcc.
set -euo pipefail
{

here=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$here/target/ltp}
DOC=${DOC:-$here/docs/results/ltp.md}
TORPOR=${TORPOR:-$here/target/release/torpor}
LIMIT=${LIMIT:-300}

# The permission-related tests of issue 36 (their 16-bit-id twins, *_16, test the same rules
# through the legacy calls x86-64 does not have).
PERMISSIONS="open02 open08 open10 stat03 kill05 access01 access02 access03 access04
 chmod01 chmod03 chmod05 chmod06 chmod07 chmod08 chmod09
 chown01 chown02 chown03 chown04 chown05
 setuid01 setuid03 setuid04 setreuid01 setreuid02 setreuid03 setreuid04 setreuid05
 setreuid06 setreuid07 setresuid01 setresuid02 setresuid03 setresuid04 setresuid05
 setfsuid01 setfsuid02 setfsuid03 setfsuid04 setgid01 setgid02 setgid03
 setregid01 setregid02 setregid03 setregid04 setresgid01 setresgid02 setresgid03
 setresgid04 setfsgid01 setfsgid02 setfsgid03"

mode=all
platforms="kvm trap"
while [ $# -gt 0 ]; do
    case $1 in
        --build-only) mode=build; shift ;;
        --report-only) mode=report; shift ;;
        # Runs without building: for several runs of one build side by side.
        --run-only) mode=run; shift ;;
        --platforms) platforms=$2; shift 2 ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
log() { echo "ltp: $*" >&2; }

if [ "$mode" != report ]; then
    [ $# -ge 1 ] || { sed -n '2,27p' "$0" >&2; exit 2; }
    src=$(cd "$1" && pwd); shift
    [ -f "$src/runtest/syscalls" ] || { log "$src is not an LTP checkout (no runtest/syscalls)"; exit 2; }
    [ "$(id -u)" -eq 0 ] || { log "must run as root (chroot, mounts, the tests' own set*id)"; exit 1; }
    wanted=${*:-@permissions}
    mkdir -p "$OUT"
    # name -> command line, from LTP's own list.
    grep -E '^[a-z0-9_]+[[:space:]]' "$src/runtest/syscalls" >"$OUT/runtest"
    tests=()
    for w in $wanted; do
        case $w in
            @permissions) tests+=($PERMISSIONS) ;;
            @all) mapfile -t -O "${#tests[@]}" tests < <(awk '{print $1}' "$OUT/runtest") ;;
            *) tests+=("$w") ;;
        esac
    done

    # --- build ---------------------------------------------------------------------------
    if [ "$mode" != run ]; then
    if [ ! -f "$src/include/config.h" ]; then
        log "configuring LTP"
        (cd "$src" && make autotools >"$OUT/build.log" 2>&1 &&
            ./configure --prefix="$OUT/install" >>"$OUT/build.log" 2>&1) ||
            { log "configure failed: $OUT/build.log"; exit 1; }
    fi
    log "building LTP's library"
    make -C "$src/lib" -j"$(nproc)" >>"$OUT/build.log" 2>&1 || { log "lib: $OUT/build.log"; exit 1; }
    # Each test's directory is the one holding its source (dup201.c in dup2/, futex_wait01.c
    # in futex/); a _16 or _64 twin is built from its plain source.
    declare -A dir_of
    while read -r f; do
        b=${f##*/}
        dir_of[${b%.c}]=$(dirname "${f#"$src/testcases/kernel/syscalls/"}")
    done < <(find "$src/testcases/kernel/syscalls" -name '*.c')
    dirs=$(for t in "${tests[@]}"; do
        cmd=$(awk -v t="$t" '$1 == t {print $2; exit}' "$OUT/runtest")
        [ -n "$cmd" ] || continue
        base=$(echo "$cmd" | sed -E 's/_(16|64)$//')
        d=${dir_of[$base]:-$(echo "$base" | sed -E 's/[0-9]+$//')}
        [ -d "$src/testcases/kernel/syscalls/$d" ] && echo "$d"
    done | sort -u)
    for d in $dirs; do
        { make -C "$src/testcases/kernel/syscalls/$d" -j"$(nproc)" &&
            make -C "$src/testcases/kernel/syscalls/$d" install; } >>"$OUT/build.log" 2>&1 ||
            log "building $d failed (its tests will be missing): $OUT/build.log"
    done
    fi
    [ "$mode" = build ] && exit 0

    # --- run -----------------------------------------------------------------------------
    [ -x "$TORPOR" ] || { log "no $TORPOR: cargo build --release -p torpor"; exit 1; }
    root=$("$here/scripts/build-rootfs.sh" base)
    mkdir -p "$OUT/work"
    ENVV=(LTPROOT=/opt/ltp PATH=/opt/ltp/testcases/bin:/usr/sbin:/usr/bin:/sbin:/bin
          TMPDIR=/tmp HOME=/root LANG=C LTP_TIMEOUT_MUL=${LTP_TIMEOUT_MUL:-3})
    # Tests that check the kernel's build options read its configuration: the host kernel's,
    # given to both runs alike (a container has no /boot of the host, and /proc/config.gz
    # only where the host kernel publishes it).
    if { zcat /proc/config.gz || cat "/boot/config-$(uname -r)"; } >"$OUT/install/kernel.config" 2>/dev/null; then
        ENVV+=(KCONFIG_PATH=/opt/ltp/kernel.config)
    fi

    # The capabilities of a container's root (runc's and Docker's default set, which torpor
    # gives its root too: kernel::creds::DEFAULT_CAPS): the native run is held to them.
    export CAPS=-all,+chown,+dac_override,+fsetid,+fowner,+mknod,+net_raw,+setgid,+setuid,+setfcap,+setpcap,+net_bind_service,+sys_chroot,+kill,+audit_write

    # The test runs as a child of a shell, not as the first process of its PID namespace (or
    # sandbox): LTP's library watches its main test process through signals an init ignores.
    WRAP='cd /tmp && "$@"'

    run_native() { # TEST COMMAND...
        local t=$1 w rc=; shift
        w=$(mktemp -d "$OUT/work/native.XXXXXX")
        mkdir -p "$w/upper" "$w/work" "$w/merged"
        timeout -k 10 "$LIMIT" unshare --mount --pid --fork --uts --propagation private -- sh -c '
            root=$1 w=$2 ltp=$3; shift 3
            mount -t overlay overlay -o "lowerdir=$root,upperdir=$w/upper,workdir=$w/work" "$w/merged"
            m=$w/merged
            mount -t proc proc "$m/proc"
            mount --rbind /dev "$m/dev"
            mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
            mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
            mkdir -p "$m/opt/ltp" && mount --bind -o ro "$ltp" "$m/opt/ltp"
            hostname torpor
            # A container'"'"'s root: the capabilities runc and Docker give it (torpor'"'"'s root
            # has the same set), not the host root'"'"'s all.
            cd "$m" && exec setpriv --bounding-set "$CAPS" chroot "$m" "$@"' \
            sh "$root" "$w" "$OUT/install" env -i "${ENVV[@]}" /bin/sh -c "$WRAP" sh "$@" \
            >"$OUT/native/$t.log" 2>&1 </dev/null || rc=$?
        echo "exit status ${rc:-0}" >>"$OUT/native/$t.log"
        rm -rf --one-file-system "$w"
    }

    run_torpor() { # PLATFORM TEST COMMAND...
        local p=$1 t=$2 rc=; shift 2
        local envs=() e
        for e in "${ENVV[@]}"; do envs+=(--env "$e"); done
        TORPOR_LOG=${TORPOR_LOG:-warn} timeout -k 10 "$LIMIT" "$TORPOR" --log "$OUT/$p/$t.torpor-log" \
            run --platform "$p" --memory 2G --volume "$OUT/install:/opt/ltp:ro" "${envs[@]}" \
            --cwd /tmp "$root" -- /bin/sh -c "$WRAP" sh "$@" >"$OUT/$p/$t.log" 2>&1 </dev/null || rc=$?
        echo "exit status ${rc:-0}" >>"$OUT/$p/$t.log"
    }

    mkdir -p "$OUT/native"
    for p in $platforms; do mkdir -p "$OUT/$p"; done
    for t in "${tests[@]}"; do
        read -r -a cmd < <(awk -v t="$t" '$1 == t {$1 = ""; print; exit}' "$OUT/runtest")
        if [ ${#cmd[@]} -eq 0 ] || [ ! -x "$OUT/install/testcases/bin/${cmd[0]}" ]; then
            log "$t: not built, skipped"
            continue
        fi
        run_native "$t" "${cmd[@]}"
        line="$t native: $(tail -1 "$OUT/native/$t.log")"
        for p in $platforms; do
            run_torpor "$p" "$t" "${cmd[@]}"
            line="$line; $p: $(tail -1 "$OUT/$p/$t.log")"
        done
        log "$line"
    done
fi

# --- the report ----------------------------------------------------------------------------

python3 - "$OUT" "$DOC" <<'PYEOF'
import os, re, sys, datetime

out, doc = sys.argv[1], sys.argv[2]
runs = [r for r in ("native", "kvm", "trap") if os.path.isdir(os.path.join(out, r))]

def parse(path):
    """Counts of one test's log: passed, failed, broken, skipped; and its exit status."""
    if not os.path.exists(path):
        return None
    text = open(path, errors="replace").read()
    status = re.findall(r"^exit status (\d+)$", text, re.M)
    r = {"exit": int(status[-1]) if status else None}
    r["needs"] = next((why for mark, why in NEEDS if mark in text), None) if status and status[-1] != "0" else None
    summary = re.search(r"^Summary:\npassed\s+(\d+)\nfailed\s+(\d+)\nbroken\s+(\d+)\nskipped\s+(\d+)", text, re.M)
    if summary:
        r.update(zip(("pass", "fail", "brok", "conf"), map(int, summary.groups())))
    else:
        # The old API: one line per result.
        for k, tag in (("pass", "TPASS"), ("fail", "TFAIL"), ("brok", "TBROK"), ("conf", "TCONF")):
            r[k] = len(re.findall(r"\b%s\b" % tag, text))
    return r

# What no container has: a test that needs it is listed as such, not counted as a failure.
NEEDS = [
    ("Failed to acquire device", "needs a block device"),
]

# The syscalls the default seccomp profile of Docker and podman refuses to a container
# ("Significant syscalls blocked by the default profile", docs.docker.com/engine/security/
# seccomp): their tests are listed as such, not counted.
BLOCKED = """acct add_key bpf clock_adjtime clock_settime create_module delete_module finit_module
get_kernel_syms get_mempolicy init_module ioperm iopl kcmp kexec_file_load kexec_load keyctl
lookup_dcookie mbind mount move_pages name_to_handle_at nfsservctl open_by_handle_at
perf_event_open pivot_root process_vm_readv process_vm_writev query_module quotactl reboot
request_key set_mempolicy setns settimeofday stime swapon swapoff sysfs _sysctl umount umount2
unshare uselib userfaultfd ustat vm86""".split()

def blocked(t):
    """The blocked syscall test `t` is named after (open_by_handle_at02, keyctl05...)."""
    name = re.sub(r"(_64|_16)?$", "", t)
    name = re.sub(r"_?\d+$", "", name)
    return name if name in BLOCKED else None

def verdict(r):
    if r is None:
        return "-"
    if r.get("needs"):
        return r["needs"]
    e = r["exit"]
    if e is None:
        return "no result"
    if e in (124, 137):
        return "timeout"
    if e == 0:
        return "pass"
    if e == 32 or (e & ~32 == 0 and r["pass"] == 0):
        return "conf"
    if e & 1:
        return "fail"
    if e & 2:
        return "broken"
    if e & 4:
        return "warn"
    return "exit %d" % e

tests = sorted({f[:-4] for r in runs for f in os.listdir(os.path.join(out, r)) if f.endswith(".log")})
rows, totals = [], {r: {} for r in runs}
for t in tests:
    cells, vs = [], {}
    for r in runs:
        p = parse(os.path.join(out, r, t + ".log"))
        v = verdict(p)
        vs[r] = v
        totals[r][v] = totals[r].get(v, 0) + 1
        cells.append("-" if p is None else "%s (%d/%d/%d/%d)" % (v, p["pass"], p["fail"], p["brok"], p["conf"]))
    same = all(vs[r] == vs.get("native") for r in runs if r != "native")
    rows.append("| %s | %s | %s |" % (t, " | ".join(cells), "" if same else "**differs**"))

def not_counted(t):
    """Why test `t` is not counted (it needs what no container has), or None."""
    for r in runs:
        p = parse(os.path.join(out, r, t + ".log"))
        if p and p.get("needs"):
            return p["needs"]
    if blocked(t):
        return "%s: blocked in a default container" % blocked(t)
    return None

native_pass = [t for t in tests
               if verdict(parse(os.path.join(out, "native", t + ".log"))) == "pass" and not not_counted(t)]
uncounted = [(t, not_counted(t)) for t in tests if not_counted(t)]
lines = ["<!-- GENERATED by scripts/ltp.sh: do not edit between these markers -->", ""]
lines.append("Generated %s from the logs in `target/ltp` (counts: passed/failed/broken/skipped)." %
             datetime.date.today().isoformat())
lines.append("")
for r in runs:
    if r == "native":
        continue
    ok = [t for t in native_pass if verdict(parse(os.path.join(out, r, t + ".log"))) == "pass"]
    share = 100.0 * len(ok) / len(native_pass) if native_pass else 0.0
    lines.append("- **%s**: %d of the %d tests that pass natively pass in torpor (%.1f %%; all verdicts: %s)." %
                 (r, len(ok), len(native_pass), share, ", ".join("%s %d" % kv for kv in sorted(totals[r].items()))))
lines.append("- **native**: %s." % ", ".join("%s %d" % kv for kv in sorted(totals.get("native", {}).items())))
if uncounted:
    by_why = {}
    for t, why in uncounted:
        by_why.setdefault(why.split(":")[-1].strip() if ":" in why else why, []).append(t)
    for why, ts in sorted(by_why.items()):
        lines.append("- Not counted (%s): %s." % (why, ", ".join(ts)))
for r in runs:
    if r == "native":
        continue
    lost = [t for t in native_pass if verdict(parse(os.path.join(out, r, t + ".log"))) != "pass"]
    if lost:
        lines.append("- Pass natively, not in torpor on %s (%d): %s." % (r, len(lost), ", ".join(lost)))
lines.append("")
lines.append("| test | %s | |" % " | ".join(runs))
lines.append("|---|" + "---|" * len(runs) + "---|")
lines.extend(rows)
lines.append("")
lines.append("<!-- END GENERATED -->")
block = "\n".join(lines)

if os.path.exists(doc):
    text = open(doc).read()
    text = re.sub(r"<!-- GENERATED.*?<!-- END GENERATED -->", lambda _: block, text, flags=re.S)
else:
    text = "# LTP's syscall tests, natively and in torpor\n\n" + block + "\n"
open(doc, "w").write(text)
print("wrote", doc)
PYEOF
}
