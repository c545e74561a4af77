/* A second bind of a guest port by a socket of the same family and type is EADDRINUSE (each
 * would otherwise land on a host port of its own); UDP beside TCP, a rebind after close and
 * SO_REUSEPORT on both are allowed, as on Linux. One port on two loopback addresses is
 * allowed; a dual-stack IPv6 listener (IPV6_V6ONLY off) takes an IPv4 client, and a second
 * IPv4 bind of its port is EADDRINUSE. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
int main(void){
  int b1, b2;
  struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(9555),.sin_addr.s_addr=htonl(INADDR_LOOPBACK)};
  int s1=socket(AF_INET,SOCK_STREAM,0), s2=socket(AF_INET,SOCK_STREAM,0), u=socket(AF_INET,SOCK_DGRAM,0);
  printf("first: %d\n", bind(s1,(void*)&a,sizeof a));
  int r=bind(s2,(void*)&a,sizeof a); printf("second: %s\n", r? strerrorname_np(errno):"ok");
  printf("udp same port: %d\n", bind(u,(void*)&a,sizeof a));
  close(s1); int s3=socket(AF_INET,SOCK_STREAM,0);
  printf("after close: %d\n", bind(s3,(void*)&a,sizeof a));
  int one=1, r1=socket(AF_INET,SOCK_STREAM,0), r2=socket(AF_INET,SOCK_STREAM,0);
  a.sin_port=htons(9556);
  setsockopt(r1,SOL_SOCKET,SO_REUSEPORT,&one,4); setsockopt(r2,SOL_SOCKET,SO_REUSEPORT,&one,4);
  b1=bind(r1,(void*)&a,sizeof a); b2=bind(r2,(void*)&a,sizeof a);
  printf("reuseport: %d %d\n", b1, b2);
  a.sin_port=htons(9557);
  int l1=socket(AF_INET,SOCK_STREAM,0), l2=socket(AF_INET,SOCK_STREAM,0);
  struct sockaddr_in a2=a; a2.sin_addr.s_addr=htonl(0x7f000002);
  b1=bind(l1,(void*)&a,sizeof a); b2=bind(l2,(void*)&a2,sizeof a2);
  printf("two loopback addresses: %d %d\n", b1, b2);
  int zero=0, d=socket(AF_INET6,SOCK_STREAM,0);
  setsockopt(d,IPPROTO_IPV6,IPV6_V6ONLY,&zero,4);
  /* (A rerun soon after finds the last run's connection in TIME_WAIT.) */
  setsockopt(d,SOL_SOCKET,SO_REUSEADDR,&one,4);
  struct sockaddr_in6 w={.sin6_family=AF_INET6,.sin6_port=htons(9558),.sin6_addr=IN6ADDR_ANY_INIT};
  b1=bind(d,(void*)&w,sizeof w); b2=listen(d,4);
  printf("dual stack listen: %d %d\n", b1, b2);
  int c=socket(AF_INET,SOCK_STREAM,0), v4=socket(AF_INET,SOCK_STREAM,0);
  a.sin_port=htons(9558);
  r=connect(c,(void*)&a,sizeof a);
  printf("IPv4 client: %s", r? strerrorname_np(errno):"ok");
  struct sockaddr_in6 peer; socklen_t pl=sizeof peer;
  int acc=r? -1: accept(d,(void*)&peer,&pl);
  char txt[64]="";
  if(acc>=0) inet_ntop(AF_INET6,&peer.sin6_addr,txt,sizeof txt);
  printf(", accepted from %s\n", txt);
  setsockopt(v4,SOL_SOCKET,SO_REUSEADDR,&one,4);
  r=bind(v4,(void*)&a,sizeof a);
  printf("IPv4 bind of the dual-stack port: %s\n", r? strerrorname_np(errno):"ok");
  return 0;}
