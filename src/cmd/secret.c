/* relay secret ls|set|rm */
#include "cmd/cmd.h"

const struct cmd cmd_secret_ls = {
	"secret ls", "", "list secret names", NULL, CMD_FILES, cmd_not_implemented,
};
const struct cmd cmd_secret_set = {
	"secret set", "NAME", "store a secret read from the terminal or stdin", NULL, CMD_FILES,
	cmd_not_implemented,
};
const struct cmd cmd_secret_rm = {
	"secret rm", "NAME", "remove a secret", NULL, CMD_FILES, cmd_not_implemented,
};
