/* relay function ls|inspect|validate|match */
#include "cmd/cmd.h"

const struct cmd cmd_function_ls = {
	"function ls", "", "list functions", NULL, CMD_STATE_RO, cmd_not_implemented,
};
const struct cmd cmd_function_inspect = {
	"function inspect", "<name>", "show one function", NULL, CMD_STATE_RO, cmd_not_implemented,
};
const struct cmd cmd_function_validate = {
	"function validate", "[DIR]", "validate every function directory under DIR", NULL, CMD_PURE,
	cmd_not_implemented,
};
const struct cmd cmd_function_match = {
	"function match", "[--dir DIR] [--now RFC3339] EVENT",
	"print the handlers an event would run, in order", NULL, CMD_PURE, cmd_not_implemented,
};
