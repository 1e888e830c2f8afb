/* cli/args.h: strict parsing of command-line values (a bad value is an input error, exit 2). */
#ifndef BRIGADE_CLI_ARGS_H
#define BRIGADE_CLI_ARGS_H

int cli_parse_int(const char *flag, const char *text, int lo, int hi, int *out);
int cli_parse_double(const char *flag, const char *text, double lo, double *out);
/* For "--flag VALUE": the value after argv[*i], advancing *i; an error if there is none. */
int cli_take(int argc, char **argv, int *i, const char **out);

#endif
