/* interfaces: what a program learns of its network interfaces: if_nameindex (netlink
 * RTM_GETLINK), if_nametoindex (ioctl SIOCGIFINDEX), getifaddrs (netlink RTM_GETADDR), and a
 * change it may not make (RTM_NEWADDR without CAP_NET_ADMIN). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
    struct if_nameindex *ni = if_nameindex();
    if (!ni) {
        printf("if_nameindex: %s\n", strerror(errno));
    } else {
        for (struct if_nameindex *p = ni; p->if_index; p++) printf("interface %u %s\n", p->if_index, p->if_name);
        if_freenameindex(ni);
    }
    unsigned lo = if_nametoindex("lo");
    printf("if_nametoindex(lo): %u%s%s\n", lo, lo ? "" : " ", lo ? "" : strerror(errno));
    struct ifaddrs *ifa;
    if (getifaddrs(&ifa) != 0) {
        printf("getifaddrs: %s\n", strerror(errno));
    } else {
        for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
            if (!p->ifa_addr || (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6)) continue;
            char b[64];
            const void *a = p->ifa_addr->sa_family == AF_INET ? (void *)&((struct sockaddr_in *)p->ifa_addr)->sin_addr
                                                              : (void *)&((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr;
            inet_ntop(p->ifa_addr->sa_family, a, b, sizeof b);
            printf("address %s %s\n", p->ifa_name, b);
        }
        freeifaddrs(ifa);
    }
    /* SIOCGIFCONF (ifconfig, Java's NetworkInterface): the length asked first, then the list. */
    int q = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifconf ifc = {.ifc_len = 0, .ifc_buf = NULL};
    int r = ioctl(q, SIOCGIFCONF, &ifc);
    struct ifreq reqs[8];
    struct ifconf all = {.ifc_len = sizeof reqs, .ifc_req = reqs};
    int r2 = ioctl(q, SIOCGIFCONF, &all);
    printf("SIOCGIFCONF: %d length %d, %d entries:", r, ifc.ifc_len, r2 == 0 ? all.ifc_len / (int)sizeof(struct ifreq) : -1);
    for (int i = 0; r2 == 0 && i < all.ifc_len / (int)sizeof(struct ifreq); i++) printf(" %s", reqs[i].ifr_name);
    printf("\n");
    close(q);
    FILE *dev = fopen("/proc/net/dev", "r");
    char line[512];
    int lines = 0, lo_line = 0;
    while (dev && fgets(line, sizeof line, dev)) {
        lines++;
        lo_line |= strstr(line, " lo:") != NULL;
    }
    if (dev) fclose(dev);
    printf("/proc/net/dev: %s, %d interface line(s), lo %d\n", dev ? "ok" : strerror(errno), lines > 2 ? lines - 2 : 0, lo_line);
    /* Adding 10.9.9.9/32 to lo: refused. */
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (s < 0) {
        printf("netlink socket: %s\n", strerror(errno));
        return 0;
    }
    struct {
        struct nlmsghdr h;
        struct ifaddrmsg m;
        struct rtattr ra;
        unsigned char addr[4];
    } req = {
        .h = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_NEWADDR, .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, .nlmsg_seq = 1},
        .m = {.ifa_family = AF_INET, .ifa_prefixlen = 32, .ifa_index = lo},
        .ra = {.rta_len = RTA_LENGTH(4), .rta_type = IFA_LOCAL},
        .addr = {10, 9, 9, 9},
    };
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    sendto(s, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel);
    char buf[4096];
    ssize_t n = recv(s, buf, sizeof buf, 0);
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    if (n > 0 && h->nlmsg_type == NLMSG_ERROR) {
        int e = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
        printf("RTM_NEWADDR: %s\n", e ? strerror(e) : "done");
    } else {
        printf("RTM_NEWADDR: no answer\n");
    }
    return 0;
}
