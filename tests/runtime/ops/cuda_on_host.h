/* Compiles runtime/ops/cuda/ccn_cupy.cu for the host (g++ -include this
 * file), so tests can run its kernels without a GPU: one thread per block,
 * blocks run one after another (ccn_host_block sets which).  With one thread
 * a block's shared-memory reduction is the thread's own sum, and every
 * grid-stride or block-stride loop visits each index once, as on a GPU; the
 * index arithmetic, the layouts and the formulas are what is checked. */
#include <cmath>

struct ccn_dim3 { unsigned x, y, z; };
static ccn_dim3 blockIdx, threadIdx, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

#define __global__
#define __device__
#define __shared__ static
static inline void __syncthreads(void) {}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
using std::sqrt;

extern "C" void ccn_host_block(unsigned block, unsigned blocks)
{
    blockIdx.x = block;
    gridDim.x = blocks;
}
