/* The fakedev test backend (kernels/cpu/ops_fakedev.c). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>

#include "core/error.h"
#include "kernels/ops.h"

static const kernels_ops *cpu(void) { return kernels_cpu_ops(); }

/* fakedev: its buffers carry the tag (bit 62: the host cannot dereference them), ops on them
 * give the CPU's bits, data moves only through to_device / to_host, and a host pointer handed
 * to an op aborts the program instead of passing silently. */
Test(fakedev, buffers_are_not_host_memory) {
  const kernels_ops *f = NULL;
  cr_assert_eq(kernels_get_ops("fakedev", &f), CORE_OK);
  cr_assert_str_eq(f->name, "fakedev");
  cr_assert_eq(f->device_memory, 1);
  cr_assert_eq(cpu()->device_memory, 0);
  float host[5] = {1, -2, 3, -4, 5}, back[5] = {0}, want[5];
  float *d = f->alloc(sizeof host);
  cr_assert((uintptr_t)d & ((uintptr_t)1 << 62), "fakedev memory %p is a plain host address", (void *)d);
  f->to_device(d, host, sizeof host);
  f->relu_forward(d, d, 5);
  f->to_host(back, d, sizeof back);
  cpu()->relu_forward(want, host, 5);
  cr_assert_arr_eq(back, want, sizeof want);
  cr_assert_eq(f->sumsq(d, 5), cpu()->sumsq(want, 5));
  f->free(d);
}

Test(fakedev, refuses_host_pointers, .signal = SIGABRT) {
  const kernels_ops *f = NULL;
  cr_assert_eq(kernels_get_ops("fakedev", &f), CORE_OK);
  float host[4] = {0};
  f->zero(host, 4); /* a host buffer where backend memory belongs: aborts */
}
