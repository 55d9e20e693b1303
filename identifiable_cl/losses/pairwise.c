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
 * Built at first use by identifiable_cl.losses.native with the machine's C compiler.
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
#endif

#define TILE 512 /* candidates per pass of grad: tiles of g and cT rows stay in L1 */
#define WIDTH 32 /* candidates per register block of sim */

/* term(t) = |t|^p (p >= 1), slope(t) = d|t|^p/dt; for p = 0, x * c and c. */
#define TERM0(x, c, t, ABS) ((x) * (c))
#define TERM1(x, c, t, ABS) ABS(t)
#define TERM2(x, c, t, ABS) ((t) * (t))
#define TERM3(x, c, t, ABS) ((t) * (t) * ABS(t))
#define SLOPE0(c, t, T, ABS) (c)
#define SLOPE1(c, t, T, ABS) ((T)(((t) > 0) - ((t) < 0)))
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
        for (int64_t i = 0; i < rows; ++i) {                                                  \
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
    void icl_sim_##SUFFIX(const T *a, const T *cT, T *s, int64_t rows, int64_t d, int64_t n,      \
                          int p) {                                                               \
        if (p == 0) sim_##SUFFIX##_p0(a, cT, s, rows, d, n);                                     \
        if (p == 1) sim_##SUFFIX##_p1(a, cT, s, rows, d, n);                                     \
        if (p == 2) sim_##SUFFIX##_p2(a, cT, s, rows, d, n);                                     \
        if (p == 3) sim_##SUFFIX##_p3(a, cT, s, rows, d, n);                                     \
    }                                                                                            \
    void icl_grad_##SUFFIX(const T *g, const T *a, const T *cT, T *ga, T *gcT, int64_t rows,     \
                           int64_t d, int64_t n, int p) {                                        \
        if (p == 0) grad_##SUFFIX##_p0(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 1) grad_##SUFFIX##_p1(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 2) grad_##SUFFIX##_p2(g, a, cT, ga, gcT, rows, d, n);                           \
        if (p == 3) grad_##SUFFIX##_p3(g, a, cT, ga, gcT, rows, d, n);                           \
    }

ICL_KERNELS(float, f32, fabsf)
ICL_KERNELS(double, f64, fabs)

/* x[j] = exp(x[j]) for j < n: glibc's vector exp (libmvec) in 8/4-lane chunks where present. */
static void exp_f32(float *x, int64_t n) {
    int64_t j = 0;
#ifdef ICL_MVEC
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _ZGVdN8v_expf(_mm256_loadu_ps(x + j)));
#endif
    for (; j < n; ++j) x[j] = expf(x[j]);
}

static void exp_f64(double *x, int64_t n) {
    int64_t j = 0;
#ifdef ICL_MVEC
    for (; j + 4 <= n; j += 4) _mm256_storeu_pd(x + j, _ZGVdN4v_exp(_mm256_loadu_pd(x + j)));
#endif
    for (; j < n; ++j) x[j] = exp(x[j]);
}

#define ICL_FUSED(T, SUFFIX)                                                                  \
    void icl_forward_##SUFFIX(const T *a, const T *cT, int64_t rows, int64_t d, int64_t n,    \
                              int p, T scale, const T *mult, int nm, const int64_t *excl,     \
                              T floor, T *e, int64_t ld, T *sim, T *top, T *sums) {           \
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
    void icl_backward_##SUFFIX(const T *e, int64_t ld, const T *w, int nm, const T *sim,      \
                               T scale,                                                       \
                               const T *a, const T *cT, int64_t rows, int64_t d, int64_t n,   \
                               int p, T *ga, T *gcT, T *dscale) {                             \
        T *g = (T *)malloc(sizeof(T) * n);                                                    \
        T ds = 0;                                                                             \
        for (int64_t i = 0; i < rows; ++i) {                                                  \
            const T w0 = w[i * nm];                                                           \
            const T *restrict e0 = e + i * n;                                                 \
            for (int64_t j = 0; j < n; ++j) g[j] = w0 * e0[j];                                \
            for (int m = 1; m < nm; ++m) {                                                    \
                const T wm = w[i * nm + m];                                                   \
                const T *restrict em = e + (int64_t)m * ld * n + i * n;                       \
                for (int64_t j = 0; j < n; ++j) g[j] = g[j] + wm * em[j];                     \
            }                                                                                 \
            if (sim) {                                                                        \
                const T *restrict s = sim + i * n;                                            \
                T total = 0;                                                                  \
                _Pragma("omp simd reduction(+ : total)")                                      \
                for (int64_t j = 0; j < n; ++j) total += g[j] * s[j];                         \
                ds += total;                                                                  \
            }                                                                                 \
            for (int64_t j = 0; j < n; ++j) g[j] = g[j] * scale;                              \
            icl_grad_##SUFFIX(g, a + i * d, cT, ga + i * d, gcT, 1, d, n, p);                 \
        }                                                                                     \
        *dscale = ds;                                                                         \
        free(g);                                                                              \
    }

ICL_FUSED(float, f32)
ICL_FUSED(double, f64)
