/* commands.h - the subcommands of the `pagellm` binary, one file each
 * (cli/cmd_<name>.c; bench in bench/cmd_bench.c). Each returns the process exit code:
 * 0 ok, 1 runtime failure, 2 usage error. */
#ifndef PL_CLI_COMMANDS_H
#define PL_CLI_COMMANDS_H

int cmd_inspect(int argc, char **argv);
int cmd_kvcalc(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_template(int argc, char **argv);

#endif
