/* cli/args.h: strict parsing of command-line values (a bad value is an input error, exit 2). */
#ifndef BRIGADE_CLI_ARGS_H
#define BRIGADE_CLI_ARGS_H

int cli_parse_int(const char *flag, const char *text, int lo, int hi, int *out);
/* A count >= 1 written as an integer or in e-notation ("33554432", "1e8"), at most 1e15. */
int cli_parse_count(const char *flag, const char *text, double *out);

/* The most instructions compile, sim and train build a program of unless --max-instructions says
 * otherwise: 2^25, some 10 to 20 seconds and 3 GB of compiling here (sched_size_estimate). */
#define CLI_MAX_INSTRUCTIONS 33554432.0
/* tune's limit per candidate: it may build a hundred of them */
#define CLI_TUNE_MAX_INSTRUCTIONS 1048576.0
int cli_parse_double(const char *flag, const char *text, double lo, double *out);
/* For "--flag VALUE": the value after argv[*i], advancing *i; an error if there is none. */
int cli_take(int argc, char **argv, int *i, const char **out);
/* Called first at each place of a command's option loop, so at options only, never at a value a
 * flag took (a prompt may be "--x=1"): "--name=value" there becomes the two arguments "--name",
 * "value", in place, *argc one more (main gives every command room for that: 2 argc + 1 slots). */
void cli_arg(int *argc, char **argv, int i);

#endif
