// Does the first launch of a printf kernel wait for a running kernel?
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(2);} } while (0)
__device__ unsigned long long gt() { unsigned long long t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }
__global__ void spinner(unsigned long long* flag, unsigned long long timeout, unsigned long long* out) {
  unsigned long long s = gt(), v = 0;
  while ((v = atomicAdd(flag, 0ull)) == 0 && gt() - s < timeout) {}
  out[0] = v; out[1] = gt() - s;
}
__global__ void set_plain(unsigned long long* f) { atomicExch(f, 1ull); }
__global__ void set_printf(unsigned long long* f, int never) { if (never == 12345) printf("never %d\n", never); atomicExch(f, 1ull); }
__global__ void set_trap(unsigned long long* f, int never) { if (never == 12345) __trap(); atomicExch(f, 1ull); }
__global__ void set_stack(unsigned long long* f, int never) { volatile int a[64]; for (int i = 0; i < 64; ++i) a[i] = i * never; if (a[never & 63] == 12345) printf("x"); atomicExch(f, 1ull); }
__global__ void warm_printf(int never) { if (never == 12345) printf("warm %d\n", never); }
int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "plain";
  const char* warm = argc > 2 ? argv[2] : "none";
  cudaStream_t a, b; CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned long long *flag, *out; CK(cudaMalloc(&flag, 16)); CK(cudaMalloc(&out, 16)); CK(cudaMemset(flag, 0, 16)); CK(cudaMemset(out, 0, 16));
  unsigned long long* dummy; CK(cudaMalloc(&dummy, 16));
  if (strstr(warm, "attr")) { cudaFuncAttributes fa; CK(cudaFuncGetAttributes(&fa, set_printf)); CK(cudaFuncGetAttributes(&fa, set_trap)); CK(cudaFuncGetAttributes(&fa, set_stack)); CK(cudaFuncGetAttributes(&fa, set_plain)); CK(cudaFuncGetAttributes(&fa, warm_printf)); }
  if (strstr(warm, "self")) { set_plain<<<1,1,0,b>>>(dummy); set_printf<<<1,1,0,b>>>(dummy, 0); set_trap<<<1,1,0,b>>>(dummy, 0); set_stack<<<1,32,0,b>>>(dummy, 0); CK(cudaStreamSynchronize(b)); }
  if (strstr(warm, "wp")) { warm_printf<<<1,1,0,b>>>(0); CK(cudaStreamSynchronize(b)); }
  if (!strcmp(warm, "printf")) { warm_printf<<<1,1,0,b>>>(0); CK(cudaStreamSynchronize(b)); }
  if (!strcmp(warm, "limit")) { size_t v; CK(cudaDeviceGetLimit(&v, cudaLimitPrintfFifoSize)); CK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, v)); }
  spinner<<<1,1,0,a>>>(flag, 2000000000ull, out);
  if (!strcmp(mode, "plain")) set_plain<<<1,1,0,b>>>(flag);
  else if (!strcmp(mode, "printf")) set_printf<<<1,1,0,b>>>(flag, 0);
  else if (!strcmp(mode, "trap")) set_trap<<<1,1,0,b>>>(flag, 0);
  else if (!strcmp(mode, "stack")) set_stack<<<1,32,0,b>>>(flag, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  unsigned long long h[2]; CK(cudaMemcpy(h, out, 16, cudaMemcpyDeviceToHost));
  printf("first:  ");
  printf("mode %-7s warm %-7s: spinner saw %llu after %.3f ms -> %s\n", mode, warm, h[0], h[1] * 1e-6, h[0] ? "CONCURRENT" : "BLOCKED");
  CK(cudaMemset(flag, 0, 16)); CK(cudaMemset(out, 0, 16));
  spinner<<<1,1,0,a>>>(flag, 2000000000ull, out);
  if (!strcmp(mode, "plain")) set_plain<<<1,1,0,b>>>(flag);
  else if (!strcmp(mode, "printf")) set_printf<<<1,1,0,b>>>(flag, 0);
  else if (!strcmp(mode, "trap")) set_trap<<<1,1,0,b>>>(flag, 0);
  else if (!strcmp(mode, "stack")) set_stack<<<1,32,0,b>>>(flag, 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, out, 16, cudaMemcpyDeviceToHost));
  printf("second: mode %-7s warm %-7s: spinner saw %llu after %.3f ms -> %s\n", mode, warm, h[0], h[1] * 1e-6, h[0] ? "CONCURRENT" : "BLOCKED");
  return 0;
}
