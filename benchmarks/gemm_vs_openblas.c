/* The native backend's SGEMM (runtime/native/kernels/ccn_connection.c)
 * against OpenBLAS's cblas_sgemm from the scipy-openblas32 wheel, on the
 * products the benchmark models make.  Built and run by openblas_gemm.py;
 * prints one line per shape: M N K, then milliseconds and GFLOPS of each
 * (best of several runs). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ccn_gemm.h"
#include "cblas.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void)
{
    /* The pool's thread count, as the executables take it. */
    const char *threads = getenv("CHAINER_COMPILER_THREADS");
    if (threads && ccn_set_threads(atoi(threads)) != 0)
        return 2;
    /* MLP layers at batch 1 and 32; im2col products of ResNet convolutions. */
    static const long shapes[][3] = {{1, 1000, 784}, {32, 1000, 1000}, {64, 3136, 576},
                                     {256, 196, 2304}, {512, 49, 4608}, {128, 1024, 1024}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const long M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *C = malloc(sizeof(float) * M * N);
        if (!A || !B || !C)
            return 2;
        for (long i = 0; i < M * K; i++)
            A[i] = (float)(i % 7) * 0.1f;
        for (long i = 0; i < K * N; i++)
            B[i] = (float)(i % 5) * 0.1f;
        const int runs = M * N * K < 10000000 ? 200 : 20;
        double ours = 1e9, theirs = 1e9;
        for (int r = 0; r < runs; r++) {
            double t = now_s();
            ccn_gemm_init(M, N, C, NULL, 0, 0, 0.0f);
            ccn_gemm(M, N, K, A, K, 1, B, 1.0f, C);
            t = now_s() - t;
            ours = t < ours ? t : ours;
            t = now_s();
            scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K,
                              B, N, 0.0f, C, N);
            t = now_s() - t;
            theirs = t < theirs ? t : theirs;
        }
        const double flops = 2.0 * M * N * K;
        printf("%ld %ld %ld %.4f %.1f %.4f %.1f\n", M, N, K, ours * 1e3, flops / ours / 1e9,
               theirs * 1e3, flops / theirs / 1e9);
        free(A);
        free(B);
        free(C);
    }
    return 0;
}
