// Host stand-ins for the CUDA built-ins that jtmini's CUDA templates use, so that a generated
// kernel compiles as C++ and runs on the CPU (tests/test_cuda_emulated.py). The threads of one
// block are OS threads meeting at a std::barrier (__syncthreads); blocks run one after another,
// which is why __shared__ can be a function-local static; atomics serialise on one mutex.
#include <barrier>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <mutex>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::barrier<>* jt_bar = nullptr;
static std::mutex jt_mutex;
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)
inline void __syncthreads() { jt_bar->arrive_and_wait(); }
inline int __float_as_int(float x) { int b; std::memcpy(&b, &x, 4); return b; }
inline float __int_as_float(int b) { float x; std::memcpy(&x, &b, 4); return x; }
inline long long __double_as_longlong(double x) { long long b; std::memcpy(&b, &x, 8); return b; }
inline double __longlong_as_double(long long b) { double x; std::memcpy(&x, &b, 8); return x; }
// CUDA's erfinv: here by bisection on std::erf (slow, exact enough for the comparisons made)
inline double erfinv(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return NAN;
  if (y == 1 || y == -1) return y * INFINITY;
  double lo = -6, hi = 6;
  for (int k = 0; k < 200 && lo < hi; ++k) { const double mid = 0.5 * (lo + hi); (std::erf(mid) < y ? lo : hi) = mid; }
  return 0.5 * (lo + hi);
}
inline float erfinvf(float y) { return (float)erfinv((double)y); }
template <class T> T atomicAdd(T* p, T v) { std::lock_guard<std::mutex> g(jt_mutex); T o = *p; *p = o + v; return o; }
template <class T> T atomicMax(T* p, T v) { std::lock_guard<std::mutex> g(jt_mutex); T o = *p; *p = o > v ? o : v; return o; }
template <class T> T atomicMin(T* p, T v) { std::lock_guard<std::mutex> g(jt_mutex); T o = *p; *p = o < v ? o : v; return o; }
template <class T> T atomicCAS(T* p, T c, T v) { std::lock_guard<std::mutex> g(jt_mutex); T o = *p; if (o == c) *p = v; return o; }
// Called before a launch, then by each emulated thread before it calls the kernel.
extern "C" void emu_config(int gx, int bx, int by) {
  gridDim.x = gx; blockDim.x = bx; blockDim.y = by;
  delete jt_bar; jt_bar = new std::barrier<>(bx * by);
}
extern "C" void emu_thread(int block, int tx, int ty) { blockIdx.x = block; threadIdx.x = tx; threadIdx.y = ty; }
