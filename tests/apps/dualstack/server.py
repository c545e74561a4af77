# An IPv6-only and an IPv4 listener on one port, bound in the order given ("6first" or
# "4first"), as memcached, Redis and PostgreSQL do. Each answers a connection with its family
# and closes it. Once both listen, the script checks from inside the sandbox that ::1 and
# 127.0.0.1 reach the right one and prints "ready".
import socket
import sys
import threading

port = int(sys.argv[1])
order = sys.argv[2]


def listener(family):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(("::", port))
    else:
        s.bind(("0.0.0.0", port))
    s.listen(16)
    return s


def serve(s, name):
    while True:
        c, _ = s.accept()
        c.sendall(name + b"\n")
        c.close()


families = [socket.AF_INET6, socket.AF_INET]
if order == "4first":
    families.reverse()
for f in families:
    s = listener(f)
    name = b"v6" if f == socket.AF_INET6 else b"v4"
    threading.Thread(target=serve, args=(s, name), daemon=True).start()


def ask(family, host):
    with socket.socket(family, socket.SOCK_STREAM) as c:
        c.connect((host, port))
        return c.recv(16).strip().decode()


inside = (ask(socket.AF_INET6, "::1"), ask(socket.AF_INET, "127.0.0.1"))
print("inside", *inside, flush=True)
print("ready", flush=True)
threading.Event().wait()
