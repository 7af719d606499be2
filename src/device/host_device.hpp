#pragma once
// XSTAGE_HD marks small functions shared by kernels and host C++ (index maps,
// random draws): __host__ __device__ under nvcc, nothing for the host compiler.
#ifdef __CUDACC__
#define XSTAGE_HD __host__ __device__
#else
#define XSTAGE_HD
#endif
