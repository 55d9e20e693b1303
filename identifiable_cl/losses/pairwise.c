/* CPU kernels of the blocked InfoNCE core (identifiable_cl/losses/blocked.py).
 *
 * Rows a (rows, d), candidates stored transposed, cT (d, n); p = 0 is the dot product,
 * p = 1, 2, 3 the similarity -sum_k |a_k - c_k|^p. Loops run over the n candidates innermost,
 * so the compiler vectorises them; sums over k run in the order k = 0 .. d-1, as the eager
 * torch kernels add them.
 *
 *   sim:  s[i, j] = sim(a_i, c_j)
 *   grad: ga[i, k] = sum_j g[i, j] dsim/da_ik,   gcT[k, j] += sum_i g[i, j] dsim/dc_jk
 *   forward: for each multiplier m, with l = scale * mult[m] * sim(a_i, c_j) and the pairs in
 *         excl (two columns per row, -1 = none) left out: top[i, m] = max_j l,
 *         e[m, i, j] = exp(max(l - top, floor)) (0 when left out), sums[i, m] = sum_j e;
 *         e holds ld rows per multiplier (rows may be a part of them)
 *   backward: g = scale * sum_m w[i, m] e[m, i, j]; the gradients of grad, and
 *         dscale = sum_ij (sum_m w[i, m] e[m, i, j]) sim_ij when sim is given
 *
 * Exported: icl_forward_{f32,f64} and icl_backward_{f32,f64}, over all rows of a block, in
 * parallel. Built at first use by identifiable_cl.losses.native with the machine's C compiler.
 *
 * On x86 the kernels run with subnormal results flushed to zero and subnormal inputs read as zero
 * (MXCSR's FTZ and DAZ bits, set per thread for the call and restored after it). Logits floored
 * near the bottom of the normal range give exponentials whose products with the row weights fall
 * below it, and some CPUs take a slow microcode path for every such product (measured 7-15x slower
 * kernels on an Intel Xeon with AVX-512); the flushed values are below 1.2e-38 (float32) or
 * 2.2e-308 (float64), far below the rounding of the sums they enter.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__GLIBC__)
#include <immintrin.h>
__m256 _ZGVdN8v_expf(__m256);
__m256d _ZGVdN4v_exp(__m256d);
#define ICL_MVEC 1
#if defined(__AVX512F__)
__m512 _ZGVeN16v_expf(__m512);
__m512d _ZGVeN8v_exp(__m512d);
#define ICL_MVEC512 1
#endif
#endif

#if defined(__SSE2__)
#include <xmmintrin.h>
#define ICL_FLUSH_BEGIN const unsigned int icl_csr = _mm_getcsr(); _mm_setcsr(icl_csr | 0x8040u);
#define ICL_FLUSH_END _mm_setcsr(icl_csr);
#else
#define ICL_FLUSH_BEGIN
#define ICL_FLUSH_END
#endif

#define TILE 256 /* candidates per pass of grad: tiles of g, cT and gcT rows stay in L1 */
#define WIDTH 32 /* candidates per register block of sim */

/* term(t) = |t|^p (p >= 1), slope(t) = d|t|^p/dt; for p = 0, x * c and c. */
#define TERM0(x, c, t, ABS) ((x) * (c))
#define TERM1(x, c, t, ABS) ABS(t)
#define TERM2(x, c, t, ABS) ((t) * (t))
#define TERM3(x, c, t, ABS) ((t) * (t) * ABS(t))
#define SLOPE0(c, t, T, ABS) (c)
#define SLOPE1(c, t, T, ABS) ((T)((t) > 0) - (T)((t) < 0))
#define SLOPE2(c, t, T, ABS) (2 * (t))
#define SLOPE3(c, t, T, ABS) (3 * (t) * ABS(t))

