/* The op harness (test_ops_gpu.c) against the "fakedev" table, on every `make test`: the CPU's
 * kernels behind memory the host cannot touch, so every comparison must pass (the results are
 * the CPU's, bit for bit), and a harness that dereferenced a device buffer, or handed an op a
 * host buffer, would crash here. Then fakedev's own guarantees: its pointers carry the tag, a
 * host dereference of one faults, and a host pointer reaching an op aborts naming the op and
 * the argument. */
#define OPS_HARNESS_BACKEND "fakedev"
#define OPS_HARNESS_SUITE fakedev
#include "tests/gpu/test_ops_gpu.c"

#include <fcntl.h>
#include <signal.h>

static const kernels_ops *fakedev(void) {
  const kernels_ops *t = NULL;
  cr_assert_eq(kernels_get_ops("fakedev", &t), CORE_OK, "%s", core_error_msg());
  return t;
}

TestSuite(fakedev_guard, .fini = free_pools);

Test(fakedev_guard, lookup_and_tag) {
  const kernels_ops *t = fakedev();
  cr_assert_eq(t, kernels_fakedev_ops());
  cr_assert_str_eq(t->name, "fakedev");
  cr_assert_eq(t->device_memory, 1);
  cr_assert_eq(kernels_cpu_ops()->device_memory, 0);
  size_t sizes[] = {0, 1, 4, 1000, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = t->alloc(sizes[i]);
    if (!p) {
      cr_assert_eq(sizes[i], 0, "alloc(%zu) failed", sizes[i]);
      continue;
    }
    uintptr_t u = (uintptr_t)p;
    cr_assert(u & KERNELS_FAKEDEV_TAG, "alloc(%zu) = %p: no tag", sizes[i], p);
    /* without the tag, an ordinary user-space address; with it, a non-canonical one (bits
     * 47..63 of a canonical x86-64 address are all equal) */
    cr_assert_eq((u & ~KERNELS_FAKEDEV_TAG) >> 47, 0, "%p", p);
    cr_assert_neq(u >> 47, 0, "%p is canonical", p);
    /* offsets into a buffer keep the tag, as offsets into device memory stay device memory */
    cr_assert((uintptr_t)((char *)p + sizes[i]) & KERNELS_FAKEDEV_TAG);
    t->free(p);
  }
  t->free(NULL);
}

/* Whatever the sanitizers do, a plain load of a fakedev address, without ASan's shadow check
 * in front of it (that check would fault too, one step earlier). */
__attribute__((noinline, no_sanitize_address)) static float host_read(const float *p) {
  return *(const volatile float *)p;
}

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif

Test(fakedev_guard, host_dereference_faults) {
  const kernels_ops *t = fakedev();
  float one = 1.0f;
  float *d = t->alloc(sizeof(float));
  cr_assert_not_null(d);
  t->to_device(d, &one, sizeof one);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2); /* ASan's SEGV report, if any */
    float x = host_read(d);
    _exit(x == 1.0f ? 0 : 3); /* reached only if the host could read device memory */
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  t->free(d);
#ifdef ASAN /* ASan catches the SIGSEGV, reports it and exits 1 */
  cr_assert(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 1),
            "the host read a fakedev buffer (status 0x%x)", status);
#else
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
            "the host read a fakedev buffer without SIGSEGV (status 0x%x)", status);
#endif
}

/* ---- misuse: each case runs in a child that must die of SIGABRT, saying `needle` ---- */

static const kernels_ops *FD;
static float host_buf[16];
static float *dbuf;
static int32_t host_tok[4];

static void axpy_host_x(void) { FD->axpy(dbuf, 1.0f, host_buf, 4); }
static void gemm_host_c(void) { FD->gemm(host_buf, dbuf, dbuf, 2, 2, 2, 0, 0, 1.0f, 0.0f); }
static void sgd_host_mom(void) { FD->sgd(dbuf, dbuf, host_buf, 4, 0.1f, 0.9f, 0.0f, 1.0f); }
static void embedding_host_tok(void) { FD->embedding_forward(dbuf, host_tok, dbuf, dbuf, 1, 1, 4); }
static void attention_host_scratch(void) {
  FD->attention_backward(dbuf, host_buf, dbuf, dbuf, dbuf, 1, 1, 4, 1);
}
static void sumsq_host(void) { (void)FD->sumsq(host_buf, 4); }
static void to_device_host_dst(void) { FD->to_device(host_buf, host_buf, 4); }
static void to_device_device_src(void) { FD->to_device(dbuf, dbuf, 4); }
static void to_host_device_dst(void) { FD->to_host(dbuf, dbuf, 4); }
static void to_host_host_src(void) { FD->to_host(host_buf, host_buf, 4); }
static void free_host(void) { FD->free(host_buf); }

static void expect_abort(void (*fn)(void), const char *needle) {
  int fdp[2];
  cr_assert_eq(pipe(fdp), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(fdp[0]);
    dup2(fdp[1], 2);
    fn();
    _exit(0); /* not reached when the misuse is caught */
  }
  close(fdp[1]);
  char msg[1024];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof msg - 1 && (r = read(fdp[0], msg + len, sizeof msg - 1 - len)) > 0)
    len += (size_t)r;
  msg[len] = 0;
  close(fdp[0]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
            "%s: expected an abort (status 0x%x), stderr: %s", needle, status, msg);
  cr_assert_not_null(strstr(msg, needle), "expected \"%s\" in: %s", needle, msg);
}

