// cow_wp: what a copy-on-write fork's write-protect of a parent costs on this KVM (shadow
// paging). A guest maps MIB MiB with 4 KiB pages (ring 3), touches them, then every PTE is
// made read-only, either by a ring-0 loop (mode 0: and [rdi],~2 per entry, then a CR3 reload)
// or by the host writing guest memory plus a ring-0 CR3 reload (mode 1), or by a ring-0 loop
// over the page directory's entries instead (mode 2: one per 2 MiB); then ring 3 reads
// every page again (what the parent pays after its fork), and finally writes one page, which
// must fault (no IDT: a triple fault, KVM_EXIT_SHUTDOWN) if the write-protect took effect.
// gcc -O2 cow_wp.c -o cow_wp; ./cow_wp MIB MODE
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
#define MEM (512ul<<20)
#define DATA (16ul<<20)
#define PTS 0x200000ul
static void push(uint8_t*c,int*k,uint32_t v){c[(*k)++]=0x68;memcpy(c+*k,&v,4);*k+=4;}
static int vcpu; static struct kvm_run*run;
static int go(uint64_t rip,uint64_t rdi,uint64_t rcx,uint64_t rbx,int port){
  struct kvm_regs r; ioctl(vcpu,KVM_GET_REGS,&r); r.rip=rip; r.rdi=rdi; r.rcx=rcx; r.rbx=rbx; r.rflags=(r.rflags&~0xfffful)|0x3002; ioctl(vcpu,KVM_SET_REGS,&r);
  for(;;){ ioctl(vcpu,KVM_RUN,0); if(run->exit_reason==KVM_EXIT_IO&&(port<0||run->io.port==port)) return 0; return run->exit_reason; }
}
int main(int argc,char**argv){
  unsigned long mib=argc>1?atol(argv[1]):200; int mode=argc>2?atoi(argv[2]):0;
  unsigned long pages=mib*256, npt=(pages+511)/512;
  int kvm=open("/dev/kvm",O_RDWR); int vm=ioctl(kvm,KVM_CREATE_VM,0);
  uint8_t*mem=mmap(0,MEM,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  struct kvm_userspace_memory_region r={.slot=0,.guest_phys_addr=0,.memory_size=MEM,.userspace_addr=(uint64_t)mem};
  ioctl(vm,KVM_SET_USER_MEMORY_REGION,&r);
  uint64_t*pml4=(void*)(mem+0x1000),*pdpt=(void*)(mem+0x2000),*pd=(void*)(mem+0x3000),*pt0=(void*)(mem+0x4000);
  pml4[0]=0x2000|7; pdpt[0]=0x3000|7; pd[0]=0x4000|7; pd[1]=PTS|0x83;
  for(int i=0;i<512;i++) pt0[i]=(i*0x1000ul)|7;
  uint64_t*pts=(void*)(mem+PTS);
  for(unsigned long p=0;p<pages;p++) pts[p]=(DATA+p*0x1000)|7;
  for(unsigned long t=0;t<npt;t++) pd[8+t]=(PTS+t*0x1000)|7;
  uint64_t*gdt=(void*)(mem+0x500); gdt[0]=0; gdt[1]=0x00209A0000000000ull; gdt[2]=0x0000920000000000ull; gdt[3]=0x0000F20000000000ull; gdt[4]=0x0020FA0000000000ull;
  uint8_t*c=mem+0x10000; int k=0;
  push(c,&k,0x1b); push(c,&k,0x7000); push(c,&k,0x3002); push(c,&k,0x23); push(c,&k,0x20000); c[k++]=0x48;c[k++]=0xcf;
  // ring-0 write-protect loop at 0x12000: and qword [rdi],-3; add rdi,8; dec rcx; jnz; mov rax,cr3; mov cr3,rax; out 0x11,al
  uint8_t st[]={0x48,0x83,0x27,0xfd, 0x48,0x83,0xc7,0x08, 0x48,0xff,0xc9, 0x75,0xf3, 0x0f,0x20,0xd8, 0x0f,0x22,0xd8, 0xe6,0x11};
  memcpy(mem+0x12000,st,sizeof st);
  // ring-0 CR3 reload at 0x12100
  uint8_t rl[]={0x0f,0x20,0xd8, 0x0f,0x22,0xd8, 0xe6,0x11}; memcpy(mem+0x12100,rl,sizeof rl);
  // ring 3 at 0x20000: per page, read (rbx=0) or add 1 (rbx!=0); then out 0x3f0
  uint8_t u[]={0x48,0x85,0xdb, 0x74,0x05, 0x80,0x07,0x01, 0xeb,0x02, 0x8a,0x07, 0x48,0x81,0xc7,0x00,0x10,0x00,0x00, 0x48,0xff,0xc9, 0x75,0xe8, 0x66,0xba,0xf0,0x03, 0xee, 0xeb,0xfe};
  memcpy(mem+0x20000,u,sizeof u);
  vcpu=ioctl(vm,KVM_CREATE_VCPU,0); int sz=ioctl(kvm,KVM_GET_VCPU_MMAP_SIZE,0);
  run=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,vcpu,0);
  struct kvm_sregs s; ioctl(vcpu,KVM_GET_SREGS,&s);
  struct kvm_segment cs={.base=0,.limit=0xffffffff,.selector=0x08,.present=1,.type=11,.dpl=0,.db=0,.s=1,.l=1,.g=1};
  struct kvm_segment ds={.base=0,.limit=0xffffffff,.selector=0x10,.present=1,.type=3,.dpl=0,.db=1,.s=1,.l=0,.g=1};
  s.cs=cs; s.ds=s.es=s.fs=s.gs=s.ss=ds; s.gdt.base=0x500; s.gdt.limit=0x27;
  s.cr3=0x1000; s.cr4=(1<<5)|(1<<7); s.cr0=0x80000001|(1<<5); s.efer=(1<<8)|(1<<10);
  ioctl(vcpu,KVM_SET_SREGS,&s);
  struct kvm_sregs ks=s;
  struct kvm_regs g={.rip=0x10000,.rflags=2,.rsp=0x8000,.rcx=1,.rdi=0x1000000,.rbx=0}; ioctl(vcpu,KVM_SET_REGS,&g);
  // to ring 3: the iretq at 0x10000 lands at 0x20000 with rcx=0: run one empty pass first
  ioctl(vcpu,KVM_RUN,0);
  if(run->exit_reason!=KVM_EXIT_IO){printf("start: exit %d\n",run->exit_reason);return 1;}
  struct kvm_sregs us; ioctl(vcpu,KVM_GET_SREGS,&us);
  double t;
  t=now(); if(go(0x20000,0x1000000,pages,1,0x3f0)) {printf("pass fail %d\n",run->exit_reason);return 1;} printf("first touch (write) of %lu pages: %.1f ms\n",pages,(now()-t)*1e3);
  t=now(); go(0x20000,0x1000000,pages,0,0x3f0); printf("read pass, warm: %.1f ms\n",(now()-t)*1e3);
  t=now(); go(0x20000,0x1000000,pages,1,0x3f0); printf("write pass, warm: %.1f ms\n",(now()-t)*1e3);
  // write-protect
  t=now();
  struct kvm_regs save; ioctl(vcpu,KVM_GET_REGS,&save);
  ioctl(vcpu,KVM_SET_SREGS,&ks);
  struct kvm_regs kr=save; kr.rsp=0x8000; kr.rflags=2;
  if(mode==0){ kr.rip=0x12000; kr.rdi=PTS; kr.rcx=pages; }
  else if(mode==2){ kr.rip=0x12000; kr.rdi=0x3000+8*8; kr.rcx=npt; }
  else { for(unsigned long p=0;p<pages;p++) pts[p]&=~2ul; kr.rip=0x12100; }
  ioctl(vcpu,KVM_SET_REGS,&kr);
  ioctl(vcpu,KVM_RUN,0); if(!(run->exit_reason==KVM_EXIT_IO&&run->io.port==0x11)){printf("stub exit %d\n",run->exit_reason);return 1;}
  ioctl(vcpu,KVM_SET_SREGS,&us); ioctl(vcpu,KVM_SET_REGS,&save);
  const char*how[]={"ring-0 loop over the PTEs + CR3 reload","host writes + ring-0 CR3 reload","ring-0 loop over the PDEs + CR3 reload"};
  printf("write-protect of %lu pages (%s): %.1f ms\n",pages,how[mode],(now()-t)*1e3);
  t=now(); go(0x20000,0x1000000,pages,0,0x3f0); printf("read pass after it: %.1f ms\n",(now()-t)*1e3);
  t=now(); go(0x20000,0x1000000,pages,0,0x3f0); printf("read pass again: %.1f ms\n",(now()-t)*1e3);
  int e=go(0x20000,0x1000000+123*0x1000,1,1,0x3f0);
  printf("a write after it: %s\n", e==KVM_EXIT_SHUTDOWN?"faults (write-protected)":e==0?"goes through (NOT protected)":"other exit");
  return 0;
}
