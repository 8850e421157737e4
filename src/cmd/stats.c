/* relay stats: renders the global snapshot from the state database. */
#include "cmd/cmd.h"

const struct cmd cmd_stats = {
	"stats", "", "show current operational statistics", NULL, CMD_STATE_RO,
	cmd_not_implemented,
};
