/* A second bind of a guest port by a socket of the same family and type is EADDRINUSE (each
 * would otherwise land on a host port of its own); UDP beside TCP, a rebind after close and
 * SO_REUSEPORT on both are allowed, as on Linux. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
int main(void){
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
  printf("reuseport: %d %d\n", bind(r1,(void*)&a,sizeof a), bind(r2,(void*)&a,sizeof a));
  return 0;}