#define ICL_POWER(T, SUFFIX, ABS, P, SIGN)                                                    \
    static void sim_##SUFFIX##_p##P(const T *restrict a, const T *restrict cT, T *restrict s, \
                                    int64_t rows, int64_t d, int64_t n) {                     \
        const int64_t body = n - n % WIDTH;                                                   \
        for (int64_t i = 0; i < rows; ++i) {                                                  \
            const T *restrict ai = a + i * d;                                                 \
            T *restrict out = s + i * n;                                                      \
            for (int64_t j0 = 0; j0 < body; j0 += WIDTH) {                                    \
                T acc[WIDTH];                                                                 \
                for (int64_t l = 0; l < WIDTH; ++l) {                                         \
                    const T t = ai[0] - cT[j0 + l];                                           \
                    acc[l] = TERM##P(ai[0], cT[j0 + l], t, ABS);                              \
                }                                                                             \
                for (int64_t k = 1; k < d; ++k) {                                             \
                    const T x = ai[k];                                                        \
                    const T *restrict c = cT + k * n + j0;                                    \
                    for (int64_t l = 0; l < WIDTH; ++l) {                                     \
                        const T t = x - c[l];                                                 \
                        acc[l] = acc[l] + TERM##P(x, c[l], t, ABS);                           \
                    }                                                                         \
                }                                                                             \
                for (int64_t l = 0; l < WIDTH; ++l) out[j0 + l] = SIGN * acc[l];              \
            }                                                                                 \
            for (int64_t j = body; j < n; ++j) {                                              \
                T total = 0;                                                                  \
                for (int64_t k = 0; k < d; ++k) {                                             \
                    const T t = ai[k] - cT[k * n + j];                                        \
                    total = k == 0 ? TERM##P(ai[k], cT[j], t, ABS)                            \
                                   : total + TERM##P(ai[k], cT[k * n + j], t, ABS);           \
                }                                                                             \
                out[j] = SIGN * total;                                                        \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void grad_##SUFFIX##_p##P(const T *restrict g, const T *restrict a,                \
                                     const T *restrict cT, T *restrict ga, T *restrict gcT,   \
                                     int64_t rows, int64_t d, int64_t n) {                    \
        int64_t i = 0;                                                                        \
        for (; i + 4 <= rows; i += 4) { /* four rows share each pass over gcT */              \
            for (int64_t k = 0; k < 4 * d; ++k) ga[i * d + k] = 0;                            \
            for (int64_t j0 = 0; j0 < n; j0 += TILE) {                                        \
                const int64_t m = n - j0 < TILE ? n - j0 : TILE;                              \
                const T *restrict g0 = g + i * n + j0, *restrict g1 = g0 + n;                 \
                const T *restrict g2 = g1 + n, *restrict g3 = g2 + n;                         \
                for (int64_t k = 0; k < d; ++k) {                                             \
                    const T x0 = a[i * d + k], x1 = a[(i + 1) * d + k];                       \
                    const T x2 = a[(i + 2) * d + k], x3 = a[(i + 3) * d + k];                 \
                    const T *restrict c = cT + k * n + j0;                                    \
                    T *restrict acc = gcT + k * n + j0;                                       \
                    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                         \
                    _Pragma("omp simd reduction(+ : s0, s1, s2, s3)")                         \
                    for (int64_t j = 0; j < m; ++j) {                                         \
                        const T t0 = x0 - c[j], t1 = x1 - c[j];                               \
                        const T t2 = x2 - c[j], t3 = x3 - c[j];                               \
                        const T w0 = g0[j] * SLOPE##P(c[j], t0, T, ABS);                      \
                        const T w1 = g1[j] * SLOPE##P(c[j], t1, T, ABS);                      \
                        const T w2 = g2[j] * SLOPE##P(c[j], t2, T, ABS);                      \
                        const T w3 = g3[j] * SLOPE##P(c[j], t3, T, ABS);                      \
                        s0 += w0;                                                             \
                        s1 += w1;                                                             \
                        s2 += w2;                                                             \
                        s3 += w3;                                                             \
                        acc[j] += P == 0 ? ((g0[j] * x0 + g1[j] * x1) + (g2[j] * x2 + g3[j] * x3)) \
                                         : ((w0 + w1) + (w2 + w3));                           \
                    }                                                                         \
                    ga[i * d + k] += SIGN * s0;                                               \
                    ga[(i + 1) * d + k] += SIGN * s1;                                         \
                    ga[(i + 2) * d + k] += SIGN * s2;                                         \
                    ga[(i + 3) * d + k] += SIGN * s3;                                         \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (; i < rows; ++i) {                                                               \
            for (int64_t k = 0; k < d; ++k) ga[i * d + k] = 0;                                \
            for (int64_t j0 = 0; j0 < n; j0 += TILE) {                                        \
                const int64_t m = n - j0 < TILE ? n - j0 : TILE;                              \
                const T *restrict gi = g + i * n + j0;                                        \
                for (int64_t k = 0; k < d; ++k) {                                             \
                    const T x = a[i * d + k];                                                 \
                    const T *restrict c = cT + k * n + j0;                                    \
                    T *restrict acc = gcT + k * n + j0;                                       \
                    T total = 0;                                                              \
                    _Pragma("omp simd reduction(+ : total)")                                  \
                    for (int64_t j = 0; j < m; ++j) {                                         \
                        const T t = x - c[j];                                                 \
                        const T w = gi[j] * SLOPE##P(c[j], t, T, ABS);                        \
                        total += w;                                                           \
                        acc[j] += P == 0 ? gi[j] * x : w;                                     \
                    }                                                                         \
                    ga[i * d + k] += SIGN * total;                                            \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

#define ICL_KERNELS(T, SUFFIX, ABS)                                                              \
    ICL_POWER(T, SUFFIX, ABS, 0, 1)                                                              \
    ICL_POWER(T, SUFFIX, ABS, 1, -1)                                                             \
    ICL_POWER(T, SUFFIX, ABS, 2, -1)                                                             \
    ICL_POWER(T, SUFFIX, ABS, 3, -1)                                                             \
    static void icl_sim_##SUFFIX(const T *a, const T *cT, T *s, int64_t rows, int64_t d,         \
                                 int64_t n, int p) {                                             \
        if (p == 0) sim_##SUFFIX##_p0(a, cT, s, rows, d, n);                                     \
        if (p == 1) sim_##SUFFIX##_p1(a, cT, s, rows, d, n);                                     \
        if (p == 2) sim_##SUFFIX##_p2(a, cT, s, rows, d, n);                                     \
        if (p == 3) sim_##SUFFIX##_p3(a, cT, s, rows, d, n);                                     \
    }                                                                                            \
    static void icl_grad_##SUFFIX(const T *g, const T *a, const T *cT, T *ga, T *gcT,            \
                                  int64_t rows, int64_t d, int64_t n, int p) {                   \
        if (p == 0) grad_##SUFFIX##_p0(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 1) grad_##SUFFIX##_p1(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 2) grad_##SUFFIX##_p2(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 3) grad_##SUFFIX##_p3(g, a, cT, ga, gcT, rows, d, n);                           \
    }

ICL_KERNELS(float, f32, fabsf)
ICL_KERNELS(double, f64, fabs)

/* Threads: OpenMP where the compiler supports it. The library is loaded after torch, so it
 * shares torch's OpenMP runtime and thread pool (libgomp.so.1) instead of competing with it. */
#ifdef _OPENMP
#include <omp.h>
static int max_threads(void) { return omp_get_max_threads(); }
static int thread_index(void) { return omp_get_thread_num(); }
static int thread_count(void) { return omp_get_num_threads(); }
#else
static int max_threads(void) { return 1; }
static int thread_index(void) { return 0; }
static int thread_count(void) { return 1; }
#endif

/* This thread's rows [r0, r1) of 0..rows, in multiples of `step` but the last. */
static void share(int64_t rows, int64_t step, int64_t *r0, int64_t *r1) {
    const int64_t threads = thread_count(), t = thread_index();
    const int64_t steps = (rows + step - 1) / step;
    const int64_t per = (steps + threads - 1) / threads;
    *r0 = t * per * step < rows ? t * per * step : rows;
    *r1 = (t + 1) * per * step < rows ? (t + 1) * per * step : rows;
}

/* x[j] = exp(x[j]) for j < n: glibc's vector exp (libmvec) in 16/8-lane chunks with AVX-512, then
 * 8/4-lane chunks with AVX2, where present. */
static void exp_f32(float *x, int64_t n) {
    int64_t j = 0;
#ifdef ICL_MVEC512
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, _ZGVeN16v_expf(_mm512_loadu_ps(x + j)));
#endif
#ifdef ICL_MVEC
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _ZGVdN8v_expf(_mm256_loadu_ps(x + j)));
#endif
    for (; j < n; ++j) x[j] = expf(x[j]);
}

static void exp_f64(double *x, int64_t n) {
    int64_t j = 0;
#ifdef ICL_MVEC512
    for (; j + 8 <= n; j += 8) _mm512_storeu_pd(x + j, _ZGVeN8v_exp(_mm512_loadu_pd(x + j)));
#endif
#ifdef ICL_MVEC
    for (; j + 4 <= n; j += 4) _mm256_storeu_pd(x + j, _ZGVdN4v_exp(_mm256_loadu_pd(x + j)));
#endif
    for (; j < n; ++j) x[j] = exp(x[j]);
}

#define ICL_FUSED(T, SUFFIX)                                                                  \
    static void forward_rows_##SUFFIX(const T *a, const T *cT, int64_t rows, int64_t d,       \
                                      int64_t n, int p, T scale, const T *mult, int nm,       \
                                      const int64_t *excl, T floor, T *e, int64_t ld, T *sim, \
                                      T *top, T *sums) {                                      \
        T *row = sim ? NULL : (T *)malloc(sizeof(T) * n);                                     \
        for (int64_t i = 0; i < rows; ++i) {                                                  \
            T *restrict s = sim ? sim + i * n : row;                                          \
            icl_sim_##SUFFIX(a + i * d, cT, s, 1, d, n, p);                                   \
            const int64_t x0 = excl ? excl[2 * i] : -1, x1 = excl ? excl[2 * i + 1] : -1;     \
            const T v0 = x0 >= 0 ? s[x0] : 0, v1 = x1 >= 0 ? s[x1] : 0;                      \
            if (x0 >= 0) s[x0] = -INFINITY;                                                   \
            if (x1 >= 0) s[x1] = -INFINITY;                                                   \
            for (int m = 0; m < nm; ++m) {                                                    \
                const T cs = scale * mult[m];                                                 \
                T *restrict out = e + (int64_t)m * ld * n + i * n;                            \
                T best = -INFINITY;                                                           \
                _Pragma("omp simd reduction(max : best)")                                     \
                for (int64_t j = 0; j < n; ++j) {                                             \
                    const T l = s[j] * cs;                                                    \
                    best = l > best ? l : best;                                               \
                }                                                                             \
                for (int64_t j = 0; j < n; ++j) {                                             \
                    const T l = s[j] * cs - best;                                             \
                    out[j] = l > floor ? l : floor;                                           \
                }                                                                             \
                exp_##SUFFIX(out, n);                                                         \
                if (x0 >= 0) out[x0] = 0;                                                     \
                if (x1 >= 0) out[x1] = 0;                                                     \
                T total = 0;                                                                  \
                _Pragma("omp simd reduction(+ : total)")                                      \
                for (int64_t j = 0; j < n; ++j) total += out[j];                              \
                top[i * nm + m] = best;                                                       \
                sums[i * nm + m] = total;                                                     \
            }                                                                                 \
            if (x0 >= 0) s[x0] = v0;                                                          \
            if (x1 >= 0) s[x1] = v1;                                                          \
        }                                                                                     \
        free(row);                                                                            \
    }                                                                                         \
                                                                                              \
    static void backward_rows_##SUFFIX(const T *e, int64_t ld, const T *w, int nm,            \
                                       const T *sim, T scale, const T *a, const T *cT,        \
                                       int64_t rows, int64_t d, int64_t n, int p, T *ga,      \
                                       T *gcT, T *dscale) {                                   \
        T *g = (T *)malloc(sizeof(T) * 4 * n);                                                \
        T ds = 0;                                                                             \
        for (int64_t i0 = 0; i0 < rows; i0 += 4) { /* four rows at a time: see grad */        \
            const int64_t count = rows - i0 < 4 ? rows - i0 : 4;                              \
            for (int64_t r = 0; r < count; ++r) {                                             \
                const int64_t i = i0 + r;                                                     \
                T *restrict gr = g + r * n;                                                   \
                const T w0 = w[i * nm];                                                       \
                const T *restrict e0 = e + i * n;                                             \
                for (int64_t j = 0; j < n; ++j) gr[j] = w0 * e0[j];                           \
                for (int m = 1; m < nm; ++m) {                                                \
                    const T wm = w[i * nm + m];                                               \
                    const T *restrict em = e + (int64_t)m * ld * n + i * n;                   \
                    for (int64_t j = 0; j < n; ++j) gr[j] = gr[j] + wm * em[j];               \
                }                                                                             \
                if (sim) {                                                                    \
                    const T *restrict s = sim + i * n;                                        \
                    T total = 0;                                                              \
                    _Pragma("omp simd reduction(+ : total)")                                  \
                    for (int64_t j = 0; j < n; ++j) total += gr[j] * s[j];                    \
                    ds += total;                                                              \
                }                                                                             \
                for (int64_t j = 0; j < n; ++j) gr[j] = gr[j] * scale;                        \
            }                                                                                 \
            icl_grad_##SUFFIX(g, a + i0 * d, cT, ga + i0 * d, gcT, count, d, n, p);           \
        }                                                                                     \
        *dscale = ds;                                                                         \
        free(g);                                                                              \
    }                                                                                         \
                                                                                              \
    void icl_forward_##SUFFIX(const T *a, const T *cT, int64_t rows, int64_t d, int64_t n,    \
                              int p, T scale, const T *mult, int nm, const int64_t *excl,     \
                              T floor, T *e, T *sim, T *top, T *sums) {                       \
        _Pragma("omp parallel")                                                               \
        {                                                                                     \
            ICL_FLUSH_BEGIN                                                                   \
            int64_t r0, r1;                                                                   \
            share(rows, 1, &r0, &r1);                                                         \
            if (r1 > r0)                                                                      \
                forward_rows_##SUFFIX(a + r0 * d, cT, r1 - r0, d, n, p, scale, mult, nm,      \
                                      excl ? excl + 2 * r0 : NULL, floor, e + r0 * n, rows,   \
                                      sim ? sim + r0 * n : NULL, top + r0 * nm,               \
                                      sums + r0 * nm);                                        \
            ICL_FLUSH_END                                                                     \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    void icl_backward_##SUFFIX(const T *e, const T *w, int nm, const T *sim, T scale,         \
                               const T *a, const T *cT, int64_t rows, int64_t d, int64_t n,   \
                               int p, T *ga, T *gcT, T *dscale) {                             \
        const int threads = max_threads();                                                    \
        T *part = (T *)calloc((size_t)threads * d * n, sizeof(T));                            \
        T *ds = (T *)calloc((size_t)threads, sizeof(T));                                      \
        _Pragma("omp parallel")                                                               \
        {                                                                                     \
            ICL_FLUSH_BEGIN                                                                   \
            int64_t r0, r1;                                                                   \
            share(rows, 4, &r0, &r1);                                                         \
            const int t = thread_index();                                                     \
            if (r1 > r0)                                                                      \
                backward_rows_##SUFFIX(e + r0 * n, rows, w + r0 * nm, nm,                     \
                                       sim ? sim + r0 * n : NULL, scale, a + r0 * d, cT,      \
                                       r1 - r0, d, n, p, ga + r0 * d,                         \
                                       part + (int64_t)t * d * n, ds + t);                    \
            ICL_FLUSH_END                                                                     \
        }                                                                                     \
        ICL_FLUSH_BEGIN                                                                       \
        for (int64_t k = 0; k < d * n; ++k) {                                                 \
            T total = part[k];                                                                \
            for (int t = 1; t < threads; ++t) total += part[(int64_t)t * d * n + k];          \
            gcT[k] = total;                                                                   \
        }                                                                                     \
        T total = 0;                                                                          \
        for (int t = 0; t < threads; ++t) total += ds[t];                                     \
        *dscale = total;                                                                      \
        ICL_FLUSH_END                                                                         \
        free(part);                                                                           \
        free(ds);                                                                             \
    }

ICL_FUSED(float, f32)
ICL_FUSED(double, f64)
