/* cli/commands.h: the subcommands of the brigade program. Each returns an exit status
 * (0, 1 runtime failure, 2 bad input) after printing any error. */
#ifndef BRIGADE_CLI_COMMANDS_H
#define BRIGADE_CLI_COMMANDS_H

int cli_compile(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_plot(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_sample(int argc, char **argv);
int cli_tune(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_tokenize(int argc, char **argv);

#endif