Test(fakedev_guard, host_pointers_abort) {
  FD = fakedev();
  dbuf = FD->alloc(64 * sizeof(float));
  cr_assert_not_null(dbuf);
  expect_abort(axpy_host_x, "fakedev: axpy: argument x ");
  expect_abort(gemm_host_c, "fakedev: gemm: argument c ");
  expect_abort(sgd_host_mom, "fakedev: sgd: argument mom ");
  expect_abort(embedding_host_tok, "fakedev: embedding_forward: argument tok ");
  expect_abort(attention_host_scratch, "fakedev: attention_backward: argument scratch ");
  expect_abort(sumsq_host, "fakedev: sumsq: argument x ");
  expect_abort(to_device_host_dst, "fakedev: to_device: argument dst ");
  expect_abort(to_device_device_src, "fakedev: to_device: argument src_host ");
  expect_abort(to_host_device_dst, "fakedev: to_host: argument dst_host ");
  expect_abort(to_host_host_src, "fakedev: to_host: argument src ");
  expect_abort(free_host, "fakedev: free: argument p ");
  /* what is allowed: NULL where the op takes it (sgd without momentum), empty transfers */
  FD->sgd(dbuf, dbuf + 16, NULL, 16, 0.1f, 0.0f, 0.0f, 1.0f);
  FD->to_device(dbuf, NULL, 0);
  FD->to_host(NULL, dbuf, 0);
  cr_assert_eq(FD->sumsq(NULL, 0), 0.0);
  FD->free(dbuf);
}

/* The wrapper runs the CPU's own kernels: the ops the harness compares with a tolerance give the
 * CPU's bits exactly. */
Test(fakedev_guard, same_bits_as_cpu) {
  G = fakedev();
  H = kernels_cpu_ops();
  rng r = {99};
  int M = 33, N = 47, K = 65, B = 2, TT = 17, C = 24, NH = 3, V = 101;
  float *a = rand_buf(&r, (size_t)M * K, -1, 1), *b = rand_buf(&r, (size_t)K * N, -1, 1);
  float *c = fbuf((size_t)M * N), *gc = dev_poisoned((size_t)M * N);
  H->gemm(c, a, b, M, N, K, 1, 0, 0.5f, 0.0f);
  G->gemm(gc, devf(a, (size_t)M * K), devf(b, (size_t)K * N), M, N, K, 1, 0, 0.5f, 0.0f);
  expect_close("gemm", c, gc, (size_t)M * N, TOL_EXACT);

  size_t n = (size_t)M * V;
  float *x = rand_buf(&r, n, -20, 20), *y = fbuf(n), *gy = dev_poisoned(n);
  float *loss = fbuf(M), *gl = dev_poisoned(M);
  int32_t *tg = rand_tokens(&r, M, V);
  H->softmax_forward(y, x, M, V);
  G->softmax_forward(gy, devf(x, n), M, V);
  expect_close("softmax_forward", y, gy, n, TOL_EXACT);
  H->xent_forward(loss, y, x, tg, M, V, V, 0);
  G->xent_forward(gl, gy, devf(x, n), dev(tg, M * sizeof(int32_t)), M, V, V, 0);
  expect_close("xent_forward", loss, gl, M, TOL_EXACT);

  size_t nqkv = (size_t)B * TT * 3 * C, nout = (size_t)B * TT * C, natt = (size_t)B * NH * TT * TT;
  float *qkv = rand_buf(&r, nqkv, -2, 2), *dout = rand_buf(&r, nout, -1, 1);
  float *out = fbuf(nout), *att = fbuf(natt), *dqkv = fbuf(nqkv), *sc = fbuf(kernels_attention_scratch_floats(TT));
  float *gqkv = devf(qkv, nqkv), *gout = dev_poisoned(nout), *gatt = dev_poisoned(natt);
  float *gdqkv = dev_poisoned(nqkv);
  H->attention_forward(out, att, qkv, B, TT, C, NH);
  G->attention_forward(gout, gatt, gqkv, B, TT, C, NH);
  expect_close("attention_forward", out, gout, nout, TOL_EXACT);
  H->attention_backward(dqkv, sc, dout, qkv, att, B, TT, C, NH);
  G->attention_backward(gdqkv, dev_poisoned(kernels_attention_scratch_floats(TT)), devf(dout, nout), gqkv, gatt, B, TT, C,
                        NH);
  expect_close("attention_backward", dqkv, gdqkv, nqkv, TOL_EXACT);

  size_t np = 10007;
  float *p = rand_buf(&r, np, -1, 1), *g = rand_buf(&r, np, -1, 1), *m = fbuf(np), *v = fbuf(np);
  memset(m, 0, np * sizeof(float));
  memset(v, 0, np * sizeof(float));
  float *gp = devf(p, np), *gg = devf(g, np), *gm = devf(m, np), *gv = devf(v, np);
  H->adamw(p, g, m, v, np, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f);
  G->adamw(gp, gg, gm, gv, np, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f);
  expect_close("adamw p", p, gp, np, TOL_EXACT);
  cr_assert_eq(G->sumsq(gp, np), H->sumsq(p, np), "sumsq");
}
