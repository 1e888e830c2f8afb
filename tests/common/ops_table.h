/* tests/common/ops_table.h: completeness of an op table, for the tests of every backend. */
#ifndef BRIGADE_TESTS_OPS_TABLE_H
#define BRIGADE_TESTS_OPS_TABLE_H

#include "kernels/ops.h"

/* The name of the first entry of t that is NULL, or NULL when every entry is set. */
const char *test_ops_missing(const kernels_ops *t);

#endif
