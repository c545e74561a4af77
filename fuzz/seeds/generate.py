#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets (fuzz/seeds/TARGET/NAME).

Run from anywhere: python3 fuzz/seeds/generate.py. Seeds found by campaigns (crashes,
minimized corpus entries) are added beside these by hand and kept."""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- ELF ----------------------------------------------------------------------------------
def elf(e_type=2, loads=((0x400000, 0, 0x200, 0x1000, 5),), entry=0x400080, interp=None,
        phdr=True, extra=b""):
    """A little x86-64 ELF: header, program headers, then code (int3s)."""
    phs = []
    if phdr:
        phs.append(None)  # PT_PHDR placeholder
    if interp is not None:
        phs.append("interp")
    phs += list(loads)
    phoff, phsize = 64, 56 * len(phs)
    body_off = phoff + phsize
    interp_off = body_off
    interp_b = (interp.encode() + b"\0") if interp is not None else b""
    code = b"\xcc" * 64 + extra
    out = bytearray()
    out += b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    out += struct.pack("<HHIQQQIHHHHHH", e_type, 62, 1, entry, phoff, 0, 0, 64, 56,
                       len(phs), 64, 0, 0)
    base = loads[0][0] if loads else 0
    for p in phs:
        if p is None:  # PT_PHDR
            out += struct.pack("<IIQQQQQQ", 6, 4, phoff, base + phoff, base + phoff, phsize,
                               phsize, 8)
        elif p == "interp":
            out += struct.pack("<IIQQQQQQ", 3, 4, interp_off, base + interp_off,
                               base + interp_off, len(interp_b), len(interp_b), 1)
        else:
            vaddr, off, filesz, memsz, flags = p
            out += struct.pack("<IIQQQQQQ", 1, flags, off, vaddr, vaddr, filesz, memsz, 0x1000)
    out += interp_b + code
    return bytes(out)


def elf_input(prog, interp=b""):
    return struct.pack("<H", len(prog)) + prog + interp


static = elf()
put("elf", "static", elf_input(static))
put("elf", "static-bss", elf_input(elf(loads=((0x400000, 0, 0x180, 0x5000, 7),))))
put("elf", "two-loads", elf_input(elf(loads=((0x400000, 0, 0x100, 0x100, 5),
                                             (0x401100, 0x100, 0x40, 0x2000, 6)))))
put("elf", "pie", elf_input(elf(e_type=3, loads=((0, 0, 0x200, 0x1000, 5),), entry=0x80)))
ld = elf(e_type=3, loads=((0, 0, 0x200, 0x3000, 5),), entry=0x90, phdr=False)
put("elf", "dynamic", elf_input(elf(interp="/i"), ld))
put("elf", "dynamic-pie", elf_input(elf(e_type=3, loads=((0, 0, 0x200, 0x1000, 5),),
                                        entry=0x80, interp="/i"), ld))
put("elf", "no-loads", elf_input(elf(loads=())))
put("elf", "huge-memsz", elf_input(elf(loads=((0x400000, 0, 0x200, 1 << 46, 6),))))
put("elf", "top-of-user", elf_input(elf(loads=((0x7f7ffffff000, 0, 0x200, 0x1000, 5),))))
put("elf", "offset-past-eof", elf_input(elf(loads=((0x400000, 0x10000, 0x2000, 0x3000, 5),))))

# ---- #! -------------------------------------------------------------------------------------
for name, line in {
    "sh": b"#!/bin/sh\necho hi\n",
    "crlf": b"#! /usr/bin/env  python3 \r\n",
    "arg": b"#!/bin/busybox sh -e\n",
    "no-newline": b"#!/bin/sh",
    "tabs": b"#!\t/bin/sh\t-x\t\n",
    "long-interp": b"#!/" + b"a" * 300,
    "long-arg": b"#!/bin/sh " + b"x" * 300,
    "nul": b"#!/bin/sh\0-x\n",
    "empty": b"#!\n",
}.items():
    put("shebang", name, line)

# ---- page files -----------------------------------------------------------------------------
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def page_file(magic, page_count, pages):
    h = bytearray(64)
    h[0:8] = magic
    struct.pack_into("<IIQQ", h, 8, 1, 4096, page_count, 1_700_000_000_000_000)
    struct.pack_into("<I", h, 60, crc32c(bytes(h[0:60])))
    out = bytearray(h) + bytes(4096 - 64)
    index = bytearray()
    for s, (page, data) in enumerate(pages):
        out += data
        index += struct.pack("<QII", page, s, crc32c(data))
    count = len(pages)
    t = bytearray(32)
    t[0:8] = b"TORPIDX\0"
    struct.pack_into("<QQI", t, 8, 4096 + 4096 * count, count, crc32c(bytes(index)))
    struct.pack_into("<I", t, 28, crc32c(bytes(t[0:28])))
    return bytes(out + index + t)


def pat(k):
    return bytes((k * 7 + i) & 0xFF for i in range(4096))


for target, magic in (("swapfile", b"TORPSWP\0"), ("reapfile", b"TORPREAP")):
    # First byte: the harness's fix-ups (0 = none, 0x3f = all).
    put(target, "empty", b"\x00" + page_file(magic, 16, []))
    put(target, "one", b"\x00" + page_file(magic, 16, [(3, pat(1))]))
    put(target, "run", b"\x3f" + page_file(magic, 64, [(5, pat(2)), (6, pat(3)), (7, pat(4)),
                                                      (1, pat(5))]))
    put(target, "zero-page", b"\x00" + page_file(magic, 2, [(1, bytes(4096))]))

put("pagefile_corrupt", "intact-swap", bytes([0, 3]))
put("pagefile_corrupt", "intact-reap", bytes([1, 5]))
put("pagefile_corrupt", "flip-data", bytes([0, 2, 0, 0x20, 0x00, 0x01]))
put("pagefile_corrupt", "flip-index", bytes([1, 4, 0, 0xf0, 0xff, 0x40]))
put("pagefile_corrupt", "truncate", bytes([0, 1, 2, 0x00, 0xc0, 0]))
put("pagefile_corrupt", "extend", bytes([1, 1, 3, 0, 0, 31]))

# ---- config.json and control messages ----------------------------------------------------
minimal = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
           "process": {"args": ["prog"], "cwd": "/", "user": {"uid": 0, "gid": 0}}}
full = {
    "ociVersion": "1.2.0",
    "process": {"terminal": False, "user": {"uid": 1000, "gid": 1000},
                "args": ["/bin/sh", "-c", "echo hi"],
                "env": ["PATH=/usr/bin:/bin", "TERM=xterm"], "cwd": "/tmp",
                "capabilities": {"bounding": ["CAP_CHOWN"]},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": True},
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "fuzz",
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/data", "type": "bind", "source": "/tmp",
                "options": ["rbind", "ro"]}],
    "hooks": {"prestart": [{"path": "/bin/true"}]},
    "linux": {"resources": {"memory": {"limit": 268435456}, "pids": {"limit": 10}},
              "namespaces": [{"type": "pid"}, {"type": "network", "path": "/proc/1/ns/net"},
                             {"type": "user"}],
              "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}]},
    "annotations": {"dev.torpor.wake-mode": "reap"},
}
for target in ("oci_spec", "bundle"):
    put(target, "minimal.json", json.dumps(minimal))
    put(target, "full.json", json.dumps(full, indent=1))
    put(target, "path-lookup.json", json.dumps({**minimal, "process": {
        **minimal["process"], "args": ["sh"], "env": ["PATH=/nope:/bin:/usr/bin"]}}))
    put(target, "links.json", json.dumps({**minimal, "process": {
        **minimal["process"], "args": ["/lib/up"], "cwd": "/tmp/deep"}}))
    put(target, "escape.json", json.dumps({**minimal, "process": {
        **minimal["process"], "args": ["../../../../bin/escape"], "cwd": "/tmp/deep/er"}}))
for name, msg in {"state": '{"op":"state"}', "kill": '{"op":"kill","signal":15}',
                  "hibernate": '{"op":"hibernate"}', "bad": '{"op":"rm -rf"}',
                  "response": '{"ok":true,"data":{"pid":1}}',
                  "error": '{"ok":false,"error":"no"}'}.items():
    put("control", name, msg + "\n")
