/* relay schedule next */
#include "cmd/cmd.h"

const struct cmd cmd_schedule_next = {
	"schedule next", "\"<cron>\" [--timezone TZ] [--from RFC3339] [-n N]",
	"print the next occurrences of a cron expression", NULL, CMD_PURE, cmd_not_implemented,
};
